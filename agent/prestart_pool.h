// A pool of prestarted trial-runtime processes (det-agent --prestart-pool
// N): `det-trial --prestart` started ahead of any allocation, under a reaper
// as every trial process is, with LibTorch loaded, each waiting on a private
// socketpair for one assignment (common/prestart_assignment.h). Launch()
// hands the next rank to an idle one instead of starting a fresh process,
// so an allocation costs dlopen(trial.so) and data loading, not process
// start and LibTorch's. Docs: docs/operations/prestart-pool.md.
//
// Isolation is a fresh launch's: an idle process runs as the agent's user
// (root) with no allocation's data; once assigned the agent moves its
// reaper and it into the allocation's cgroup, and the process itself closes
// every other fd, changes directory and umask, drops to the allocation's
// user (setgroups/setgid/setuid), re-arms PR_SET_PDEATHSIG and replaces its
// environment, then acknowledges; only then does the agent send the token.
// A process serves one allocation and exits; the pool starts another.
// An idle process that dies is discarded and replaced; one that fails its
// assignment (dies, times out, refuses) is killed and the rank launched
// fresh, never failed.
#ifndef DET_AGENT_PRESTART_POOL_H_
#define DET_AGENT_PRESTART_POOL_H_

#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/process_launcher.h"

namespace det::agent {

// The largest --prestart-pool.
inline constexpr int kMaxPrestartPool = 64;

struct PrestartPoolOptions {
  // Idle processes kept; 1..kMaxPrestartPool.
  int size = 0;
  // The det-trial binary (run as `det-trial --prestart`).
  std::string det_trial_path;
  // The idle processes' environment (the agent's for trials: trial_env.h).
  std::vector<std::string> env;
  // How long an assigned process has to acknowledge before the rank is
  // launched fresh instead.
  absl::Duration ack_timeout = absl::Seconds(20);
};

class PrestartPool {
 public:
  explicit PrestartPool(PrestartPoolOptions options);
  // Stops refilling and kills every idle process.
  ~PrestartPool();
  PrestartPool(const PrestartPool&) = delete;
  PrestartPool& operator=(const PrestartPool&) = delete;

  // Starts `options` (a `det-trial --managed TRIAL` launch:
  // argv {det_trial, "--managed", TRIAL}) in an idle process when one is
  // there and takes the assignment, else as Process::Start(options) does.
  // *prestarted (when not null) tells which.
  absl::StatusOr<std::unique_ptr<Process>> Launch(LaunchOptions options, bool* prestarted = nullptr);

  // Idle processes now (alive when last seen), and their pids.
  int IdleCount();
  std::vector<pid_t> IdlePids();

 private:
  struct Router;
  struct Idle;
  void RefillLoop();
  absl::StatusOr<std::unique_ptr<Idle>> StartOne();
  // Hands `options` to `idle`; OK: the process runs the rank.
  absl::Status Assign(Idle& idle, LaunchOptions& options);

  const PrestartPoolOptions options_;
  absl::Mutex mu_;
  std::deque<std::unique_ptr<Idle>> idle_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool dirty_ ABSL_GUARDED_BY(mu_) = false;  // an idle process exited
  std::thread refill_;
};

}  // namespace det::agent

#endif  // DET_AGENT_PRESTART_POOL_H_
