#include "trial_runtime/runtime/report_queue.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
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
  void WaitEntered() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return entered_; });
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
  gate.WaitEntered();
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
  gate.WaitEntered();
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

}  // namespace
}  // namespace det::runtime
