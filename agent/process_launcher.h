// Launching one child process in its own process group, contained: under a
// reaper (reaper.h) that ends every process it leaves behind, optionally in
// a cgroup v2 and as another user. Captures its stdout/stderr line by line
// and stops it with SIGTERM -> SIGKILL escalation. No gRPC here: the agent
// wires the callbacks to its stream.
#ifndef DET_AGENT_PROCESS_LAUNCHER_H_
#define DET_AGENT_PROCESS_LAUNCHER_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace det::agent {

enum class OutputStream { kStdout, kStderr };

// A user to run the process as (the launcher must be root).
struct RunAs {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups
};

// How a process ended: exactly one of exit_code / signal_number is set.
struct ExitStatus {
  std::optional<int> exit_code;
  std::optional<int> signal_number;
};

struct LaunchOptions {
  // argv[0] is the executable's path (no PATH search); required.
  std::vector<std::string> argv;
  // The complete environment as "NAME=value" entries.
  std::vector<std::string> env;
  // Working directory of the child; empty: the caller's.
  std::string cwd;
  // Called on the process's reader thread for every output line (without
  // the trailing newline; lines longer than max_line_bytes are split).
  std::function<void(OutputStream, std::string)> on_line;
  // Called once on the reader thread after the process exited and its
  // output was drained. The callback must not destroy the Process.
  std::function<void(const ExitStatus&)> on_exit;
  size_t max_line_bytes = 64 * 1024;
  // Run the process as this user (setgroups/setgid/setuid after fork,
  // before exec); unset: as the caller.
  std::optional<RunAs> run_as;
  // A cgroup v2 directory to create and run the whole process tree in; when
  // the process ends, everything still in it is killed and it is removed.
  // "": none (the reaper alone contains the tree). When it cannot be
  // created the process runs without it.
  std::string cgroup_dir;
  // When not empty: written to a pipe whose read end (write end closed) the
  // process inherits as fd kSecretFd (4), so a secret never enters its
  // environment; at most kMaxSecretBytes.
  std::string secret;
  // The process's umask; -1: the agent's.
  int umask = -1;
  // When >= 0 (and no secret): an fd the process inherits as kSecretFd
  // instead (a prestarted process's channel: prestart_pool.h). The caller
  // keeps and closes its own copy.
  int channel_fd = -1;
};

// The fd number at which a process inherits LaunchOptions.secret.
inline constexpr int kSecretFd = 4;
// The largest LaunchOptions.secret (one pipe write that cannot block).
inline constexpr size_t kMaxSecretBytes = 4096;

// One running (or finished) child process. Thread-safe.
class Process {
 public:
  // Spawns `options.argv` with stdin from /dev/null and stdout/stderr piped,
  // as the leader of a new process group, under a reaper (reaper.h): when
  // the process exits, every process it started (its group, and orphans
  // that left the group, e.g. with setsid) is killed before the exit is
  // reported. Starts the reader thread. Errors: InvalidArgument (empty
  // argv, a secret over kMaxSecretBytes), and the errno of the failed step (e.g. NotFound "exec ... failed:
  // No such file or directory", PermissionDenied "setuid ... failed").
  static absl::StatusOr<std::unique_ptr<Process>> Start(LaunchOptions options);

  // Kills the process group (SIGKILL) if still running and joins the reader
  // thread. Must not run on the reader thread (i.e. inside a callback).
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // The process's pid (also its process group id).
  pid_t pid() const { return pid_; }
  // The pid of its reaper (the process's parent).
  pid_t reaper_pid() const { return reaper_pid_; }

  // Makes `dir` (a cgroup v2 directory the caller moved the reaper and the
  // process into) the process's cgroup: when the process ends everything
  // still in it is killed and it is removed, as for
  // LaunchOptions.cgroup_dir. For a prestarted process (prestart_pool.h).
  void SetCgroupDir(std::string dir);

  // Sends `signal_number` to the whole process group; OK when it already
  // exited (nothing to signal).
  absl::Status Signal(int signal_number);

  // Non-blocking stop: grace <= 0 sends SIGKILL now; otherwise SIGTERM now
  // and SIGKILL to the group when it is still alive after `grace`. Repeated
  // calls never extend an earlier deadline.
  void Kill(absl::Duration grace);

  // The exit status once the process exited and its output was drained.
  std::optional<ExitStatus> TryWait();
  // Blocks until exited and drained, or until `timeout` passes (nullopt).
  std::optional<ExitStatus> WaitFor(absl::Duration timeout);

 private:
  Process(pid_t pid, pid_t reaper_pid, int out_fd, int err_fd, int report_fd, LaunchOptions options);
  void ReaderLoop();
  // The process's exit status from the reaper's report (or, when the reaper
  // was killed, the reaper's own `wait_status`).
  ExitStatus ReadExitStatus(int reaper_wait_status);
  void Emit(OutputStream stream, std::string* buffer, bool flush_partial);

  const pid_t pid_;
  const pid_t reaper_pid_;
  int out_fd_;
  int err_fd_;
  int report_fd_;  // the reaper's ExitReport
  LaunchOptions options_;
  std::string out_buf_;  // reader thread only
  std::string err_buf_;  // reader thread only
  std::thread reader_;

  absl::Mutex mu_;
  std::string cgroup_dir_ ABSL_GUARDED_BY(mu_);  // options_.cgroup_dir or SetCgroupDir's
  bool exited_ ABSL_GUARDED_BY(mu_) = false;   // leader reaped, output drained
  bool reaped_ ABSL_GUARDED_BY(mu_) = false;   // reaper reaped (pgid may be gone)
  ExitStatus status_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> kill_deadline_ ABSL_GUARDED_BY(mu_);
  bool kill_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool sigkill_sent_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace det::agent

#endif  // DET_AGENT_PROCESS_LAUNCHER_H_
