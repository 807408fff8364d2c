#include "master/http/rest_reply.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/type_resolver.h>
#include <google/protobuf/util/type_resolver_util.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace det::master {

int HttpCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

std::string ErrorJson(const absl::Status& status) {
  nlohmann::json body = {{"code", static_cast<int>(status.code())},
                         {"error", absl::StatusCodeToString(status.code())},
                         {"message", std::string(status.message())}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void SendError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpCode(status.code());
  if (res.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(ErrorJson(status), "application/json");
}

absl::StatusOr<std::string> MessageJson(const google::protobuf::Message& message) {
  namespace pb = google::protobuf;
  static constexpr char kTypeUrlPrefix[] = "type.googleapis.com";
  // Thread-safe: it only reads the (immutable) generated pool.
  static pb::util::TypeResolver* const resolver =
      pb::util::NewTypeResolverForDescriptorPool(kTypeUrlPrefix, pb::DescriptorPool::generated_pool());
  std::string binary;
  {
    pb::io::StringOutputStream stream(&binary);
    pb::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);  // map entries in key order
    if (!message.SerializeToCodedStream(&coded)) {
      return absl::InternalError(absl::StrCat("cannot serialize ", message.GetTypeName()));
    }
  }
  // The options of common/proto_json.h's MessageToJson.
  pb::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  auto st = pb::util::BinaryToJsonString(resolver, absl::StrCat(kTypeUrlPrefix, "/", message.GetTypeName()), binary,
                                         &out, options);
  if (!st.ok()) return absl::InternalError(absl::StrCat("cannot convert ", message.GetTypeName(), " to JSON: ",
                                                        st.message().as_string()));
  return out;
}

void SendMessage(httplib::Response& res, const google::protobuf::Message& message) {
  absl::StatusOr<std::string> json = MessageJson(message);
  if (!json.ok()) return SendError(res, json.status());
  res.status = 200;
  res.set_content(*json, "application/json");
}

}  // namespace det::master
