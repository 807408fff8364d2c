#include "trial_runtime/runtime/report_queue.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace det::runtime {

ReportQueue::ReportQueue(ReportQueueOptions options)
    : options_(std::move(options)), window_(std::max<size_t>(1, options_.max_in_flight)) {}

ReportQueue::~ReportQueue() {
  std::vector<std::thread> senders;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    senders = std::move(senders_);  // none is started once stop_ is set
  }
  changed_.notify_all();
  sendable_.notify_all();
  for (std::thread& t : senders) t.join();
}

absl::Status ReportQueue::Push(std::string what, size_t bytes, Send send, bool overlap) {
  std::unique_lock<std::mutex> l(mu_);
  // Full: wait for the senders (an oversized report waits for an empty queue).
  changed_.wait(l, [&] {
    return !error_.ok() || stop_ ||
           (undelivered_ < options_.max_reports && (undelivered_ == 0 || bytes_ + bytes <= options_.max_bytes));
  });
  if (!error_.ok()) return error_;
  if (stop_) return absl::CancelledError("the report queue is stopping");
  queue_.push_back(Report{std::move(what), bytes, std::move(send), overlap});
  ++undelivered_;
  bytes_ += bytes;
  WakeSenderLocked();
  return error_;  // not OK only when no sender could be started: nothing will be sent
}

absl::Status ReportQueue::Flush() {
  std::unique_lock<std::mutex> l(mu_);
  changed_.wait(l, [&] { return undelivered_ == 0 || !error_.ok() || stop_; });
  return error_;
}

absl::Status ReportQueue::Flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  if (changed_.wait_until(l, deadline, [&] { return undelivered_ == 0 || !error_.ok() || stop_; })) return error_;
  std::string first;
  for (const Report& r : queue_) {
    if (r.delivered) continue;
    first = r.what;
    break;
  }
  return absl::DeadlineExceededError(absl::StrCat(undelivered_, " reports still queued for the master at the deadline (the first: ",
                                                  first, ")"));
}

absl::Status ReportQueue::error() const {
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

std::vector<std::string> ReportQueue::Pending() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  out.reserve(undelivered_);
  for (const Report& r : queue_) {
    if (!r.delivered) out.push_back(r.what);
  }
  return out;
}

size_t ReportQueue::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return undelivered_;
}

size_t ReportQueue::senders() const {
  std::lock_guard<std::mutex> l(mu_);
  return senders_.size();
}

size_t ReportQueue::bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_;
}

bool ReportQueue::Transient(const absl::Status& s) const {
  return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded;
}

ReportQueue::Report* ReportQueue::NextLocked() {
  if (!error_.ok()) return nullptr;
  // The front is never delivered (popped once it is). Only the first report
  // not taken yet may go, and only within window_ of the front: a report
  // that keeps being retried holds back the ones after it. So at most
  // window_ are in flight.
  bool in_flight_before = false, barrier_before = false;
  size_t position = 0;
  for (Report& r : queue_) {
    if (position++ >= window_) return nullptr;
    if (r.delivered) continue;
    if (!r.sending) return (r.overlap ? !barrier_before : !in_flight_before) ? &r : nullptr;
    in_flight_before = true;
    barrier_before = barrier_before || !r.overlap;
  }
  return nullptr;
}

void ReportQueue::WakeSenderLocked() {
  if (NextLocked() == nullptr) return;
  if (idle_senders_ > 0) {
    sendable_.notify_one();
    return;
  }
  if (stop_ || senders_.size() >= window_) return;  // one will be back
  ++idle_senders_;  // idle until it takes a report: counted at once, so that one is started per report
  try {
    senders_.emplace_back([this] { Run(); });
  } catch (const std::exception& e) {  // out of threads or memory: fewer in flight, but never none
    --idle_senders_;
    if (!senders_.empty()) return;
    error_ = absl::ResourceExhaustedError(absl::StrCat("cannot start a report sender thread: ", e.what()));
    changed_.notify_all();
  }
}

void ReportQueue::Run() {  // counted in idle_senders_ while it has no report
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    Report* report = nullptr;
    sendable_.wait(l, [&] { return stop_ || (report = NextLocked()) != nullptr; });
    --idle_senders_;
    if (stop_) return;
    report->sending = true;  // stays put: popped only once delivered
    WakeSenderLocked();  // the next one may go too
    l.unlock();
    absl::Status s = Deliver(*report);
    l.lock();
    report->sending = false;
    if (s.ok()) {
      report->delivered = true;
      --undelivered_;
      bytes_ -= report->bytes;
      while (!queue_.empty() && queue_.front().delivered) queue_.pop_front();
    } else if (error_.ok()) {
      error_ = s;
    }
    ++idle_senders_;
    changed_.notify_all();  // Push and Flush; this sender looks for the next report itself
  }
}

absl::Status ReportQueue::Deliver(const Report& r) {
  std::chrono::milliseconds backoff = options_.min_backoff;
  std::optional<ReportQueueOptions::Clock::time_point> first_failure;
  for (bool said = false;;) {
    absl::Status s = r.send();
    if (s.ok() || !Transient(s)) return s;
    const auto now = options_.now();
    if (!first_failure) first_failure = now;
    if (now - *first_failure >= options_.retry_timeout) {
      return absl::UnavailableError(absl::StrCat(
          "the master was unreachable for ",
          std::chrono::duration_cast<std::chrono::seconds>(options_.retry_timeout).count(), " s (", r.what, ": ",
          s.message(), "); DET_MASTER_RETRY_TIMEOUT_S in det-agent's environment sets how long a trial retries"));
    }
    if (!said) {
      std::fprintf(stderr, "[det-trial] master unreachable (%s); training goes on, reports are buffered\n",
                   std::string(s.message()).c_str());
      std::fflush(stderr);
      said = true;
    }
    std::unique_lock<std::mutex> l(mu_);
    if (changed_.wait_for(l, backoff, [&] { return stop_; })) return absl::CancelledError("the report queue stopped");
    backoff = std::min(backoff * 2, options_.max_backoff);
  }
}

}  // namespace det::runtime
