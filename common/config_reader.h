// Reading configuration documents (YAML or JSON) field by field with precise
// errors: "config.yaml:7: unknown field 'searcher.max_lenght'".
//
// A document is first converted to JSON (YamlToJson), recording the line of
// every field under its dotted path ("searcher.max_length", "labels[2]") in a
// ConfigSource. Parsers then read the JSON through ConfigMapReader, which
// checks types and ranges and formats errors with the source name and line.
// Everything here is pure and thread-compatible.
#ifndef DET_COMMON_CONFIG_READER_H_
#define DET_COMMON_CONFIG_READER_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/yaml_limits.h"
#include "nlohmann/json.hpp"

namespace det {

// Where a config came from: a name for messages ("config.yaml") and the
// 1-based line of each field by dotted path (empty for JSON input).
struct ConfigSource {
  std::string name;
  std::unordered_map<std::string, int> lines;

  // The 1-based line of `path`, or 0 when unknown.
  int LineOf(std::string_view path) const;

  // InvalidArgument "name:LINE: message", where LINE is the line of
  // `line_path`; "name: message" when that line is unknown or the path empty.
  absl::Status Error(std::string_view line_path, std::string_view message) const;
};

// "parent.key", or "key" when parent is empty.
std::string JoinPath(std::string_view parent, std::string_view key);

// Parses YAML text (the first document) to JSON, recording field lines into
// `source->lines`. Plain scalars resolve as in YAML 1.2's core schema: null
// (~, null, empty), bool (true/false), int (decimal, 0x, 0o), float (1.5,
// 1e-3, .inf, .nan), else string; quoted and block scalars are strings.
// Errors (InvalidArgument, prefixed "name:LINE:"): YAML syntax errors,
// duplicate keys, non-scalar keys, and any of `limits` exceeded (text size,
// nodes, depth or bytes after alias expansion; see yaml_limits.h), which is
// checked before the document is parsed into a tree.
absl::StatusOr<nlohmann::json> ParseYamlToJson(std::string_view text, ConfigSource* source,
                                               const YamlLimits& limits = {});

// Resolves one plain (unquoted) YAML scalar as described above.
nlohmann::json ResolvePlainYamlScalar(const std::string& text);

// For messages: "'abc'", "'12'", "'true'", "null", "a map", "a list".
std::string DescribeValue(const nlohmann::json& value);

// Reads the fields of one JSON object at a dotted path. Absent and null fields
// are treated alike ("use the default"). The source and object must outlive
// the reader.
class ConfigMapReader {
 public:
  // InvalidArgument when `value` is not an object ("field 'path' must be a map").
  static absl::StatusOr<ConfigMapReader> Create(const ConfigSource& source, const nlohmann::json& value,
                                                std::string path);

  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return *object_; }
  const ConfigSource& source() const { return *source_; }

  // The dotted path of `key` in this object.
  std::string PathOf(std::string_view key) const;

  // The field, or nullptr when absent or null.
  const nlohmann::json* Find(std::string_view key) const;

  // Rejects keys outside `known` and `ignored`: "LINE: unknown field 'p.k'"
  // (with a suggestion when one is close). Keys in `ignored` are accepted and,
  // when `warnings` is given, reported there as not used by det-cpp.
  absl::Status CheckKeys(const std::vector<std::string_view>& known, const std::vector<std::string_view>& ignored = {},
                         std::vector<std::string>* warnings = nullptr) const;

  // "source: missing required field 'p.k'".
  absl::Status Missing(std::string_view key) const;
  // source.Error(PathOf(key), message).
  absl::Status Error(std::string_view key, std::string_view message) const;
  // "LINE: field 'p.k' must be <what>, got <DescribeValue>".
  absl::Status TypeError(std::string_view key, std::string_view what) const;

  // Typed getters: when the field is absent or null, leave *out unchanged
  // and return OK; otherwise check the type (and range) and store it.
  // Strings accept any scalar (numbers and bools by their JSON text).
  absl::Status GetString(std::string_view key, std::string* out) const;
  absl::Status GetString(std::string_view key, std::optional<std::string>* out) const;
  absl::Status GetInt(std::string_view key, int64_t* out, int64_t min = std::numeric_limits<int64_t>::min(),
                      int64_t max = std::numeric_limits<int64_t>::max()) const;
  absl::Status GetInt(std::string_view key, std::optional<int64_t>* out,
                      int64_t min = std::numeric_limits<int64_t>::min(),
                      int64_t max = std::numeric_limits<int64_t>::max()) const;
  // Integers are accepted as doubles.
  absl::Status GetDouble(std::string_view key, double* out) const;
  absl::Status GetBool(std::string_view key, bool* out) const;
  absl::Status GetBool(std::string_view key, std::optional<bool>* out) const;
  // A list of scalars, each converted as by GetString.
  absl::Status GetStringList(std::string_view key, std::vector<std::string>* out) const;
  // A list of integers within [min, max].
  absl::Status GetIntList(std::string_view key, std::vector<int64_t>* out,
                          int64_t min = std::numeric_limits<int64_t>::min(),
                          int64_t max = std::numeric_limits<int64_t>::max()) const;
  // A string that must be one of `choices`.
  absl::Status GetEnum(std::string_view key, const std::vector<std::string_view>& choices, std::string* out) const;

  // Checks `value` (found at dotted `path`) is an integer in [min, max].
  static absl::StatusOr<int64_t> CheckInt(const ConfigSource& source, const nlohmann::json& value,
                                          std::string_view path, int64_t min = std::numeric_limits<int64_t>::min(),
                                          int64_t max = std::numeric_limits<int64_t>::max());
  // Checks `value` is a number (integers accepted).
  static absl::StatusOr<double> CheckDouble(const ConfigSource& source, const nlohmann::json& value,
                                            std::string_view path);
  // Converts a scalar to a string; error for maps and lists.
  static absl::StatusOr<std::string> CheckString(const ConfigSource& source, const nlohmann::json& value,
                                                 std::string_view path);

 private:
  ConfigMapReader(const ConfigSource* source, const nlohmann::json* object, std::string path)
      : source_(source), object_(object), path_(std::move(path)) {}

  const ConfigSource* source_;
  const nlohmann::json* object_;
  std::string path_;
};

// For tests (config_fields_test): while one lives on a thread, every
// ConfigMapReader::CheckKeys on that thread records the dotted path of each
// key it would accept, known or ignored ("searcher.metric"), whether or not
// the document holds it. Nested recorders: the innermost records.
class ConfigKeyRecorder {
 public:
  ConfigKeyRecorder();
  ~ConfigKeyRecorder();
  ConfigKeyRecorder(const ConfigKeyRecorder&) = delete;
  ConfigKeyRecorder& operator=(const ConfigKeyRecorder&) = delete;

  const std::vector<std::string>& paths() const { return paths_; }
  // The recorder of this thread, or nullptr.
  static ConfigKeyRecorder* Current();
  void Record(std::string path) { paths_.push_back(std::move(path)); }

 private:
  std::vector<std::string> paths_;
  ConfigKeyRecorder* previous_;
};

}  // namespace det

#endif  // DET_COMMON_CONFIG_READER_H_
