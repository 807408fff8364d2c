#include "agent/trial_env.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace det::agent {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > kMaxTrialEnvNameBytes) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidateTrialEnv(const google::protobuf::Map<std::string, std::string>& env,
                              const std::string& field) {
  if (env.size() > kMaxTrialEnvVars) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", env.size(), " variables, more than the limit of ", kMaxTrialEnvVars));
  }
  size_t total = 0;
  for (const auto& [name, value] : env) {
    if (!ValidName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": variable name '", name.substr(0, 64),
          "' is not [A-Za-z_][A-Za-z0-9_]* of at most ", kMaxTrialEnvNameBytes, " bytes"));
    }
    if (absl::StartsWith(name, "LD_") || absl::StartsWith(name, "DET_")) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": variable ", name, " is reserved (LD_* and DET_* are set by the agent only)"));
    }
    if (value.size() > kMaxTrialEnvValueBytes || value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": the value of ", name, " is longer than ",
                                                     kMaxTrialEnvValueBytes, " bytes or holds a NUL"));
    }
    total += name.size() + value.size() + 2;
  }
  if (total > kMaxTrialEnvBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", total, " bytes of variables, more than the limit of ", kMaxTrialEnvBytes));
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> AgentEnvironmentForTrials() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    std::string name = kv.substr(0, eq);
    if (name == "DET_CLUSTER_SECRET") continue;
    env[name] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace det::agent
