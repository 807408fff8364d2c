#include "agent/trial_env.h"

extern char** environ;

namespace det::agent {

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
