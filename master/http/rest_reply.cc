#include "master/http/rest_reply.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/proto_json.h"

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
  absl::StatusOr<std::string> json = MessageToJsonOrError(message);
  if (!json.ok()) return absl::InternalError(json.status().message());
  return json;
}

void SendMessage(httplib::Response& res, const google::protobuf::Message& message) {
  absl::StatusOr<std::string> json = MessageJson(message);
  if (!json.ok()) return SendError(res, json.status());
  res.status = 200;
  res.set_content(*json, "application/json");
}

}  // namespace det::master
