#include "common/proto_json.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/type_resolver.h>
#include <google/protobuf/util/type_resolver_util.h>

#include "absl/strings/str_cat.h"

namespace det {

absl::StatusOr<google::protobuf::Struct> JsonToStruct(const nlohmann::json& json) {
  google::protobuf::Struct s;
  if (json.is_null()) return s;
  if (!json.is_object()) return absl::InvalidArgumentError(absl::StrCat("expected a JSON object, got ", json.dump()));
  auto st = google::protobuf::util::JsonStringToMessage(json.dump(), &s);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("cannot convert JSON to Struct: ", st.ToString()));
  return s;
}

nlohmann::json StructToJson(const google::protobuf::Struct& s) {
  std::string out;
  auto st = google::protobuf::util::MessageToJsonString(s, &out);
  if (!st.ok()) return nlohmann::json::object();
  auto j = nlohmann::json::parse(out, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

absl::StatusOr<std::string> MessageToJsonOrError(const google::protobuf::Message& message, bool pretty) {
  namespace pb = google::protobuf;
  static constexpr char kTypeUrlPrefix[] = "type.googleapis.com";
  // Thread-safe: it only reads the (immutable) generated pool.
  static pb::util::TypeResolver* const resolver =
      pb::util::NewTypeResolverForDescriptorPool(kTypeUrlPrefix, pb::DescriptorPool::generated_pool());
  // Through the deterministic binary form, so that map entries (a Struct's
  // keys) come out in key order and equal messages print the same bytes.
  std::string binary;
  {
    pb::io::StringOutputStream stream(&binary);
    pb::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!message.SerializeToCodedStream(&coded)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot serialize ", message.GetTypeName()));
    }
  }
  pb::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  options.add_whitespace = pretty;
  std::string out;
  auto st = pb::util::BinaryToJsonString(resolver, absl::StrCat(kTypeUrlPrefix, "/", message.GetTypeName()), binary,
                                         &out, options);
  if (!st.ok()) return absl::InvalidArgumentError(st.ToString());
  return out;
}

std::string MessageToJson(const google::protobuf::Message& message, bool pretty) {
  return MessageToJsonOrError(message, pretty).value_or("{}");
}

absl::Status JsonToMessage(const std::string& json, google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto st = google::protobuf::util::JsonStringToMessage(json, message, options);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("invalid JSON request body: ", st.ToString()));
  return absl::OkStatus();
}

}  // namespace det
