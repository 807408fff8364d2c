#include "trial_runtime/runtime/report_queue.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace det::runtime {

ReportQueue::ReportQueue(ReportQueueOptions options)
    : options_(std::move(options)), sender_([this] { Run(); }) {}

ReportQueue::~ReportQueue() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  sender_.join();
}

absl::Status ReportQueue::Push(std::string what, size_t bytes, Send send) {
  std::unique_lock<std::mutex> l(mu_);
  // Full: wait for the sender (an oversized report waits for an empty queue).
  changed_.wait(l, [&] {
    return !error_.ok() || stop_ ||
           (queue_.size() < options_.max_reports && (queue_.empty() || bytes_ + bytes <= options_.max_bytes));
  });
  if (!error_.ok()) return error_;
  if (stop_) return absl::CancelledError("the report queue is stopping");
  queue_.push_back(Report{std::move(what), bytes, std::move(send)});
  bytes_ += bytes;
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status ReportQueue::Flush() {
  std::unique_lock<std::mutex> l(mu_);
  changed_.wait(l, [&] { return queue_.empty() || !error_.ok() || stop_; });
  return error_;
}

absl::Status ReportQueue::Flush(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> l(mu_);
  if (changed_.wait_until(l, deadline, [&] { return queue_.empty() || !error_.ok() || stop_; })) return error_;
  return absl::DeadlineExceededError(
      absl::StrCat(queue_.size(), " reports still queued for the master at the deadline (the first: ",
                   queue_.front().what, ")"));
}

absl::Status ReportQueue::error() const {
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

std::vector<std::string> ReportQueue::Pending() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  out.reserve(queue_.size());
  for (const Report& r : queue_) out.push_back(r.what);
  return out;
}

size_t ReportQueue::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.size();
}

size_t ReportQueue::bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  return bytes_;
}

bool ReportQueue::Transient(const absl::Status& s) const {
  return s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded;
}

void ReportQueue::Run() {
  while (true) {
    const Report* front = nullptr;
    {
      std::unique_lock<std::mutex> l(mu_);
      changed_.wait(l, [&] { return stop_ || (!queue_.empty() && error_.ok()); });
      if (stop_) return;
      front = &queue_.front();  // stays put: only this thread pops
    }
    absl::Status s = Deliver(*front);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (s.ok()) {
        bytes_ -= queue_.front().bytes;
        queue_.pop_front();
      } else if (error_.ok()) {
        error_ = s;
      }
    }
    changed_.notify_all();
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
