#include "master/service/parse_error_interceptor.h"

#include <google/protobuf/descriptor.h>

#include "absl/strings/str_cat.h"

namespace det::master {
namespace {

using grpc::experimental::InterceptionHookPoints;

// "/pkg.Service/Method" names a method of a service linked into the master.
bool KnownMethod(const std::string& method) {
  if (method.size() < 2 || method[0] != '/') return false;
  std::string full = method.substr(1);
  const size_t slash = full.find('/');
  if (slash == std::string::npos) return false;
  full[slash] = '.';
  return google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full) != nullptr;
}

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(std::string method) : method_(std::move(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status st = methods->GetSendStatus();
      if (st.error_code() == grpc::StatusCode::UNIMPLEMENTED && st.error_message().empty() && KnownMethod(method_)) {
        methods->ModifySendStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, UnparsableRequestMessage(method_)));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
};

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new ParseErrorInterceptor(info->method() == nullptr ? "" : info->method());
  }
};

}  // namespace

std::string UnparsableRequestMessage(const std::string& method) {
  return absl::StrCat("the ", method,
                      " request could not be parsed: a text (string) field holds bytes that are not UTF-8, or the "
                      "message is malformed; send UTF-8 text (save files such as the config as UTF-8)");
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> ParseErrorInterceptorFactory() {
  return std::make_unique<Factory>();
}

}  // namespace det::master
