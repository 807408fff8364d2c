// det-cli's --follow progress: throughput over a sliding window, time left,
// the line a trial gets, one redrawn block on a terminal and plain lines when
// piped. Times are given, never read from the clock.
#include "cli/follow_progress.h"

#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

v1::Trial Running(int64_t id, int64_t batches, int64_t target) {
  v1::Trial t;
  t.set_id(id);
  t.set_state(v1::STATE_ACTIVE);
  t.set_allocation_id("trial-1.1.abcd");
  t.set_total_batches_processed(batches);
  t.set_searcher_target_batches(target);
  return t;
}

TEST(ThroughputWindowTest, RateAndTimeLeftOverTheWindow) {
  ThroughputWindow w;
  EXPECT_FALSE(w.Rate());
  w.Add(kT0, 100);
  EXPECT_FALSE(w.Rate());  // one sample: no rate yet
  w.Add(kT0 + absl::Seconds(10), 600);
  ASSERT_TRUE(w.Rate());
  EXPECT_DOUBLE_EQ(*w.Rate(), 50.0);
  ASSERT_TRUE(w.TimeLeft(1100));
  EXPECT_EQ(*w.TimeLeft(1100), absl::Seconds(10));
  EXPECT_EQ(*w.TimeLeft(500), absl::ZeroDuration());  // already past it
  EXPECT_FALSE(w.TimeLeft(0));                        // no target
}

TEST(ThroughputWindowTest, OldSamplesLeaveTheWindowAndARestartStartsAfresh) {
  ThroughputWindow w;
  w.Add(kT0, 0);
  w.Add(kT0 + absl::Seconds(60), 6000);   // 100/s
  w.Add(kT0 + absl::Seconds(100), 6400);  // the last 40 s: 10/s
  ASSERT_TRUE(w.Rate());
  EXPECT_DOUBLE_EQ(*w.Rate(), 10.0);
  // Fewer batches: the trial resumed from an older checkpoint.
  w.Add(kT0 + absl::Seconds(101), 6000);
  EXPECT_FALSE(w.Rate());
  w.Add(kT0 + absl::Seconds(111), 6100);  // 10/s since the restart
  // Polls between two reports repeat the count: the rate holds.
  w.Add(kT0 + absl::Seconds(115), 6100);
  w.Add(kT0 + absl::Seconds(121), 6100);
  ASSERT_TRUE(w.Rate());
  EXPECT_DOUBLE_EQ(*w.Rate(), 10.0);
  // No change for more than twice the time between reports: a stall lowers
  // the rate rather than keeping the old one.
  w.Add(kT0 + absl::Seconds(141), 6100);
  ASSERT_TRUE(w.Rate());
  EXPECT_DOUBLE_EQ(*w.Rate(), 2.5);
}

TEST(FollowProgressTest, EtaFormat) {
  EXPECT_EQ(FormatEta(absl::Seconds(9)), "0:09");
  EXPECT_EQ(FormatEta(absl::Seconds(605)), "10:05");
  EXPECT_EQ(FormatEta(absl::Seconds(3723)), "1:02:03");
  EXPECT_EQ(FormatEta(-absl::Seconds(3)), "0:00");
}

TEST(FollowProgressTest, LineHasPercentThroughputAndEta) {
  ThroughputWindow w;
  w.Add(kT0, 100);
  w.Add(kT0 + absl::Seconds(4), 400);
  EXPECT_EQ(TrialProgressText(Running(1, 400, 938), w), "Trial 1 ACTIVE: 400/938 batches (42%), 75.0 batches/s, ETA 0:08");
  // A trial that is not running shows no rate.
  v1::Trial done = Running(1, 938, 938);
  done.set_state(v1::STATE_COMPLETED);
  done.clear_allocation_id();
  EXPECT_EQ(TrialProgressText(done, w), "Trial 1 COMPLETED: 938/938 batches (100%)");
}

TEST(FollowProgressTest, PipedPrintsPlainLinesOnlyWhenTheyChange) {
  FollowProgress p(/*terminal=*/false);
  std::ostringstream out;
  p.Note("Experiment 1 ACTIVE", out);
  p.Observe(Running(1, 0, 100), kT0);
  p.Observe(Running(2, 0, 100), kT0);
  p.Render(out);
  p.Observe(Running(1, 0, 100), kT0 + absl::Seconds(1));
  p.Observe(Running(2, 50, 100), kT0 + absl::Seconds(1));
  p.Render(out);
  EXPECT_EQ(out.str(),
            "Experiment 1 ACTIVE\n"
            "Trial 1 ACTIVE: 0/100 batches (0%)\n"
            "Trial 2 ACTIVE: 0/100 batches (0%)\n"
            "Trial 2 ACTIVE: 50/100 batches (50%), 50.0 batches/s, ETA 0:01\n");
  EXPECT_THAT(out.str(), Not(HasSubstr("\x1b[")));
}

TEST(FollowProgressTest, TerminalRedrawsOneLinePerTrialInPlace) {
  FollowProgress p(/*terminal=*/true);
  std::ostringstream out;
  p.Observe(Running(1, 0, 100), kT0);
  p.Observe(Running(2, 0, 100), kT0);
  p.Render(out);
  const std::string first = out.str();
  EXPECT_THAT(first, Not(HasSubstr("\x1b[1A")));  // nothing to erase yet
  out.str("");
  p.Observe(Running(1, 20, 100), kT0 + absl::Seconds(2));
  p.Observe(Running(2, 10, 100), kT0 + absl::Seconds(2));
  p.Render(out);
  // Up and erase both lines, then the two new lines.
  EXPECT_EQ(out.str(),
            "\x1b[1A\x1b[2K\x1b[1A\x1b[2K\r"
            "Trial 1 ACTIVE: 20/100 batches (20%), 10.0 batches/s, ETA 0:08\n"
            "Trial 2 ACTIVE: 10/100 batches (10%), 5.0 batches/s, ETA 0:18\n");
  // A state change goes above the block, which is drawn again below it.
  out.str("");
  p.Note("Experiment 1 COMPLETED", out);
  p.Render(out);
  EXPECT_EQ(out.str().find("\x1b[1A\x1b[2K\x1b[1A\x1b[2K\rExperiment 1 COMPLETED\nTrial 1"), 0u) << out.str();
}

}  // namespace
}  // namespace det::cli
