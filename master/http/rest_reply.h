// How the REST API answers: a response message as protobuf JSON, and an
// error as {"code": <absl code>, "error": "<CODE_NAME>", "message": "..."}
// with the HTTP status of its code (HttpCode).
#ifndef DET_MASTER_HTTP_REST_REPLY_H_
#define DET_MASTER_HTTP_REST_REPLY_H_

#include <string>

#include <google/protobuf/message.h>
#include <httplib.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace det::master {

// The HTTP status of a canonical code: InvalidArgument and OutOfRange 400,
// Unauthenticated 401, PermissionDenied 403, NotFound 404, AlreadyExists and
// FailedPrecondition 409, ResourceExhausted 429, Unimplemented 501,
// Unavailable 503, OK 200, anything else 500.
int HttpCode(absl::StatusCode code);

// The error's JSON object (one line; invalid UTF-8 in the message, which may
// quote a client's bytes, is replaced rather than thrown on).
std::string ErrorJson(const absl::Status& status);

// Answers `status` (not OK) as the error JSON with its HTTP status (401
// with "WWW-Authenticate: Bearer").
void SendError(httplib::Response& res, const absl::Status& status);

// `message` as protobuf JSON with the options of common/proto_json.h's
// MessageToJson (proto field names, defaults printed), but deterministic:
// map entries (google.protobuf.Struct keys included) in key order, so the
// same message always gives the same bytes (protobuf's own conversion
// follows hash-map order). Internal when protobuf cannot convert it.
absl::StatusOr<std::string> MessageJson(const google::protobuf::Message& message);

// Answers 200 with `message` as MessageJson (500 when that fails).
void SendMessage(httplib::Response& res, const google::protobuf::Message& message);

}  // namespace det::master

#endif  // DET_MASTER_HTTP_REST_REPLY_H_
