#include "common/proto_json.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/type_resolver.h>
#include <google/protobuf/util/type_resolver_util.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace det {
namespace {

namespace pb = google::protobuf;

bool IsInt64(const pb::FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

// Protobuf's JSON mapping prints 64-bit integers as strings. Ids are int64
// but stay far below 2^53, so a JSON client (the dashboard, curl | jq)
// should see numbers: a string that holds an integer of at most 2^53 in
// magnitude becomes a number again. Well-known types (Timestamp, Struct,
// Duration) keep their own mapping.
void Int64StringsToNumbers(const pb::Descriptor* d, nlohmann::ordered_json& j);

void FixValue(const pb::FieldDescriptor* f, nlohmann::ordered_json& v) {
  if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
    const pb::Descriptor* m = f->message_type();
    if (m->file()->package() == "google.protobuf") return;
    Int64StringsToNumbers(m, v);
    return;
  }
  if (!IsInt64(f) || !v.is_string()) return;
  const std::string& s = v.get_ref<const std::string&>();
  constexpr long double kMaxExact = 9007199254740992.0L;  // 2^53
  errno = 0;
  char* end = nullptr;
  long double x = std::strtold(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno != 0 || x > kMaxExact || x < -kMaxExact) return;
  if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_UINT64) {
    v = static_cast<uint64_t>(std::strtoull(s.c_str(), nullptr, 10));
  } else {
    v = static_cast<int64_t>(std::strtoll(s.c_str(), nullptr, 10));
  }
}

void Int64StringsToNumbers(const pb::Descriptor* d, nlohmann::ordered_json& j) {
  if (!j.is_object()) return;
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    auto it = j.find(f->name());
    if (it == j.end()) continue;
    if (f->is_map()) {
      if (!it->is_object()) continue;
      const pb::FieldDescriptor* value = f->message_type()->map_value();
      for (auto& [key, v] : it->items()) FixValue(value, v);
    } else if (f->is_repeated()) {
      if (!it->is_array()) continue;
      for (auto& v : *it) FixValue(f, v);
    } else {
      FixValue(f, *it);
    }
  }
}

}  // namespace

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
  auto j = nlohmann::ordered_json::parse(out, nullptr, false);
  if (j.is_discarded()) return out;
  Int64StringsToNumbers(message.GetDescriptor(), j);
  return j.dump(pretty ? 2 : -1);
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
