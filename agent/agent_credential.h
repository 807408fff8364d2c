// The per-agent credential: the master issues it at an agent id's first
// registration (RegisterAgentResponse.agent_credential) and the agent
// presents it at every later one, so that the cluster secret alone cannot
// take over a known agent id. Kept in one file, mode 0600, in the agent's
// work directory.
#ifndef DET_AGENT_AGENT_CREDENTIAL_H_
#define DET_AGENT_AGENT_CREDENTIAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace det::agent {

// <work_dir>/agent-credential.
std::string AgentCredentialPath(const std::string& work_dir);

// The credential in `path` without surrounding whitespace; "" when there is
// no such file. Internal when it exists but cannot be read, InvalidArgument
// naming the file when it is larger than 1 KiB. Thread-safe.
absl::StatusOr<std::string> ReadAgentCredential(const std::string& path);

// Writes `credential` to `path` (mode 0600) durably and atomically: a
// temporary file, fsync, rename, fsync of the directory. Creates the
// directory (0700) if missing. Internal on I/O errors. Thread-safe.
absl::Status WriteAgentCredential(const std::string& path, const std::string& credential);

}  // namespace det::agent

#endif  // DET_AGENT_AGENT_CREDENTIAL_H_
