#include "cli/yaml_merge.h"

#include <yaml-cpp/yaml.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/yaml_limits.h"

namespace det::cli {
namespace {

// A deep copy of `base` with `over` merged in (see MergeYaml). Throws
// YAML::Exception for a key that is not a scalar.
YAML::Node Merged(const YAML::Node& base, const YAML::Node& over) {
  if (!base.IsMap() || !over.IsMap()) return YAML::Clone(over);
  YAML::Node out = YAML::Clone(base);
  for (const auto& kv : over) {
    const std::string key = kv.first.as<std::string>();
    if (out[key]) {
      out[key] = Merged(out[key], kv.second);
    } else {
      out[key] = YAML::Clone(kv.second);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> MergeYaml(const std::string& base, const std::string& overrides,
                                      const std::string& overrides_name) {
  DET_RETURN_IF_ERROR(CheckYamlLimits(overrides, overrides_name));
  YAML::Node b, o;
  try {
    b = YAML::Load(base);
    o = YAML::Load(overrides);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(overrides_name, ": ", e.what()));
  }
  if (o.IsNull()) return base;
  if (!o.IsMap()) return absl::InvalidArgumentError(absl::StrCat(overrides_name, ": must be a YAML map"));
  if (!b.IsMap()) return absl::InvalidArgumentError("the parent experiment's config is not a YAML map");
  YAML::Emitter out;
  try {
    out << Merged(b, o);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(overrides_name, ": ", e.what()));
  }
  if (!out.good()) return absl::InvalidArgumentError(absl::StrCat(overrides_name, ": ", out.GetLastError()));
  return std::string(out.c_str()) + "\n";
}

}  // namespace det::cli
