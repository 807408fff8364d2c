#include "common/config_redact.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config_reader.h"

namespace det {
namespace {

using json = nlohmann::json;

constexpr int kMaxRedactDepth = 256;

// For "NAME=VALUE" (an environment_variables entry, a "--name=value"
// argument) whose NAME names a secret: the length of "NAME=", else 0.
size_t SecretAssignment(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq > 256) return 0;
  absl::string_view name(text.data(), eq);
  while (!name.empty() && name.front() == '-') name.remove_prefix(1);
  if (name.empty()) return 0;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return 0;
  }
  return IsSecretConfigKey(std::string_view(name.data(), name.size())) ? eq + 1 : 0;
}

json RedactAt(json value, int depth) {
  if (depth > kMaxRedactDepth) return kRedacted;
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    if (const size_t keep = SecretAssignment(text)) return text.substr(0, keep) + kRedacted;
  }
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      it.value() = IsSecretConfigKey(it.key()) ? json(kRedacted) : RedactAt(std::move(it.value()), depth + 1);
    }
  } else if (value.is_array()) {
    for (json& item : value) item = RedactAt(std::move(item), depth + 1);
  }
  return value;
}

bool HasSecretKey(const json& value, int depth) {
  if (depth > kMaxRedactDepth) return true;
  if (value.is_string()) return SecretAssignment(value.get_ref<const std::string&>()) != 0;
  if (value.is_object()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (IsSecretConfigKey(it.key()) || HasSecretKey(it.value(), depth + 1)) return true;
    }
  } else if (value.is_array()) {
    for (const json& item : value) {
      if (HasSecretKey(item, depth + 1)) return true;
    }
  }
  return false;
}

size_t Indent(absl::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  return i;
}

// For a block-style "KEY: ..." line (after any "- " sequence markers, KEY
// plain or quoted): the column of KEY, the key and the index of its ':',
// else npos.
size_t KeyColumn(absl::string_view line, std::string* key, size_t* colon_at) {
  size_t i = Indent(line);
  while (i + 1 < line.size() && line[i] == '-' && line[i + 1] == ' ') {
    i += 2;
    while (i < line.size() && line[i] == ' ') ++i;
  }
  if (i >= line.size() || line[i] == '#') return absl::string_view::npos;
  const size_t column = i;
  if (line[i] == '"' || line[i] == '\'') {
    const size_t close = line.find(line[i], i + 1);
    if (close == absl::string_view::npos || close + 1 >= line.size() || line[close + 1] != ':') {
      return absl::string_view::npos;
    }
    *key = std::string(line.substr(i + 1, close - i - 1));
    *colon_at = close + 1;
    return column;
  }
  const size_t colon = line.find(": ", i);
  const bool ends_with_colon = !line.empty() && line.back() == ':' && line.find(':', i) == line.size() - 1;
  if (colon == absl::string_view::npos && !ends_with_colon) return absl::string_view::npos;
  const size_t end = colon != absl::string_view::npos ? colon : line.size() - 1;
  absl::string_view k = line.substr(i, end - i);
  if (k.find_first_of("{}[],\"'#") != absl::string_view::npos) return absl::string_view::npos;
  *key = std::string(absl::StripTrailingAsciiWhitespace(k));
  *colon_at = end;
  return column;
}

// The line-by-line redaction: each secret key's line keeps "KEY:" and gets
// "<redacted>" as its value; the lines below it that are indented deeper
// than KEY (a nested block, a block scalar, a continued scalar) go.
std::string RedactLines(absl::string_view yaml) {
  std::vector<absl::string_view> lines = absl::StrSplit(yaml, '\n');
  std::string out;
  out.reserve(yaml.size());
  for (size_t n = 0; n < lines.size(); ++n) {
    absl::string_view line = lines[n];
    std::string key;
    size_t colon = 0;
    const size_t column = KeyColumn(line, &key, &colon);
    if (column == absl::string_view::npos || !IsSecretConfigKey(key)) {
      absl::StrAppend(&out, line, n + 1 < lines.size() ? "\n" : "");
      continue;
    }
    absl::StrAppend(&out, line.substr(0, colon + 1), " \"", kRedacted, "\"", n + 1 < lines.size() ? "\n" : "");
    while (n + 1 < lines.size()) {
      absl::string_view next = lines[n + 1];
      const bool blank = absl::StripAsciiWhitespace(next).empty();
      if (!blank && Indent(next) <= column) break;
      ++n;
    }
  }
  return out;
}

}  // namespace

bool IsSecretConfigKey(std::string_view key) {
  static constexpr std::array<std::string_view, 14> kExact = {
      "access_key", "secret_key", "session_token", "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
      "password",   "passwd",     "token",         "api_key",           "private_key",           "credentials",
      "apikey",     "access_token"};
  // Tokenizer settings, not credentials.
  static constexpr std::array<std::string_view, 7> kWordTokens = {"pad_token", "eos_token", "bos_token", "unk_token",
                                                                  "cls_token", "sep_token", "mask_token"};
  std::string lower = absl::AsciiStrToLower(absl::string_view(key.data(), key.size()));
  std::replace(lower.begin(), lower.end(), '-', '_');
  if (std::find(kExact.begin(), kExact.end(), lower) != kExact.end()) return true;
  if (absl::StrContains(lower, "secret") || absl::StrContains(lower, "password")) return true;
  if (absl::EndsWith(lower, "_token")) {
    return std::find(kWordTokens.begin(), kWordTokens.end(), lower) == kWordTokens.end();
  }
  return absl::EndsWith(lower, "_api_key") || absl::EndsWith(lower, "_apikey") || absl::EndsWith(lower, "_passwd") ||
         absl::EndsWith(lower, "_private_key");
}

json RedactConfigJson(json value) { return RedactAt(std::move(value), 0); }

// Whether `yaml` may hold a secret key: one of the words of
// IsSecretConfigKey occurs (any case), or an escape that could spell one.
static bool MayHoldSecretKey(std::string_view yaml) {
  const std::string lower = absl::AsciiStrToLower(absl::string_view(yaml.data(), yaml.size()));
  if (lower.find('\\') != std::string::npos) return true;
  for (const char* word : {"secret", "password", "passwd", "token", "access_key", "api_key", "apikey", "private_key",
                           "credentials", "api-key", "private-key", "access-key", "secret-key"}) {
    if (lower.find(word) != std::string::npos) return true;
  }
  return false;
}

std::string RedactConfigYaml(std::string_view yaml) {
  if (!MayHoldSecretKey(yaml)) return std::string(yaml);  // the common case: no parse
  ConfigSource source{"config", {}};
  absl::StatusOr<json> parsed = ParseYamlToJson(yaml, &source);
  if (!parsed.ok()) return "# (the config is not shown: it does not parse as YAML)\n";
  if (!HasSecretKey(*parsed, 0)) return std::string(yaml);
  const json redacted = RedactConfigJson(*parsed);
  std::string lines = RedactLines(absl::string_view(yaml.data(), yaml.size()));
  ConfigSource check_source{"config", {}};
  absl::StatusOr<json> check = ParseYamlToJson(lines, &check_source);
  if (check.ok() && *check == redacted) return lines;
  return redacted.dump(2) + "\n";
}

}  // namespace det
