// How det-trial --managed gets its allocation token (the secret for every
// TrialService call of its allocation) without it ever being in an
// environment, where another process of the same uid, or a debugger, could
// read it (/proc/PID/environ).
#ifndef DET_TRIAL_RUNTIME_RUNTIME_ALLOCATION_TOKEN_H_
#define DET_TRIAL_RUNTIME_RUNTIME_ALLOCATION_TOKEN_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace det::runtime {

// The longest token read from DET_ALLOCATION_TOKEN_FD.
inline constexpr size_t kMaxAllocationTokenBytes = 4096;

// The allocation token: read to EOF (at most kMaxAllocationTokenBytes, then
// the fd is closed) from the inherited fd DET_ALLOCATION_TOKEN_FD names
// (det-agent passes a pipe it wrote the token to and closed), without
// surrounding whitespace; else DET_ALLOCATION_TOKEN from the environment
// (manual and other launches); else "". InvalidArgument naming
// DET_ALLOCATION_TOKEN_FD when it is not a number in 3..65535, the fd cannot
// be read, or it holds no token or more than kMaxAllocationTokenBytes.
// Call once, at start, before other threads open files.
absl::StatusOr<std::string> ReadAllocationToken();

// prctl(PR_SET_DUMPABLE, 0): no process of the same uid may ptrace this one
// or read its memory, environment or fds through /proc (only root may); no
// core dumps. False (errno set) when the call fails.
bool MakeNonDumpable();

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_ALLOCATION_TOKEN_H_
