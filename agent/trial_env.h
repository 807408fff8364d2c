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
#include "common/trial_env.h"

namespace det::agent {

// The rules (names, reserved LD_* and DET_*, sizes) are common/trial_env.h's,
// which the master also applies at create: ValidateTrialEnv(env, field).
using ::det::kMaxTrialEnvBytes;
using ::det::kMaxTrialEnvNameBytes;
using ::det::kMaxTrialEnvValueBytes;
using ::det::kMaxTrialEnvVars;
using ::det::ValidateTrialEnv;

// The agent's own environment as the base of every trial's, without
// DET_CLUSTER_SECRET (which the agent never reads; an operator may still
// have set it). Thread-safe as long as nothing calls setenv meanwhile.
std::map<std::string, std::string> AgentEnvironmentForTrials();

}  // namespace det::agent

#endif  // DET_AGENT_TRIAL_ENV_H_
