#include "trial_runtime/runtime/report_queue.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace det::runtime {
namespace {

using std::chrono::milliseconds;

// Fast retries for tests.
ReportQueueOptions Fast() {
  ReportQueueOptions o;
  o.min_backoff = milliseconds(1);
  o.max_backoff = milliseconds(2);
  return o;
}

// Fast retries and up to `n` reports in flight.
ReportQueueOptions InFlight(size_t n) {
  ReportQueueOptions o = Fast();
  o.max_in_flight = n;
  return o;
}

// A report that blocks until Open(): the sender is busy with it.
class Gate {
 public:
  ReportQueue::Send Send() {
    return [this] {
      std::unique_lock<std::mutex> l(mu_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait(l, [&] { return open_; });
      return absl::OkStatus();
    };
  }
  // Whether the sender entered it within 30 s.
  bool WaitEntered() {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, std::chrono::seconds(30), [&] { return entered_; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool open_ = false;
};

// Polls `done` until it holds, for at most 30 s.
template <typename Pred>
bool Eventually(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

// Opens its gates when it goes out of scope: declared after the queue (and
// the gates before it), it lets the queue's senders finish before the queue
// joins them, also when an assertion ends the test early.
struct OpenOnExit {
  std::vector<Gate*> gates;
  ~OpenOnExit() {
    for (Gate* g : gates) g->Open();
  }
};

// Holding for 100 ms is how a test sees that a Push waits: a negative check
// (it must NOT return), no event to poll for.
constexpr milliseconds kStillWaiting(100);

TEST(ReportQueueTest, DeliversEveryReportOnceInOrder) {
  ReportQueue q(Fast());
  std::mutex mu;
  std::vector<int> got;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(q.Push("r", 1, [&, i] {
                   std::lock_guard<std::mutex> l(mu);
                   got.push_back(i);
                   return absl::OkStatus();
                 }).ok());
  }
  ASSERT_TRUE(q.Flush().ok());
  ASSERT_EQ(got.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(got[i], i);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.bytes(), 0u);
}

TEST(ReportQueueTest, AFullQueueMakesPushWaitNeverDrops) {
  ReportQueueOptions o = Fast();
  o.max_reports = 2;
  ReportQueue q(o);
  Gate gate;
  std::atomic<int> sent{0};
  ASSERT_TRUE(q.Push("first", 1, gate.Send()).ok());
  ASSERT_TRUE(gate.WaitEntered());
  ASSERT_TRUE(q.Push("second", 1, [&] { ++sent; return absl::OkStatus(); }).ok());
  EXPECT_EQ(q.size(), 2u);
  auto third = std::async(std::launch::async, [&] {
    return q.Push("third", 1, [&] { ++sent; return absl::OkStatus(); });
  });
  EXPECT_EQ(third.wait_for(kStillWaiting), std::future_status::timeout) << "a full queue must make Push wait";
  gate.Open();
  ASSERT_TRUE(third.get().ok());
  ASSERT_TRUE(q.Flush().ok());
  EXPECT_EQ(sent.load(), 2);
}

TEST(ReportQueueTest, TheByteBoundMakesPushWaitAndAnOversizedReportGoesAlone) {
  ReportQueueOptions o = Fast();
  o.max_bytes = 10;
  ReportQueue q(o);
  Gate gate;
  ASSERT_TRUE(q.Push("six", 6, gate.Send()).ok());
  ASSERT_TRUE(gate.WaitEntered());
  EXPECT_EQ(q.bytes(), 6u);
  auto next = std::async(std::launch::async, [&] { return q.Push("six more", 6, [] { return absl::OkStatus(); }); });
  EXPECT_EQ(next.wait_for(kStillWaiting), std::future_status::timeout) << "12 bytes > max_bytes 10 must wait";
  gate.Open();
  ASSERT_TRUE(next.get().ok());
  ASSERT_TRUE(q.Flush().ok());
  // Larger than the bound, into an empty queue: queued, not refused.
  ASSERT_TRUE(q.Push("big", 50, [] { return absl::OkStatus(); }).ok());
  ASSERT_TRUE(q.Flush().ok());
}

TEST(ReportQueueTest, UnavailableAndDeadlineExceededAreRetriedInOrder) {
  ReportQueue q(Fast());
  std::vector<std::string> tries;  // only the sender thread writes
  int failures = 0;
  ASSERT_TRUE(q.Push("a", 1, [&] {
                 tries.push_back("a");
                 if (failures++ < 3) {
                   return failures % 2 ? absl::UnavailableError("link down") : absl::DeadlineExceededError("no reply");
                 }
                 return absl::OkStatus();
               }).ok());
  ASSERT_TRUE(q.Push("b", 1, [&] {
                 tries.push_back("b");
                 return absl::OkStatus();
               }).ok());
  ASSERT_TRUE(q.Flush().ok());
  EXPECT_EQ(tries, (std::vector<std::string>{"a", "a", "a", "a", "b"}));
}

TEST(ReportQueueTest, GivesUpAfterTheRetryTimeoutOnItsClock) {
  ReportQueueOptions o = Fast();
  o.retry_timeout = std::chrono::seconds(5);
  auto fake = std::make_shared<std::atomic<int64_t>>(0);
  o.now = [fake] {  // each look at the clock: one second later
    return ReportQueueOptions::Clock::time_point(std::chrono::seconds(fake->fetch_add(1)));
  };
  ReportQueue q(o);
  std::atomic<int> tries{0};
  ASSERT_TRUE(q.Push("ReportTrainingMetrics", 1, [&] {
                 ++tries;
                 return absl::UnavailableError("connection refused");
               }).ok());
  absl::Status s = q.Flush();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("unreachable for 5 s"), std::string::npos) << s;
  EXPECT_NE(s.message().find("ReportTrainingMetrics: connection refused"), std::string::npos) << s;
  EXPECT_NE(s.message().find("DET_MASTER_RETRY_TIMEOUT_S"), std::string::npos) << s;
  EXPECT_EQ(tries.load(), 6);  // at 0 s (the first failure) ... 5 s
  EXPECT_EQ(q.Push("later", 1, [] { return absl::OkStatus(); }).code(), absl::StatusCode::kUnavailable);
}

TEST(ReportQueueTest, APermanentErrorFailsTheQueueAndNothingAfterItIsSent) {
  ReportQueue q(Fast());
  Gate gate;
  std::atomic<int> after{0};
  ASSERT_TRUE(q.Push("held", 1, gate.Send()).ok());
  ASSERT_TRUE(q.Push("refused", 1, [] { return absl::NotFoundError("allocation 'a' not found"); }).ok());
  ASSERT_TRUE(q.Push("after", 1, [&] { ++after; return absl::OkStatus(); }).ok());
  gate.Open();
  absl::Status s = q.Flush();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(after.load(), 0);
  EXPECT_EQ(q.Push("more", 1, [] { return absl::OkStatus(); }).code(), absl::StatusCode::kNotFound);
}

// The failed report's own error stays readable (error()): a trial that
// fails because of it reports that refusal, not what followed (finding 1).
TEST(ReportQueueTest, ErrorIsTheFailedReportsOwnError) {
  ReportQueue q(Fast());
  EXPECT_TRUE(q.error().ok());
  ASSERT_TRUE(q.Push("ReportValidationMetrics", 1, [] {
                 return absl::ResourceExhaustedError("ReportValidationMetrics: metric name too long");
               }).ok());
  EXPECT_EQ(q.Flush().code(), absl::StatusCode::kResourceExhausted);
  absl::Status e = q.error();
  EXPECT_EQ(e.code(), absl::StatusCode::kResourceExhausted) << e;
  EXPECT_NE(e.message().find("ReportValidationMetrics"), std::string::npos) << e;
}

// A Flush with a deadline returns by it although the report is still being
// retried (its own retry timeout is 10 min): a caller's one deadline covers
// the flush (finding 5), and the reports left are named (finding 3).
TEST(ReportQueueTest, FlushWithADeadlineReturnsByItAndNamesWhatIsLeft) {
  ReportQueue q(Fast());
  ASSERT_TRUE(q.Push("ReportCheckpoint c-1", 1, [] { return absl::UnavailableError("down"); }).ok());
  ASSERT_TRUE(q.Push("ReportTrainingMetrics", 1, [] { return absl::OkStatus(); }).ok());
  absl::Status s = q.Flush(std::chrono::steady_clock::now() + milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("2 reports still queued"), std::string::npos) << s;
  EXPECT_TRUE(q.error().ok()) << "a deadline does not fail the queue";
  EXPECT_EQ(q.Pending(), (std::vector<std::string>{"ReportCheckpoint c-1", "ReportTrainingMetrics"}));
}

TEST(ReportQueueTest, FlushWithADeadlineIsOkOnceEverythingIsDelivered) {
  ReportQueue q(Fast());
  ASSERT_TRUE(q.Push("r", 1, [] { return absl::OkStatus(); }).ok());
  EXPECT_TRUE(q.Flush(std::chrono::steady_clock::now() + std::chrono::minutes(10)).ok());
  EXPECT_TRUE(q.Pending().empty());
}

TEST(ReportQueueTest, DestroyingAQueueWhoseSenderRetriesReturnsPromptly) {
  auto q = std::make_unique<ReportQueue>(Fast());
  ASSERT_TRUE(q->Push("never", 1, [] { return absl::UnavailableError("down"); }).ok());
  q.reset();  // must not wait for the 10 min retry timeout
}

// Overlapping reports (training metrics): up to max_in_flight are sent at
// once, taken in queued order, each delivered exactly once.
TEST(ReportQueueTest, OverlappingReportsGoUpToMaxInFlightAtOnceInOrder) {
  Gate first, second;
  std::atomic<bool> third_sent{false};
  std::mutex mu;
  std::vector<int> started, sent(500);
  ReportQueue q(InFlight(2));  // after what its senders touch: destroyed (joined) first
  OpenOnExit open{{&first, &second}};
  ASSERT_TRUE(q.Push("first", 1, first.Send(), /*overlap=*/true).ok());
  ASSERT_TRUE(q.Push("second", 1, second.Send(), /*overlap=*/true).ok());
  ASSERT_TRUE(q.Push("third", 1, [&] { third_sent = true; return absl::OkStatus(); }, /*overlap=*/true).ok());
  ASSERT_TRUE(first.WaitEntered());
  ASSERT_TRUE(second.WaitEntered());  // both in flight at once
  EXPECT_FALSE(q.Flush(std::chrono::steady_clock::now() + kStillWaiting).ok());
  EXPECT_FALSE(third_sent.load()) << "a third report while 2 are in flight";
  EXPECT_EQ(q.Pending(), (std::vector<std::string>{"first", "second", "third"}));
  second.Open();  // delivered behind the first, which is still in flight
  ASSERT_TRUE(Eventually([&] { return q.size() == 2; }));
  EXPECT_EQ(q.Pending(), (std::vector<std::string>{"first", "third"}));
  EXPECT_EQ(q.bytes(), 2u);
  EXPECT_FALSE(q.Flush(std::chrono::steady_clock::now() + kStillWaiting).ok());
  EXPECT_FALSE(third_sent.load()) << "the window of 2 starts at the first report, still in flight";
  first.Open();
  ASSERT_TRUE(q.Flush().ok());
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.bytes(), 0u);

  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(q.Push("r", 1, [&, i] {
                   {
                     std::lock_guard<std::mutex> l(mu);
                     started.push_back(i);
                   }
                   ++sent[i];  // each element by one sender only
                   return absl::OkStatus();
                 }, /*overlap=*/true).ok());
  }
  ASSERT_TRUE(q.Flush().ok());
  std::lock_guard<std::mutex> l(mu);
  for (int i = 0; i < 500; ++i) EXPECT_EQ(sent[i], 1) << i;
  ASSERT_EQ(started.size(), 500u);
  // Taken in order, within the window of 2; the two senders may enter
  // their sends in either order.
  for (int i = 0; i < 500; ++i) EXPECT_LE(std::abs(started[i] - i), 1) << i;
  EXPECT_EQ(q.senders(), 2u);
}

// max_in_flight 1: overlapping reports go one at a time, as any other.
TEST(ReportQueueTest, OneInFlightSendsOverlappingReportsOneAtATime) {
  Gate held;
  std::atomic<bool> second_sent{false};
  ReportQueue q(InFlight(1));
  OpenOnExit open{{&held}};
  ASSERT_TRUE(q.Push("held", 1, held.Send(), true).ok());
  ASSERT_TRUE(q.Push("second", 1, [&] { second_sent = true; return absl::OkStatus(); }, true).ok());
  ASSERT_TRUE(held.WaitEntered());
  EXPECT_FALSE(q.Flush(std::chrono::steady_clock::now() + kStillWaiting).ok());
  EXPECT_FALSE(second_sent.load());
  EXPECT_EQ(q.senders(), 1u);
  held.Open();
  ASSERT_TRUE(q.Flush().ok());
  EXPECT_TRUE(second_sent.load());
}

// Destroying a queue whose senders are all retrying (the master is down)
// returns promptly, each sender leaving its backoff wait.
TEST(ReportQueueTest, DestroyingAQueueWithSeveralRetryingSendersReturnsPromptly) {
  ReportQueueOptions o;  // the default backoff: 100 ms, then up to 1 s
  o.max_in_flight = 4;
  auto q = std::make_unique<ReportQueue>(o);
  std::atomic<int> tries{0};
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(q->Push("down", 1, [&] { ++tries; return absl::UnavailableError("down"); }, true).ok());
  }
  ASSERT_TRUE(Eventually([&] { return tries.load() >= 4; }));
  EXPECT_EQ(q->senders(), 4u);
  q.reset();  // must not wait for the 10 min retry timeout
}

// A sender thread is started only when a report could go and every sender
// is busy: a trial whose reports are delivered one at a time keeps one.
TEST(ReportQueueTest, SendersAreStartedOnlyWhenReportsWaitForOne) {
  Gate held;
  ReportQueue q(InFlight(32));
  OpenOnExit open{{&held}};
  EXPECT_EQ(q.senders(), 0u);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(q.Push("r", 1, [] { return absl::OkStatus(); }, true).ok());
    ASSERT_TRUE(q.Flush().ok());
  }
  EXPECT_EQ(q.senders(), 1u);
  ASSERT_TRUE(q.Push("held", 1, held.Send(), true).ok());
  ASSERT_TRUE(held.WaitEntered());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.Push("r", 1, [] { return absl::OkStatus(); }, true).ok());
  ASSERT_TRUE(Eventually([&] { return q.size() == 1; }));
  EXPECT_GE(q.senders(), 2u);
  EXPECT_LE(q.senders(), 4u);
  held.Open();
  ASSERT_TRUE(q.Flush().ok());
}

// A report goes only within max_in_flight places of the oldest one not
// delivered: one still being sent (here: held) holds back those beyond.
TEST(ReportQueueTest, AReportInFlightHoldsBackThoseBeyondTheWindow) {
  Gate held;
  std::atomic<int> sent{0};
  ReportQueue q(InFlight(3));
  OpenOnExit open{{&held}};
  ASSERT_TRUE(q.Push("held", 1, held.Send(), true).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(q.Push("r", 1, [&] { ++sent; return absl::OkStatus(); }, true).ok());
  ASSERT_TRUE(held.WaitEntered());
  ASSERT_TRUE(Eventually([&] { return sent.load() == 2; }));
  EXPECT_FALSE(q.Flush(std::chrono::steady_clock::now() + kStillWaiting).ok());
  EXPECT_EQ(sent.load(), 2) << "beyond the window of 3 from the held report";
  held.Open();
  ASSERT_TRUE(q.Flush().ok());
  EXPECT_EQ(sent.load(), 5);
}

// A report that may not overlap (a checkpoint, validation metrics) waits
// for every report before it, and holds every report after it.
TEST(ReportQueueTest, ABarrierWaitsForTheReportsBeforeItAndHoldsThoseAfter) {
  Gate metrics, checkpoint;
  std::atomic<bool> checkpoint_entered{false}, after_sent{false};
  ReportQueue::Send held = checkpoint.Send();
  ReportQueue q(InFlight(4));
  OpenOnExit open{{&metrics, &checkpoint}};
  ASSERT_TRUE(q.Push("metrics", 1, metrics.Send(), /*overlap=*/true).ok());
  ASSERT_TRUE(q.Push("checkpoint", 1, [&] { checkpoint_entered = true; return held(); }).ok());
  ASSERT_TRUE(q.Push("later metrics", 1, [&] { after_sent = true; return absl::OkStatus(); }, true).ok());
  ASSERT_TRUE(metrics.WaitEntered());
  EXPECT_FALSE(q.Flush(std::chrono::steady_clock::now() + kStillWaiting).ok());
  EXPECT_FALSE(checkpoint_entered.load()) << "sent while a report before it was in flight";
  EXPECT_FALSE(after_sent.load());
  metrics.Open();
  ASSERT_TRUE(checkpoint.WaitEntered());
  EXPECT_FALSE(q.Flush(std::chrono::steady_clock::now() + kStillWaiting).ok());
  EXPECT_FALSE(after_sent.load()) << "sent while the checkpoint before it was in flight";
  checkpoint.Open();
  ASSERT_TRUE(q.Flush().ok());
  EXPECT_TRUE(after_sent.load());
}

// An overlapping report that fails fails the queue: the one in flight
// beside it finishes, nothing queued after it is sent.
TEST(ReportQueueTest, AFailedOverlappingReportFailsTheQueue) {
  Gate held;
  std::atomic<int> after{0};
  ReportQueue q(InFlight(2));
  OpenOnExit open{{&held}};
  ASSERT_TRUE(q.Push("held", 1, held.Send(), true).ok());
  ASSERT_TRUE(q.Push("refused", 1, [] { return absl::PermissionDeniedError("wrong token"); }, true).ok());
  ASSERT_TRUE(q.Push("after", 1, [&] { ++after; return absl::OkStatus(); }, true).ok());
  ASSERT_TRUE(held.WaitEntered());
  EXPECT_EQ(q.Flush().code(), absl::StatusCode::kPermissionDenied);
  held.Open();
  ASSERT_TRUE(Eventually([&] { return q.size() == 2; })) << "the held report is delivered";
  EXPECT_EQ(q.Flush().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(after.load(), 0);
  EXPECT_EQ(q.Pending(), (std::vector<std::string>{"refused", "after"}));
}

}  // namespace
}  // namespace det::runtime
