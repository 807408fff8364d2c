// det-trial --managed's preemption source: the master's ShouldPreempt,
// long-polled in a thread, plus SIGTERM; and the delivery of reports still
// queued when a run ends.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_MASTER_PREEMPTION_H_
#define DET_TRIAL_RUNTIME_RUNTIME_MASTER_PREEMPTION_H_

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "trial_runtime/runtime/master_client.h"
#include "trial_runtime/runtime/process_setup.h"
#include "trial_runtime/runtime/trial_controller.h"

namespace det::runtime {

// Delivers the reports still queued, giving up at `deadline` (not after
// the client's retry timeout): then each report not delivered is named on
// stderr, a checkpoint's with its uuid (its files stay on disk, unknown to
// the master). OK when every report was delivered.
absl::Status DeliverQueuedReports(MasterClient* client, std::chrono::steady_clock::time_point deadline);

// Preempts on SIGTERM or when the master says so (long-polled in a thread).
// Exits the process at once when the agent that started it is gone (nobody
// would report its end) or the master no longer knows its allocation
// (nothing it reports would be accepted); the master resumes the trial
// elsewhere from its latest checkpoint. The destructor cancels the long
// poll in flight: a run that has finished does not wait for the master to
// answer it (up to a second per trial, issue 50). Thread-safe.
class MasterPreemption final : public PreemptionSource {
 public:
  explicit MasterPreemption(MasterClient* client);
  ~MasterPreemption() override;
  bool ShouldPreempt() override { return StopRequested() || preempt_.load(std::memory_order_acquire); }
  std::string Why() const override;

 private:
  void Poll();
  // How long reports still queued may take to reach the master when the
  // agent is gone (at most DET_MASTER_RETRY_TIMEOUT_S).
  static constexpr std::chrono::seconds kFlushBeforeAbandon{10};
  [[noreturn]] static void Abandon(const std::string& why);

  MasterClient* client_;
  const pid_t parent_;
  std::atomic<bool> preempt_{false};
  std::atomic<int> reason_{::det::trial::v1::EXIT_REASON_UNSPECIFIED};  // the master's reason, set before preempt_
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                        // guarded by mu_
  grpc::ClientContext* in_flight_ = nullptr;  // the long poll's, while it waits; guarded by mu_
  std::thread thread_;
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_MASTER_PREEMPTION_H_
