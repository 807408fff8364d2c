// The environment of trial processes: what the master may ask for
// (StartAllocation.env, ProcessSpec.env, from the experiment config, i.e. a
// user) and what the agent passes on of its own.
#ifndef DET_AGENT_TRIAL_ENV_H_
#define DET_AGENT_TRIAL_ENV_H_

#include <cstddef>
#include <map>
#include <string>

#include <google/protobuf/map.h>

#include "absl/status/status.h"

namespace det::agent {

inline constexpr size_t kMaxTrialEnvVars = 256;
inline constexpr size_t kMaxTrialEnvNameBytes = 256;
inline constexpr size_t kMaxTrialEnvValueBytes = 64 * 1024;
inline constexpr size_t kMaxTrialEnvBytes = 1024 * 1024;

// OK when every variable of `env` may be set for a trial: a name of
// [A-Za-z_][A-Za-z0-9_]* up to kMaxTrialEnvNameBytes, not reserved (LD_*,
// which the dynamic loader obeys, and DET_*, the agent's own), a value up to
// kMaxTrialEnvValueBytes without NUL, at most kMaxTrialEnvVars variables and
// kMaxTrialEnvBytes in all. Otherwise InvalidArgument naming `field` and the
// variable. Thread-safe.
absl::Status ValidateTrialEnv(const google::protobuf::Map<std::string, std::string>& env,
                              const std::string& field);

// The agent's own environment as the base of every trial's, without
// DET_CLUSTER_SECRET (which the agent never reads; an operator may still
// have set it). Thread-safe as long as nothing calls setenv meanwhile.
std::map<std::string, std::string> AgentEnvironmentForTrials();

}  // namespace det::agent

#endif  // DET_AGENT_TRIAL_ENV_H_
