// The trial runtime's outbox for reports to the master (metrics,
// checkpoints): training does not wait for the master. Reports are sent in
// the order queued, each retried while the master is unreachable, so that a
// trial keeps training through a network partition or a master restart and
// delivers what it reported when the master is back.
//
// A report pushed with `overlap` (training metrics, whose order the master
// does not depend on) may be sent while the overlapping reports queued
// before it are still in flight, up to max_in_flight at once: the round trip
// of one overlaps the master's work on the other. A report is sent only
// within max_in_flight places of the oldest one not delivered yet (those
// delivered behind it still count), so a report being retried holds back
// those after it, and the master gets reports at most max_in_flight - 1
// places out of order. Any other report is a barrier: it is sent
// alone, once everything before it is delivered, and nothing after it is
// sent before it is delivered.
// The queue is bounded in count and bytes: when full, Push waits
// (backpressure), it never drops a report.
//
// Redelivery is safe: the master ignores a metrics row it stored (unique on
// trial, run, group and batches) and a checkpoint uuid it knows, so a report
// whose reply was lost (it reached the master) is not duplicated.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_REPORT_QUEUE_H_
#define DET_TRIAL_RUNTIME_RUNTIME_REPORT_QUEUE_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace det::runtime {

// The defaults: a trial at one report per batch buffers this many before it
// waits for the master.
inline constexpr size_t kReportQueueMaxReports = 4096;
inline constexpr size_t kReportQueueMaxBytes = 16 << 20;

struct ReportQueueOptions {
  using Clock = std::chrono::steady_clock;
  // The bounds of what is queued (sent and unsent-yet reports). A report
  // larger than max_bytes is queued alone.
  size_t max_reports = kReportQueueMaxReports;
  size_t max_bytes = kReportQueueMaxBytes;
  // How many overlapping reports are in flight at most (at least 1; 1 sends
  // every report alone, in order). One sender thread each, started when a
  // report could go and every sender is busy: a trial whose reports keep up
  // with the master has one.
  size_t max_in_flight = 32;
  // How long one report keeps being retried while every try fails with a
  // transient error (UNAVAILABLE, DEADLINE_EXCEEDED) before the queue fails
  // (DET_MASTER_RETRY_TIMEOUT_S in det-trial).
  std::chrono::milliseconds retry_timeout = std::chrono::minutes(10);
  // The wait between tries: min_backoff, doubling up to max_backoff.
  std::chrono::milliseconds min_backoff{100};
  std::chrono::milliseconds max_backoff{1000};
  // The clock retry_timeout is measured on (a test injects its own).
  std::function<Clock::time_point()> now = [] { return Clock::now(); };
};

// Thread-safe: any thread may Push and Flush.
class ReportQueue {
 public:
  // One try at delivering a report: OK, a transient error (retried) or any
  // other error (the queue fails with it).
  using Send = std::function<absl::Status()>;

  explicit ReportQueue(ReportQueueOptions options = {});
  // Stops the senders after their current tries; reports not delivered yet
  // are dropped (Flush first to deliver them).
  ~ReportQueue();
  ReportQueue(const ReportQueue&) = delete;
  ReportQueue& operator=(const ReportQueue&) = delete;

  // Queues `send`, a report of `bytes` bytes that `what` names in messages,
  // behind the others; `overlap`: it may be in flight beside the overlapping
  // reports before it (see above). Waits while the queue is full. Returns
  // the queue's error, and queues nothing, once a report failed; and
  // RESOURCE_EXHAUSTED when no sender thread could be started.
  absl::Status Push(std::string what, size_t bytes, Send send, bool overlap = false);

  // Waits until every queued report is delivered; returns OK or the error
  // that failed the queue: the report's own error (named by its `what`), or
  // UNAVAILABLE when it was retried for retry_timeout.
  absl::Status Flush();
  // Flush, waiting at most until `deadline` (steady clock): DEADLINE_EXCEEDED
  // naming how many reports are still queued when it passes.
  absl::Status Flush(std::chrono::steady_clock::time_point deadline);

  // The error that failed the queue (OK while none did): the failed
  // report's own error, named by its `what`.
  absl::Status error() const;
  // The `what` of each report queued and not yet delivered, in order.
  std::vector<std::string> Pending() const;

  // Reports queued and not yet delivered, and their bytes.
  size_t size() const;
  size_t bytes() const;
  // Sender threads started so far (at most max_in_flight).
  size_t senders() const;

 private:
  struct Report {
    std::string what;
    size_t bytes;
    Send send;
    bool overlap = false;
    bool sending = false, delivered = false;
  };
  void Run();
  // The next report a sender may take, or null (see the class comment).
  Report* NextLocked();
  // When a report may be taken: wakes an idle sender, or starts one (up to
  // max_in_flight).
  void WakeSenderLocked();
  // Delivers `r`, retrying transient errors; OK or the error to fail with.
  absl::Status Deliver(const Report& r);
  bool Transient(const absl::Status& s) const;

  const ReportQueueOptions options_;
  const size_t window_;  // max_in_flight, at least 1
  mutable std::mutex mu_;
  std::condition_variable changed_;   // a report delivered, an error, stop_: Push, Flush, retries wait
  std::condition_variable sendable_;  // a report may be taken, stop_: the senders wait
  // Guarded by mu_: not delivered yet, or delivered behind one that is not
  // (popped from the front once delivered; a sender's Report stays put).
  std::deque<Report> queue_;
  size_t undelivered_ = 0;           // guarded by mu_
  size_t idle_senders_ = 0;          // guarded by mu_: waiting on sendable_
  size_t bytes_ = 0;                 // guarded by mu_: of the reports not delivered
  absl::Status error_;               // guarded by mu_
  bool stop_ = false;                // guarded by mu_
  std::vector<std::thread> senders_;  // guarded by mu_
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_REPORT_QUEUE_H_
