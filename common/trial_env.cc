#include "common/trial_env.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace det {
namespace {

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxTrialEnvNameBytes) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidateTrialEnvVar(absl::string_view name, absl::string_view value, absl::string_view field) {
  if (!ValidName(name)) {
    // Shown escaped: the name may hold anything, bytes that are not UTF-8 included.
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": variable name '", absl::CEscape(name.substr(0, 64)), "' is not [A-Za-z_][A-Za-z0-9_]* of at most ",
        kMaxTrialEnvNameBytes, " bytes; rename it"));
  }
  if (absl::StartsWith(name, "LD_") || absl::StartsWith(name, "DET_")) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": variable ", name, " is reserved (LD_* and DET_* are set by the agent only); remove it"));
  }
  if (value.size() > kMaxTrialEnvValueBytes || value.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": the value of ", name, " is longer than ",
                                                   kMaxTrialEnvValueBytes, " bytes or holds a NUL"));
  }
  return absl::OkStatus();
}

absl::Status ValidateTrialEnvSize(size_t count, size_t total_bytes, absl::string_view field) {
  if (count > kMaxTrialEnvVars) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", count, " variables, more than the limit of ", kMaxTrialEnvVars));
  }
  if (total_bytes > kMaxTrialEnvBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", total_bytes, " bytes of variables, more than the limit of ", kMaxTrialEnvBytes));
  }
  return absl::OkStatus();
}

}  // namespace det
