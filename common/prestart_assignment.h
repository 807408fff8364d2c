// The assignment det-agent sends a prestarted det-trial (det-trial
// --prestart, agent/prestart_pool.h) over the private socket the process
// inherited as fd kPrestartChannelFd: what a fresh launch would have given
// it as argv, environment, directory, umask and user. Shared by both ends.
//
// Wire protocol (one assignment per process, then the process exits):
//   agent -> process: u32 length (host order) + JSON of PrestartAssignment,
//                     length <= kMaxPrestartAssignmentBytes
//   process -> agent: 'A' once it changed directory, umask and user and
//                     replaced its environment (before it reads the token);
//                     or 'E' + a message, then it exits
//   agent -> process: the allocation token, then EOF (shutdown); the
//                     process reads it as DET_ALLOCATION_TOKEN_FD.
#ifndef DET_COMMON_PRESTART_ASSIGNMENT_H_
#define DET_COMMON_PRESTART_ASSIGNMENT_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace det {

// The fd number the prestarted process holds its channel at (the same
// number a fresh launch's token pipe has: agent/process_launcher.h
// kSecretFd).
inline constexpr int kPrestartChannelFd = 4;
// The largest encoded assignment (an environment within common/trial_env.h's
// bounds plus the agent's own fits easily).
inline constexpr size_t kMaxPrestartAssignmentBytes = 1 << 20;
// The most environment entries and supplementary groups in one.
inline constexpr size_t kMaxPrestartEnvEntries = 4096;
inline constexpr size_t kMaxPrestartGroups = 256;
// det-trial's argument that makes it a prestarted process.
inline constexpr char kPrestartFlag[] = "--prestart";

struct PrestartAssignment {
  std::string trial_path;        // det-trial --managed TRIAL_PATH
  std::vector<std::string> env;  // the complete environment, NAME=value
  std::string cwd;               // absolute; required
  int umask = -1;                // -1: unchanged (the agent's)
  bool set_user = false;         // run as uid/gid with groups
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;
};

std::string EncodePrestartAssignment(const PrestartAssignment& a);

// Parses and validates: InvalidArgument naming the field (trial_path and
// cwd absolute and without NUL, env entries NAME=value, umask -1..0777,
// uid/gid not 0 with set_user, the bounds above) and "the agent sent a
// bad prestart assignment".
absl::StatusOr<PrestartAssignment> DecodePrestartAssignment(const std::string& bytes);

// After the drop to the user: OK when `proc_status` (the text of
// /proc/self/status) shows no permitted, effective or ambient capability,
// as a fresh launch's execve as the user leaves it (the bounding set is
// not checked: a fresh launch keeps the agent's too). FailedPrecondition
// naming the set and its mask otherwise, or when a line is missing.
absl::Status CheckNoCapabilitiesLeft(const std::string& proc_status);

}  // namespace det

#endif  // DET_COMMON_PRESTART_ASSIGNMENT_H_
