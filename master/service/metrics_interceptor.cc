#include "master/service/metrics_interceptor.h"

#include <chrono>
#include <string>
#include <utility>

namespace det::master {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::ServerRpcInfo;

class MetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(MasterMetrics* metrics, std::string method, bool stream)
      : metrics_(metrics), method_(std::move(method)), stream_(stream), began_(std::chrono::steady_clock::now()) {
    if (stream_) metrics_->StreamOpened(method_);
  }
  ~MetricsInterceptor() override {
    if (stream_) metrics_->StreamClosed(method_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began_).count();
      metrics_->ObserveGrpc(method_, static_cast<int>(methods->GetSendStatus().error_code()), seconds);
    }
    methods->Proceed();
  }

 private:
  MasterMetrics* const metrics_;
  const std::string method_;
  const bool stream_;
  const std::chrono::steady_clock::time_point began_;
};

class Factory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(MasterMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
    const bool stream =
        info->type() == ServerRpcInfo::Type::SERVER_STREAMING || info->type() == ServerRpcInfo::Type::BIDI_STREAMING;
    return new MetricsInterceptor(metrics_, info->method() == nullptr ? "" : info->method(), stream);
  }

 private:
  MasterMetrics* const metrics_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MetricsInterceptorFactory(
    MasterMetrics* metrics) {
  return std::make_unique<Factory>(metrics);
}

}  // namespace det::master
