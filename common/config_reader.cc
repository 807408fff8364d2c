#include "common/config_reader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/yaml_limits.h"
#include "yaml-cpp/yaml.h"

namespace det {
namespace {

bool IsDigits(std::string_view s, bool (*pred)(unsigned char)) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!pred(static_cast<unsigned char>(c))) return false;
  }
  return true;
}
bool IsDec(unsigned char c) { return c >= '0' && c <= '9'; }
bool IsOct(unsigned char c) { return c >= '0' && c <= '7'; }
bool IsHex(unsigned char c) { return absl::ascii_isxdigit(c); }

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsCoreFloat(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && IsDec(s[i])) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && IsDec(s[i])) ++i, ++frac_digits;
  }
  if (int_digits == 0 && frac_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    size_t exp_digits = 0;
    while (i < s.size() && IsDec(s[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

std::optional<nlohmann::json> ParseInteger(std::string_view digits, int base, bool negative) {
  uint64_t magnitude = 0;
  for (char c : digits) {
    int d = IsDec(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10;
    if (magnitude > (std::numeric_limits<uint64_t>::max() - d) / base) return std::nullopt;
    magnitude = magnitude * base + d;
  }
  if (!negative) {
    if (magnitude <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return nlohmann::json(static_cast<int64_t>(magnitude));
    }
    return nlohmann::json(magnitude);
  }
  if (magnitude <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return nlohmann::json(-static_cast<int64_t>(magnitude));
  }
  if (magnitude == static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1) {
    return nlohmann::json(std::numeric_limits<int64_t>::min());
  }
  return std::nullopt;
}

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, at most
// U+10FFFF. JSON strings must be UTF-8 (nlohmann::json::dump throws on
// anything else), so the converter rejects other bytes up front.
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    uint32_t cp;
    uint32_t min;
    if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (int k = 1; k <= n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

class YamlConverter {
 public:
  YamlConverter(ConfigSource* source, int max_depth) : source_(source), max_depth_(max_depth) {}

  // CheckYamlLimits has bounded the expansion; the depth check here only
  // guards the recursion should a caller skip it.
  absl::StatusOr<nlohmann::json> Convert(const YAML::Node& node, const std::string& path, int depth) {
    if (depth > max_depth_) {
      return source_->Error(path, absl::StrCat("field '", path, "' is nested more than ", max_depth_,
                                               " levels deep; the limit is ", max_depth_));
    }
    switch (node.Type()) {
      case YAML::NodeType::Undefined:
      case YAML::NodeType::Null:
        return nlohmann::json(nullptr);
      case YAML::NodeType::Scalar: {
        if (!IsValidUtf8(node.Scalar())) {
          if (!node.Mark().is_null()) source_->lines[path] = node.Mark().line + 1;
          return source_->Error(path, path.empty() ? "the config is not valid UTF-8"
                                                   : absl::StrCat("field '", path, "' is not valid UTF-8"));
        }
        const std::string& tag = node.Tag();
        if (tag == "?") return ResolvePlainYamlScalar(node.Scalar());
        if (tag == "tag:yaml.org,2002:int" || tag == "tag:yaml.org,2002:float" ||
            tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null") {
          return ResolvePlainYamlScalar(node.Scalar());
        }
        return nlohmann::json(node.Scalar());  // "!" (quoted/block) and any other tag
      }
      case YAML::NodeType::Sequence: {
        nlohmann::json out = nlohmann::json::array();
        size_t i = 0;
        for (const YAML::Node& item : node) {  // *it is a prvalue; binding extends its life
          std::string item_path = absl::StrCat(path, "[", i, "]");
          if (!item.Mark().is_null()) source_->lines[item_path] = item.Mark().line + 1;
          auto value = Convert(item, item_path, depth + 1);
          if (!value.ok()) return value.status();
          out.push_back(*std::move(value));
          ++i;
        }
        return out;
      }
      case YAML::NodeType::Map: {
        nlohmann::json out = nlohmann::json::object();
        for (auto it = node.begin(); it != node.end(); ++it) {
          // Copies: the iterator's pair is a temporary.
          const YAML::Node key = it->first;
          const YAML::Node value = it->second;
          int line = key.Mark().is_null() ? 0 : key.Mark().line + 1;
          if (!key.IsScalar() && !key.IsNull()) {
            if (line > 0) source_->lines[path] = line;
            return source_->Error(path, absl::StrCat("keys of ", path.empty() ? "the config" : "field '" + path + "'",
                                                     " must be scalars"));
          }
          std::string name = key.IsNull() ? "" : key.Scalar();
          if (!IsValidUtf8(name)) {
            if (line > 0) source_->lines[path] = line;
            return source_->Error(path, absl::StrCat("a key of ", path.empty() ? "the config" : "field '" + path + "'",
                                                     " is not valid UTF-8"));
          }
          std::string child = JoinPath(path, name);
          if (out.contains(name)) {
            if (line > 0) source_->lines[child] = line;
            return source_->Error(child, absl::StrCat("duplicate field '", child, "'"));
          }
          if (line > 0) source_->lines[child] = line;
          auto converted = Convert(value, child, depth + 1);
          if (!converted.ok()) return converted.status();
          out[name] = *std::move(converted);
        }
        return out;
      }
    }
    return nlohmann::json(nullptr);
  }

 private:
  ConfigSource* source_;
  int max_depth_;
};

bool IsScalar(const nlohmann::json& v) { return v.is_string() || v.is_number() || v.is_boolean(); }

std::string ScalarText(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

int ConfigSource::LineOf(std::string_view path) const {
  if (path.empty()) return 0;
  auto it = lines.find(std::string(path));
  return it == lines.end() ? 0 : it->second;
}

absl::Status ConfigSource::Error(std::string_view line_path, std::string_view message) const {
  int line = LineOf(line_path);
  if (line > 0) return absl::InvalidArgumentError(absl::StrCat(name, ":", line, ": ", std::string(message)));
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", std::string(message)));
}

std::string JoinPath(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return absl::StrCat(std::string(parent), ".", std::string(key));
}

nlohmann::json ResolvePlainYamlScalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  std::string_view v = s;
  if (v.size() > 2 && v[0] == '0' && v[1] == 'x' && IsDigits(v.substr(2), IsHex)) {
    if (auto n = ParseInteger(v.substr(2), 16, false)) return *n;
    return s;
  }
  if (v.size() > 2 && v[0] == '0' && v[1] == 'o' && IsDigits(v.substr(2), IsOct)) {
    if (auto n = ParseInteger(v.substr(2), 8, false)) return *n;
    return s;
  }
  bool negative = !v.empty() && v[0] == '-';
  std::string_view unsigned_part = (!v.empty() && (v[0] == '-' || v[0] == '+')) ? v.substr(1) : v;
  if (IsDigits(unsigned_part, IsDec)) {
    if (auto n = ParseInteger(unsigned_part, 10, negative)) return *n;
    // Too large for 64 bits: fall through to a double.
  }
  if (IsCoreFloat(v)) {
    errno = 0;
    double d = std::strtod(s.c_str(), nullptr);
    return d;
  }
  if (unsigned_part == ".inf" || unsigned_part == ".Inf" || unsigned_part == ".INF") {
    return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  if (v == ".nan" || v == ".NaN" || v == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  return s;
}

absl::StatusOr<nlohmann::json> ParseYamlToJson(std::string_view text, ConfigSource* source,
                                               const YamlLimits& limits) {
  // Before any tree exists: yaml-cpp's own tree of a 1 MiB document can take
  // hundreds of MiB, and aliases expand when converted below.
  if (absl::Status s = CheckYamlLimits(text, source->name, limits); !s.ok()) return s;
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    if (!e.mark.is_null()) {
      return absl::InvalidArgumentError(absl::StrCat(source->name, ":", e.mark.line + 1, ": invalid YAML: ", e.msg));
    }
    return absl::InvalidArgumentError(absl::StrCat(source->name, ": invalid YAML: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source->name, ": invalid YAML: ", e.what()));
  }
  try {
    return YamlConverter(source, limits.max_depth).Convert(root, "", 0);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source->name, ": invalid YAML: ", e.what()));
  }
}

std::string DescribeValue(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  if (value.is_object()) return "a map";
  if (value.is_array()) return "a list";
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    nlohmann::json resolved = ResolvePlainYamlScalar(s);
    if (!resolved.is_string()) return absl::StrCat("'", s, "' (a quoted string)");
    return absl::StrCat("'", s, "'");
  }
  return absl::StrCat("'", value.dump(), "'");
}

absl::StatusOr<ConfigMapReader> ConfigMapReader::Create(const ConfigSource& source, const nlohmann::json& value,
                                                        std::string path) {
  if (!value.is_object()) {
    if (path.empty()) {
      return source.Error("", absl::StrCat("the config must be a map, got ", DescribeValue(value)));
    }
    return source.Error(path, absl::StrCat("field '", path, "' must be a map, got ", DescribeValue(value)));
  }
  return ConfigMapReader(&source, &value, std::move(path));
}

std::string ConfigMapReader::PathOf(std::string_view key) const { return JoinPath(path_, key); }

const nlohmann::json* ConfigMapReader::Find(std::string_view key) const {
  auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {
thread_local ConfigKeyRecorder* current_recorder = nullptr;
}  // namespace

ConfigKeyRecorder::ConfigKeyRecorder() : previous_(current_recorder) { current_recorder = this; }
ConfigKeyRecorder::~ConfigKeyRecorder() { current_recorder = previous_; }
ConfigKeyRecorder* ConfigKeyRecorder::Current() { return current_recorder; }

absl::Status ConfigMapReader::CheckKeys(const std::vector<std::string_view>& known,
                                        const std::vector<std::string_view>& ignored,
                                        std::vector<std::string>* warnings) const {
  if (ConfigKeyRecorder* recorder = ConfigKeyRecorder::Current()) {
    for (std::string_view key : known) recorder->Record(PathOf(key));
    for (std::string_view key : ignored) recorder->Record(PathOf(key));
  }
  for (auto it = object_->begin(); it != object_->end(); ++it) {
    const std::string& key = it.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (std::find(ignored.begin(), ignored.end(), key) != ignored.end()) {
      if (warnings != nullptr) {
        warnings->push_back(absl::StrCat("field '", PathOf(key), "' is not used by det-cpp and is ignored"));
      }
      continue;
    }
    std::string message = absl::StrCat("unknown field '", PathOf(key), "'");
    std::string_view best;
    size_t best_distance = 3;
    for (std::string_view candidate : known) {
      size_t d = EditDistance(key, candidate);
      if (d < best_distance) best_distance = d, best = candidate;
    }
    if (!best.empty()) absl::StrAppend(&message, " (did you mean '", std::string(best), "'?)");
    return source_->Error(PathOf(key), message);
  }
  return absl::OkStatus();
}

absl::Status ConfigMapReader::Missing(std::string_view key) const {
  return absl::InvalidArgumentError(
      absl::StrCat(source_->name, ": missing required field '", PathOf(key), "'"));
}

absl::Status ConfigMapReader::Error(std::string_view key, std::string_view message) const {
  return source_->Error(PathOf(key), message);
}

absl::Status ConfigMapReader::TypeError(std::string_view key, std::string_view what) const {
  const nlohmann::json* value = Find(key);
  return Error(key, absl::StrCat("field '", PathOf(key), "' must be ", std::string(what), ", got ",
                                 value == nullptr ? "null" : DescribeValue(*value)));
}

absl::StatusOr<int64_t> ConfigMapReader::CheckInt(const ConfigSource& source, const nlohmann::json& value,
                                                  std::string_view path, int64_t min, int64_t max) {
  int64_t n = 0;
  bool ok = true;
  if (value.is_number_unsigned()) {
    uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      ok = false;
    } else {
      n = static_cast<int64_t>(u);
    }
  } else if (value.is_number_integer()) {
    n = value.get<int64_t>();
  } else {
    ok = false;
  }
  if (!ok) {
    return source.Error(path,
                        absl::StrCat("field '", std::string(path), "' must be an integer, got ", DescribeValue(value)));
  }
  if (n < min || n > max) {
    std::string range;
    if (max == std::numeric_limits<int64_t>::max()) {
      range = absl::StrCat(">= ", min);
    } else if (min == std::numeric_limits<int64_t>::min()) {
      range = absl::StrCat("<= ", max);
    } else {
      range = absl::StrCat("between ", min, " and ", max);
    }
    return source.Error(path, absl::StrCat("field '", std::string(path), "' must be ", range, ", got ", n));
  }
  return n;
}

absl::StatusOr<double> ConfigMapReader::CheckDouble(const ConfigSource& source, const nlohmann::json& value,
                                                    std::string_view path) {
  if (!value.is_number()) {
    return source.Error(path,
                        absl::StrCat("field '", std::string(path), "' must be a number, got ", DescribeValue(value)));
  }
  return value.get<double>();
}

absl::StatusOr<std::string> ConfigMapReader::CheckString(const ConfigSource& source, const nlohmann::json& value,
                                                         std::string_view path) {
  if (!IsScalar(value)) {
    return source.Error(path,
                        absl::StrCat("field '", std::string(path), "' must be a string, got ", DescribeValue(value)));
  }
  return ScalarText(value);
}

absl::Status ConfigMapReader::GetString(std::string_view key, std::string* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  auto s = CheckString(*source_, *v, PathOf(key));
  if (!s.ok()) return s.status();
  *out = *std::move(s);
  return absl::OkStatus();
}

absl::Status ConfigMapReader::GetString(std::string_view key, std::optional<std::string>* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  auto s = CheckString(*source_, *v, PathOf(key));
  if (!s.ok()) return s.status();
  *out = *std::move(s);
  return absl::OkStatus();
}

absl::Status ConfigMapReader::GetInt(std::string_view key, int64_t* out, int64_t min, int64_t max) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  auto n = CheckInt(*source_, *v, PathOf(key), min, max);
  if (!n.ok()) return n.status();
  *out = *n;
  return absl::OkStatus();
}

absl::Status ConfigMapReader::GetInt(std::string_view key, std::optional<int64_t>* out, int64_t min,
                                     int64_t max) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  auto n = CheckInt(*source_, *v, PathOf(key), min, max);
  if (!n.ok()) return n.status();
  *out = *n;
  return absl::OkStatus();
}

absl::Status ConfigMapReader::GetDouble(std::string_view key, double* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  auto d = CheckDouble(*source_, *v, PathOf(key));
  if (!d.ok()) return d.status();
  *out = *d;
  return absl::OkStatus();
}

absl::Status ConfigMapReader::GetBool(std::string_view key, bool* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) return TypeError(key, "a boolean (true or false)");
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ConfigMapReader::GetBool(std::string_view key, std::optional<bool>* out) const {
  if (Find(key) == nullptr) return absl::OkStatus();
  bool value = false;
  absl::Status status = GetBool(key, &value);
  if (status.ok()) *out = value;
  return status;
}

absl::Status ConfigMapReader::GetStringList(std::string_view key, std::vector<std::string>* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) return TypeError(key, "a list of strings");
  std::vector<std::string> result;
  for (size_t i = 0; i < v->size(); ++i) {
    auto s = CheckString(*source_, (*v)[i], absl::StrCat(PathOf(key), "[", i, "]"));
    if (!s.ok()) return s.status();
    result.push_back(*std::move(s));
  }
  *out = std::move(result);
  return absl::OkStatus();
}

absl::Status ConfigMapReader::GetIntList(std::string_view key, std::vector<int64_t>* out, int64_t min,
                                         int64_t max) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_array()) return TypeError(key, "a list of integers");
  std::vector<int64_t> result;
  for (size_t i = 0; i < v->size(); ++i) {
    auto n = CheckInt(*source_, (*v)[i], absl::StrCat(PathOf(key), "[", i, "]"), min, max);
    if (!n.ok()) return n.status();
    result.push_back(*n);
  }
  *out = std::move(result);
  return absl::OkStatus();
}

absl::Status ConfigMapReader::GetEnum(std::string_view key, const std::vector<std::string_view>& choices,
                                      std::string* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return absl::OkStatus();
  std::string what =
      absl::StrCat("one of ", absl::StrJoin(std::vector<std::string>(choices.begin(), choices.end()), ", "));
  if (!v->is_string()) return TypeError(key, what);
  const std::string& s = v->get_ref<const std::string&>();
  if (std::find(choices.begin(), choices.end(), s) == choices.end()) return TypeError(key, what);
  *out = s;
  return absl::OkStatus();
}

}  // namespace det
