// The reaper: what a forked child of the agent runs to contain one trial
// process. It becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER),
// starts the process (optionally as another user) as the leader of a new
// process group, and when that process exits it SIGKILLs the group and
// every descendant that was reparented to it (a `setsid` daemon included),
// reaps them all, and only then exits, reporting the process's wait status.
//
// Process::Start (process_launcher.h) forks and calls Run() in the child:
// the agent is multi-threaded, so Run() uses only async-signal-safe system
// calls and never allocates; everything it needs is prepared in a Plan
// before the fork.
#ifndef DET_AGENT_REAPER_H_
#define DET_AGENT_REAPER_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace det::agent::reaper {

// The fd number at which the process inherits Plan.secret_fd.
inline constexpr int kSecretFd = 4;

// What failed while starting the process (StartReport.phase).
enum Phase : int32_t {
  kStarted = 0,
  kFork = 1,
  kChdir = 2,
  kSetgroups = 3,
  kSetgid = 4,
  kSetuid = 5,
  kExec = 6,
};

// "exec", "chdir", ...: the system call a failed phase names.
const char* PhaseName(int32_t phase);

// Written to the report pipe once the process was started (phase kStarted,
// pid set) or could not be (phase and errno set; the reaper then exits).
struct StartReport {
  int32_t pid = 0;
  int32_t phase = kStarted;
  int32_t error = 0;
};

// Written to the report pipe after the process and all its descendants are
// gone: the process's wait status (waitpid).
struct ExitReport {
  int32_t wait_status = 0;
};

// Everything Run() needs, built before the fork. Pointers stay valid in the
// child (it has a copy of the parent's memory).
struct Plan {
  char* const* argv = nullptr;  // argv[0] is the path; null-terminated
  char* const* envp = nullptr;  // null-terminated
  const char* cwd = nullptr;    // null: the agent's
  int out_fd = -1;              // the process's stdout / stderr
  int err_fd = -1;
  int report_fd = -1;  // StartReport then ExitReport go here
  // The cgroup.procs file the reaper joins first (null: none).
  const char* cgroup_procs = nullptr;
  // Run the process as uid/gid with these supplementary groups.
  bool set_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
  const gid_t* groups = nullptr;
  size_t num_groups = 0;
  // Inherited by the process as fd kSecretFd (the reaper closes its copy);
  // -1: none (fd kSecretFd is closed).
  int secret_fd = -1;
  // The process's umask; -1: the agent's.
  int umask = -1;
};

// Runs the reaper in a freshly forked child; never returns.
[[noreturn]] void Run(const Plan& plan);

}  // namespace det::agent::reaper

#endif  // DET_AGENT_REAPER_H_
