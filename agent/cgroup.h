// cgroup v2 helpers for containing trial processes: every process a trial
// starts stays in the trial's cgroup (a process cannot leave it without
// write access to another cgroup), so killing the cgroup's members ends
// them all, daemons included.
#ifndef DET_AGENT_CGROUP_H_
#define DET_AGENT_CGROUP_H_

#include <sys/types.h>

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

// How an agent contains its trial processes.
struct Containment {
  // <own cgroup>/det-agent-<pid>, created: each trial process tree runs in a
  // cgroup below it. "": process group and reaper only.
  std::string cgroup_parent;
  // The line the agent logs at start: "trial containment: " and which, with
  // the reason when it is not cgroups.
  std::string description;
};

// Chooses how agent `pid` contains trial processes: cgroups when
// `use_cgroups` (no --no-cgroups) and the agent's cgroup `own_cgroup`
// (OwnCgroupDir()) takes a child "det-agent-<pid>", which it creates; else
// process group and reaper only, saying why.
Containment PrepareContainment(bool use_cgroups, const absl::StatusOr<std::string>& own_cgroup, pid_t pid);

}  // namespace det::agent

#endif  // DET_AGENT_CGROUP_H_
