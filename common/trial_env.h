// The rules for the environment variables a user may set for a trial
// (environment.environment_variables of an experiment config). The master
// checks them at create (INVALID_ARGUMENT before anything is stored); the
// agent checks them again at launch (StartAllocation.env), with the same
// code, so a config that passes at create also starts.
#ifndef DET_COMMON_TRIAL_ENV_H_
#define DET_COMMON_TRIAL_ENV_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace det {

inline constexpr size_t kMaxTrialEnvVars = 256;
inline constexpr size_t kMaxTrialEnvNameBytes = 256;
inline constexpr size_t kMaxTrialEnvValueBytes = 64 * 1024;
inline constexpr size_t kMaxTrialEnvBytes = 1024 * 1024;

// OK when variable `name`=`value` may be set for a trial: a name of
// [A-Za-z_][A-Za-z0-9_]* up to kMaxTrialEnvNameBytes, not reserved (LD_*,
// which the dynamic loader obeys, and DET_*, the agent's own), a value up to
// kMaxTrialEnvValueBytes without NUL. Otherwise InvalidArgument naming
// `field` and the variable. Thread-safe.
absl::Status ValidateTrialEnvVar(absl::string_view name, absl::string_view value, absl::string_view field);

// OK when `count` variables of `total_bytes` (sum of name + value + 2) are
// within kMaxTrialEnvVars and kMaxTrialEnvBytes; else InvalidArgument naming
// `field`.
absl::Status ValidateTrialEnvSize(size_t count, size_t total_bytes, absl::string_view field);

// Every variable of `env` (any range of (name, value) pairs: a
// google::protobuf::Map, a std::map, a vector of pairs) by the rules above,
// the count first. Thread-safe.
template <typename Env>
absl::Status ValidateTrialEnv(const Env& env, absl::string_view field) {
  absl::Status st = ValidateTrialEnvSize(static_cast<size_t>(env.size()), 0, field);
  if (!st.ok()) return st;
  size_t total = 0;
  for (const auto& [name, value] : env) {
    st = ValidateTrialEnvVar(name, value, field);
    if (!st.ok()) return st;
    total += name.size() + value.size() + 2;
  }
  return ValidateTrialEnvSize(static_cast<size_t>(env.size()), total, field);
}

}  // namespace det

#endif  // DET_COMMON_TRIAL_ENV_H_
