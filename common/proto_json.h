// Conversions between nlohmann::json and protobuf messages (Struct and any
// message through protobuf's JSON mapping).
#ifndef DET_COMMON_PROTO_JSON_H_
#define DET_COMMON_PROTO_JSON_H_

#include <string>

#include <google/protobuf/message.h>
#include <google/protobuf/struct.pb.h>
#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace det {

// `json` must be an object (or null, giving an empty Struct).
absl::StatusOr<google::protobuf::Struct> JsonToStruct(const nlohmann::json& json);
nlohmann::json StructToJson(const google::protobuf::Struct& s);

// Protobuf's canonical JSON (proto field names, defaults printed, map and
// Struct keys in sorted order so that equal messages print equal bytes),
// except that 64-bit integer fields whose value fits in 2^53 print as JSON
// numbers instead of strings (ids are int64); indented when `pretty`; InvalidArgument when protobuf cannot convert the
// message. Thread-safe.
absl::StatusOr<std::string> MessageToJsonOrError(const google::protobuf::Message& message, bool pretty = false);
// As MessageToJsonOrError, "{}" when the conversion fails.
std::string MessageToJson(const google::protobuf::Message& message, bool pretty = false);
// Parses protobuf JSON into `message`; unknown fields are ignored.
absl::Status JsonToMessage(const std::string& json, google::protobuf::Message* message);

}  // namespace det

#endif  // DET_COMMON_PROTO_JSON_H_
