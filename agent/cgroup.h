// cgroup v2 helpers for containing trial processes: every process a trial
// starts stays in the trial's cgroup (a process cannot leave it without
// write access to another cgroup), so killing the cgroup's members ends
// them all, daemons included.
#ifndef DET_AGENT_CGROUP_H_
#define DET_AGENT_CGROUP_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace det::agent {

// The directory of this process's cgroup in the mounted cgroup v2 hierarchy
// (from /proc/self/mountinfo and /proc/self/cgroup). NotFound when there is
// no cgroup v2 mount or this process is not in it. Thread-safe.
absl::StatusOr<std::string> OwnCgroupDir();

// Creates cgroup directory `dir` (its parent must exist); OK when it exists.
absl::Status CreateCgroup(const std::string& dir);

// SIGKILLs every process in cgroup `dir` (cgroup.kill where the kernel has
// it, else each pid of cgroup.procs, repeatedly), waits until it is empty
// (up to `timeout`: DeadlineExceeded) and removes it. OK when `dir` does not
// exist. Thread-safe.
absl::Status KillAndRemoveCgroup(const std::string& dir, absl::Duration timeout);

// Removes every "det-agent-<pid>" cgroup under `dir` whose agent process is
// gone (it crashed or was killed), killing what is left in its trial
// cgroups first. Returns how many it removed. Thread-safe.
int RemoveStaleAgentCgroups(const std::string& dir);

}  // namespace det::agent

#endif  // DET_AGENT_CGROUP_H_
