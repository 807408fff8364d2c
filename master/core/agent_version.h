// The agent version check at registration: a det-agent of another
// MAJOR.MINOR release than the master's is refused (docs/operations/upgrade.md,
// "Version skew"). Pure functions; thread-safe.
#ifndef DET_MASTER_CORE_AGENT_VERSION_H_
#define DET_MASTER_CORE_AGENT_VERSION_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace det::master {

// The longest version string an agent may report (RegisterAgentRequest
// .version).
inline constexpr size_t kMaxAgentVersionBytes = 64;

// OK when `agent_version` ("MAJOR.MINOR.PATCH", optionally with a SemVer
// "-suffix" or "+suffix" of [0-9A-Za-z.+-], e.g. "0.2.1-rc.1")
// has the MAJOR and MINOR of `master_version`: patch releases of one minor
// release share the agent protocol, the database schema and the Trial SDK's
// ABI, so they may be mixed during a rolling upgrade; minor releases may
// change any of them. Otherwise FAILED_PRECONDITION naming `agent_id`, both
// versions and the fix (install the master's release on every node), or
// INVALID_ARGUMENT when `agent_version` is empty, over kMaxAgentVersionBytes
// or not of that form (its bytes C-escaped in the message).
absl::Status CheckAgentVersion(const std::string& agent_id, const std::string& agent_version,
                               const std::string& master_version);

}  // namespace det::master

#endif  // DET_MASTER_CORE_AGENT_VERSION_H_
