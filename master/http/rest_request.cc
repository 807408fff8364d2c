#include "master/http/rest_request.h"

#include <cstdint>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace det::master {
namespace {

namespace pb = google::protobuf;

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || absl::ascii_isdigit(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '_') return false;
  }
  return true;
}

// `text` for an error message: quoted, at most 64 bytes.
std::string Quote(absl::string_view text) {
  constexpr size_t kMax = 64;
  if (text.size() <= kMax) return absl::StrCat("'", text, "'");
  return absl::StrCat("'", text.substr(0, kMax), "...'");
}

absl::Status Bad(const pb::FieldDescriptor* field, absl::string_view what, absl::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat(field->name(), ": ", what, ": ", Quote(text)));
}

// A signed integer of the field's width.
absl::StatusOr<int64_t> ParseInt(const pb::FieldDescriptor* field, absl::string_view text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) {
    // Only digits (that overflow int64) are out of range; anything else is no integer.
    absl::string_view digits = absl::StripPrefix(text, "-");
    bool all_digits = !digits.empty() && digits.find_first_not_of("0123456789") == absl::string_view::npos;
    return Bad(field, all_digits ? "out of range" : "not an integer", text);
  }
  if (v < lo || v > hi) return Bad(field, "out of range", text);
  return v;
}

absl::StatusOr<uint64_t> ParseUint(const pb::FieldDescriptor* field, absl::string_view text, uint64_t hi) {
  uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) return Bad(field, "not a non-negative integer", text);
  if (v > hi) return Bad(field, "out of range", text);
  return v;
}

absl::Status SetInteger(pb::Message* m, const pb::FieldDescriptor* f, absl::string_view text) {
  const pb::Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32: {
      auto v = ParseInt(f, text, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
      if (!v.ok()) return v.status();
      rep ? r->AddInt32(m, f, static_cast<int32_t>(*v)) : r->SetInt32(m, f, static_cast<int32_t>(*v));
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      auto v = ParseInt(f, text, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
      if (!v.ok()) return v.status();
      rep ? r->AddInt64(m, f, *v) : r->SetInt64(m, f, *v);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_UINT32: {
      auto v = ParseUint(f, text, std::numeric_limits<uint32_t>::max());
      if (!v.ok()) return v.status();
      rep ? r->AddUInt32(m, f, static_cast<uint32_t>(*v)) : r->SetUInt32(m, f, static_cast<uint32_t>(*v));
      return absl::OkStatus();
    }
    default: {  // CPPTYPE_UINT64
      auto v = ParseUint(f, text, std::numeric_limits<uint64_t>::max());
      if (!v.ok()) return v.status();
      rep ? r->AddUInt64(m, f, *v) : r->SetUInt64(m, f, *v);
      return absl::OkStatus();
    }
  }
}

absl::Status SetFloating(pb::Message* m, const pb::FieldDescriptor* f, absl::string_view text) {
  const pb::Reflection* r = m->GetReflection();
  double v = 0;
  if (!absl::SimpleAtod(text, &v)) return Bad(f, "not a number", text);
  if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_FLOAT) {
    f->is_repeated() ? r->AddFloat(m, f, static_cast<float>(v)) : r->SetFloat(m, f, static_cast<float>(v));
  } else {
    f->is_repeated() ? r->AddDouble(m, f, v) : r->SetDouble(m, f, v);
  }
  return absl::OkStatus();
}

absl::Status SetBool(pb::Message* m, const pb::FieldDescriptor* f, absl::string_view text) {
  bool v = false;
  if (text == "true" || text == "1") {
    v = true;
  } else if (text != "false" && text != "0") {
    return Bad(f, "not a bool (true or false)", text);
  }
  f->is_repeated() ? m->GetReflection()->AddBool(m, f, v) : m->GetReflection()->SetBool(m, f, v);
  return absl::OkStatus();
}

// "SORT_BY_" for SortBy, "CHECKPOINT_STATE_" for CheckpointState: the
// enum's name in upper snake case, which prefixes its values by convention.
std::string EnumValuePrefix(const pb::EnumDescriptor* type) {
  std::string prefix;
  for (char c : type->name()) {
    if (absl::ascii_isupper(c) && !prefix.empty()) prefix += '_';
    prefix += absl::ascii_toupper(c);
  }
  return prefix + "_";
}

// A value's short name: "searcher_metric" for SORT_BY_SEARCHER_METRIC.
std::string ShortEnumName(const pb::EnumValueDescriptor* value, const std::string& prefix) {
  return absl::AsciiStrToLower(absl::StripPrefix(value->name(), prefix));
}

// "...: 'x'; allowed: uuid, trial_id, ..." (every value but *_UNSPECIFIED).
absl::Status BadEnum(const pb::FieldDescriptor* f, const std::string& prefix, absl::string_view text) {
  const pb::EnumDescriptor* type = f->enum_type();
  std::string allowed;
  for (int i = 0; i < type->value_count(); ++i) {
    if (absl::EndsWith(type->value(i)->name(), "_UNSPECIFIED")) continue;
    absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", ShortEnumName(type->value(i), prefix));
  }
  return absl::InvalidArgumentError(absl::StrCat(f->name(), ": not a value of ", type->full_name(), ": ", Quote(text),
                                                 "; allowed: ", allowed, " (or ", prefix, "NAME, or the number)"));
}

absl::Status SetEnum(pb::Message* m, const pb::FieldDescriptor* f, absl::string_view text) {
  const pb::EnumDescriptor* type = f->enum_type();
  const std::string prefix = EnumValuePrefix(type);
  const std::string upper = absl::AsciiStrToUpper(text);
  const pb::EnumValueDescriptor* value = type->FindValueByName(upper);
  if (value == nullptr && !upper.empty()) value = type->FindValueByName(prefix + upper);
  int number = 0;
  if (value == nullptr && absl::SimpleAtoi(text, &number)) value = type->FindValueByNumber(number);
  if (value == nullptr) return BadEnum(f, prefix, text);
  f->is_repeated() ? m->GetReflection()->AddEnum(m, f, value) : m->GetReflection()->SetEnum(m, f, value);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PathTemplate> CompilePathTemplate(absl::string_view path_template) {
  if (!absl::ConsumePrefix(&path_template, "/")) {
    return absl::InvalidArgumentError("a path template must start with '/'");
  }
  PathTemplate t;
  for (absl::string_view segment : absl::StrSplit(path_template, '/')) {
    PathTemplate::Segment s;
    if (segment.size() >= 2 && segment.front() == '{' && segment.back() == '}') {
      segment = segment.substr(1, segment.size() - 2);
      if (!IsIdentifier(segment)) {
        return absl::InvalidArgumentError(absl::StrCat("bad parameter name '", segment, "' in the path template"));
      }
      s.param = true;
      t.params.emplace_back(segment);
    } else if (segment.find_first_of("{}") != absl::string_view::npos) {
      return absl::InvalidArgumentError("a parameter must be a whole segment of the path template");
    }
    s.text = std::string(segment);
    t.segments.push_back(std::move(s));
  }
  return t;
}

bool MatchPathTemplate(const PathTemplate& t, absl::string_view path, std::vector<std::string>* values) {
  if (!absl::ConsumePrefix(&path, "/")) return false;
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/');
  if (parts.size() != t.segments.size()) return false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PathTemplate::Segment& s = t.segments[i];
    if (s.param ? parts[i].empty() : parts[i] != s.text) return false;
  }
  values->clear();
  for (size_t i = 0; i < parts.size(); ++i) {
    if (t.segments[i].param) values->emplace_back(parts[i]);
  }
  return true;
}

const pb::FieldDescriptor* FindFieldByAnyName(const pb::Descriptor* type, absl::string_view name) {
  const pb::FieldDescriptor* f = type->FindFieldByName(std::string(name));
  if (f != nullptr) return f;
  for (int i = 0; i < type->field_count(); ++i) {
    if (type->field(i)->json_name() == name) return type->field(i);
  }
  return nullptr;
}

bool IsTextSettable(const pb::FieldDescriptor* field) {
  return field->cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE;
}

absl::Status SetFieldFromText(pb::Message* message, const pb::FieldDescriptor* field, absl::string_view text) {
  if (!IsTextSettable(field)) {
    return absl::InvalidArgumentError(absl::StrCat(field->name(), ": cannot be set from text"));
  }
  switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return SetInteger(message, field, text);
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return SetFloating(message, field, text);
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return SetBool(message, field, text);
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      return SetEnum(message, field, text);
    default: {  // CPPTYPE_STRING (string and bytes)
      const pb::Reflection* r = message->GetReflection();
      field->is_repeated() ? r->AddString(message, field, std::string(text))
                           : r->SetString(message, field, std::string(text));
      return absl::OkStatus();
    }
  }
}

absl::Status SetFieldsFromPairs(const std::multimap<std::string, std::string>& pairs, pb::Message* message) {
  for (const auto& [name, value] : pairs) {
    const pb::FieldDescriptor* field = FindFieldByAnyName(message->GetDescriptor(), name);
    if (field == nullptr) continue;
    absl::Status st = SetFieldFromText(message, field, value);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

std::multimap<std::string, std::string> ParseFixedPairs(absl::string_view fixed) {
  std::multimap<std::string, std::string> out;
  for (absl::string_view pair : absl::StrSplit(fixed, '&', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    out.insert(std::move(kv));
  }
  return out;
}

}  // namespace det::master
