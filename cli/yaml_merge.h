// YAML deep merge for `det-cli experiment fork --config overrides.yaml`.
#ifndef DET_CLI_YAML_MERGE_H_
#define DET_CLI_YAML_MERGE_H_

#include <string>

#include "absl/status/statusor.h"

namespace det::cli {

// `overrides` merged over `base` (both YAML documents holding a map): maps
// merge key by key, recursively; any other value (scalar, list, null) of
// `overrides` replaces the base's. Returns the merged document as YAML.
// InvalidArgument (naming `overrides_name`) when `overrides` exceeds the
// limits of common/yaml_limits.h, does not parse, or is not a map. Pure.
absl::StatusOr<std::string> MergeYaml(const std::string& base, const std::string& overrides,
                                      const std::string& overrides_name);

}  // namespace det::cli

#endif  // DET_CLI_YAML_MERGE_H_
