// store_internal::DecodeMetrics: a metric row's stored JSON text back to its
// values. Every chart scan, stream, metric list and rollup rebuild decodes
// rows, so the text EncodeMetrics writes is read by a scanner of its own;
// nlohmann's parser takes everything else (rows written by older masters,
// names with escapes or non-ASCII bytes, anything unexpected), so a text
// decodes to the same values either way.
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store_internal.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The length of the JSON number at the start of `s`
// (-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?), or 0 when there is none.
size_t JsonNumberLength(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size() || !IsDigit(s[i])) return 0;
  if (s[i] == '0') {
    ++i;
  } else {
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  if (i < s.size() && s[i] == '.') {
    if (++i >= s.size() || !IsDigit(s[i])) return 0;
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (i >= s.size() || !IsDigit(s[i])) return 0;
    while (i < s.size() && IsDigit(s[i])) ++i;
  }
  return i;
}

// EncodeMetrics' own output: {"name":value,...}, no whitespace, names of
// printable ASCII without escapes, each name once, values JSON numbers in
// double range or "NaN", "Infinity", "-Infinity". False (and *out
// unspecified) for anything else: the caller asks nlohmann.
bool DecodeEncoded(std::string_view s, std::map<std::string, double>* out) {
  if (s.size() < 2 || s.front() != '{') return false;
  size_t i = 1;
  if (s[i] == '}') return i + 1 == s.size();
  while (true) {
    if (i >= s.size() || s[i] != '"') return false;
    const size_t name_start = ++i;
    while (i < s.size() && s[i] != '"') {
      const auto c = static_cast<unsigned char>(s[i]);
      if (c < 0x20 || c >= 0x7f || c == '\\') return false;
      ++i;
    }
    if (i + 1 >= s.size() || s[i + 1] != ':') return false;
    const std::string_view name = s.substr(name_start, i - name_start);
    i += 2;
    double v;
    const std::string_view rest = s.substr(i);
    if (rest.substr(0, 5) == "\"NaN\"") {
      v = std::numeric_limits<double>::quiet_NaN();
      i += 5;
    } else if (rest.substr(0, 10) == "\"Infinity\"") {
      v = std::numeric_limits<double>::infinity();
      i += 10;
    } else if (rest.substr(0, 11) == "\"-Infinity\"") {
      v = -std::numeric_limits<double>::infinity();
      i += 11;
    } else {
      const size_t n = JsonNumberLength(rest);
      // "-0" is an integer to nlohmann, read as +0.0 (EncodeMetrics writes
      // -0.0 so); from_chars would keep the sign.
      if (n == 0 || rest.substr(0, n) == "-0") return false;
      const std::from_chars_result r = std::from_chars(rest.data(), rest.data() + n, v);
      if (r.ec != std::errc() || r.ptr != rest.data() + n) return false;  // out of range: nlohmann's rule
      i += n;
    }
    if (!out->emplace(std::string(name), v).second) return false;  // a name twice: nlohmann's rule
    if (i >= s.size()) return false;
    if (s[i] == '}') return i + 1 == s.size();
    if (s[i] != ',') return false;
    ++i;
  }
}

absl::StatusOr<std::map<std::string, double>> DecodeWithNlohmann(const std::string& text) {
  DET_ASSIGN_OR_RETURN(nlohmann::json j, store_internal::ParseJson(text, "metrics"));
  if (!j.is_object()) return absl::DataLossError(absl::StrCat("stored metrics are not an object: ", text));
  std::map<std::string, double> out;
  for (const auto& [name, v] : j.items()) {
    if (v.is_number()) {
      out.emplace(name, v.get<double>());
    } else if (v.is_string() && v.get_ref<const std::string&>() == "NaN") {
      out.emplace(name, std::numeric_limits<double>::quiet_NaN());
    } else if (v.is_string() && v.get_ref<const std::string&>() == "Infinity") {
      out.emplace(name, std::numeric_limits<double>::infinity());
    } else if (v.is_string() && v.get_ref<const std::string&>() == "-Infinity") {
      out.emplace(name, -std::numeric_limits<double>::infinity());
    } else {
      return absl::DataLossError(absl::StrCat("stored metric ", name, " is not a number: ", text));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::map<std::string, double>> store_internal::DecodeMetrics(const std::string& text) {
  std::map<std::string, double> out;
  if (DecodeEncoded(text, &out)) return out;
  return DecodeWithNlohmann(text);
}

absl::StatusOr<std::map<std::string, double>> store_internal::DecodeMetricsWithNlohmannForTest(
    const std::string& text) {
  return DecodeWithNlohmann(text);
}

}  // namespace master
}  // namespace det
