// Launching one child process in its own process group, capturing its
// stdout/stderr line by line, and stopping it with SIGTERM -> SIGKILL
// escalation. No gRPC here: the agent wires the callbacks to its stream.
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
};

// One running (or finished) child process. Thread-safe.
class Process {
 public:
  // Spawns `options.argv` with stdin from /dev/null and stdout/stderr piped,
  // as the leader of a new process group, and starts its reader thread.
  // Errors: InvalidArgument (empty argv), and the errno of the failed
  // spawn/exec (e.g. NotFound "exec failed: No such file or directory").
  static absl::StatusOr<std::unique_ptr<Process>> Start(LaunchOptions options);

  // Kills the process group (SIGKILL) if still running and joins the reader
  // thread. Must not run on the reader thread (i.e. inside a callback).
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }

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
  Process(pid_t pid, int out_fd, int err_fd, LaunchOptions options);
  void ReaderLoop();
  void Emit(OutputStream stream, std::string* buffer, bool flush_partial);

  const pid_t pid_;
  int out_fd_;
  int err_fd_;
  LaunchOptions options_;
  std::string out_buf_;  // reader thread only
  std::string err_buf_;  // reader thread only
  std::thread reader_;

  absl::Mutex mu_;
  bool exited_ ABSL_GUARDED_BY(mu_) = false;   // leader reaped, output drained
  bool reaped_ ABSL_GUARDED_BY(mu_) = false;   // leader reaped (pgid may be gone)
  ExitStatus status_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> kill_deadline_ ABSL_GUARDED_BY(mu_);
  bool kill_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool sigkill_sent_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace det::agent

#endif  // DET_AGENT_PROCESS_LAUNCHER_H_
