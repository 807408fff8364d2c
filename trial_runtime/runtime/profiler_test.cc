#include "trial_runtime/runtime/profiler.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace det::runtime {
namespace {

// A clock the test moves; counts its readings.
class FakeClock final : public ProfilerClock {
 public:
  double Now() override {
    ++reads;
    return now;
  }
  double now = 100;
  int reads = 0;
};

class FakeSampler final : public SystemSampler {
 public:
  std::map<std::string, double> Sample() override {
    ++samples;
    return {{"cpu_ratio", 0.5}, {"rss_bytes", 1e6}};
  }
  int samples = 0;
};

struct Row {
  std::string group;
  int64_t batches;
  std::map<std::string, double> values;
};

class ProfilerTest : public ::testing::Test {
 protected:
  ProfileSink Sink() {
    return [this](const std::string& g, int64_t b, const std::map<std::string, double>& r) {
      rows.push_back({g, b, r});
    };
  }
  std::vector<Row> Rows(const std::string& group) const {
    std::vector<Row> out;
    for (const Row& r : rows) {
      if (r.group == group) out.push_back(r);
    }
    return out;
  }
  // One batch: 0.1 s loading, train_batch 0.4 s of which 0.1 backward,
  // 0.05 all-reduce, 0.05 optimizer step; 0.02 s of harness after it, and
  // `unscoped` s that no phase claims.
  void Batch(Profiler& p, int64_t index, double unscoped = 0) {
    p.BeforeBatch(index);
    {
      ProfileScope s(&p, ProfilePhase::kDataLoader);
      clock.now += 0.1;
    }
    {
      ProfileScope s(&p, ProfilePhase::kForward);
      clock.now += 0.2;
      p.Enter(internal::SdkPhase::kBackward);
      clock.now += 0.1;
      p.Exit(internal::SdkPhase::kBackward);
      p.Enter(internal::SdkPhase::kAllReduce);
      clock.now += 0.05;
      p.Exit(internal::SdkPhase::kAllReduce);
      p.Enter(internal::SdkPhase::kOptimizerStep);
      clock.now += 0.05;
      p.Exit(internal::SdkPhase::kOptimizerStep);
    }
    {
      ProfileScope s(&p, ProfilePhase::kRuntime);
      clock.now += 0.02;
    }
    clock.now += unscoped;
    p.AfterBatch(8);
  }

  FakeClock clock;
  FakeSampler sampler;
  std::vector<Row> rows;
};

ProfilingConfig Enabled(int64_t begin = 0, std::optional<int64_t> end = std::nullopt) {
  ProfilingConfig c;
  c.enabled = true;
  c.begin_on_batch = begin;
  c.end_after_batch = end;
  return c;
}

TEST_F(ProfilerTest, AWindowClosesAfterOneSecondWithEveryPhaseAndItsOwnTimer) {
  Profiler p(Enabled(), &clock, &sampler, Sink());
  Batch(p, 0);  // 0.52 s: still open
  EXPECT_TRUE(Rows("profiling").empty());
  Batch(p, 1);  // 1.04 s: closes (reported when the next closes or profiling ends)
  p.Finish(2);
  std::vector<Row> prof = Rows("profiling");
  ASSERT_EQ(prof.size(), 1u);
  const auto& v = prof[0].values;
  EXPECT_EQ(prof[0].batches, 2);
  EXPECT_NEAR(v.at("wall_s"), 1.04, 1e-9);
  EXPECT_NEAR(v.at("data_loader_s"), 0.2, 1e-9);
  EXPECT_NEAR(v.at("forward_s"), 0.4, 1e-9);  // train_batch less the nested phases
  EXPECT_NEAR(v.at("backward_s"), 0.2, 1e-9);
  EXPECT_NEAR(v.at("allreduce_s"), 0.1, 1e-9);
  EXPECT_NEAR(v.at("optimizer_step_s"), 0.1, 1e-9);
  EXPECT_NEAR(v.at("runtime_s"), 0.04, 1e-9);
  EXPECT_EQ(v.at("unattributed_s"), 0) << "every instant was in a phase";
  EXPECT_EQ(v.at("checkpoint_s"), 0);
  EXPECT_EQ(v.at("validation_s"), 0);
  EXPECT_EQ(v.at("batches"), 2);
  EXPECT_EQ(v.at("samples"), 16);
  double sum = 0;
  for (int i = 0; i < kProfilePhaseCount; ++i) sum += v.at(ProfilePhaseKey(static_cast<ProfilePhase>(i)));
  EXPECT_NEAR(sum, v.at("wall_s"), 1e-9);
  EXPECT_EQ(v.size(), 12u) << "wall_s, 8 phases, unattributed_s, batches, samples";
}

// Time no phase claims is unattributed_s, never runtime_s: a phase scoped
// too narrowly shows as a remainder the e2e test bounds.
TEST_F(ProfilerTest, TimeNoPhaseClaimsIsUnattributedNotRuntime) {
  Profiler p(Enabled(), &clock, &sampler, Sink());
  Batch(p, 0, /*unscoped=*/0.3);
  Batch(p, 1, /*unscoped=*/0.3);  // 1.64 s: closes
  p.Finish(2);
  std::vector<Row> prof = Rows("profiling");
  ASSERT_EQ(prof.size(), 1u);
  EXPECT_NEAR(prof[0].values.at("unattributed_s"), 0.6, 1e-9);
  EXPECT_NEAR(prof[0].values.at("runtime_s"), 0.04, 1e-9);
  EXPECT_NEAR(prof[0].values.at("wall_s"), 1.64, 1e-9);
}

// The profiler's own reports and system samples inside a window (at a
// window's close mid-operation, at profiling's start) are runtime_s; only
// the ones at an operation's end fall between windows.
TEST_F(ProfilerTest, TheProfilersOwnReportsInsideAWindowAreRuntime) {
  auto slow_sink = [this](const std::string& g, int64_t b, const std::map<std::string, double>& r) {
    rows.push_back({g, b, r});
    clock.now += 0.05;
  };
  Profiler p(Enabled(), &clock, &sampler, slow_sink);
  for (int64_t b = 0; b < 4; ++b) Batch(p, b);
  p.Finish(4);
  std::vector<Row> prof = Rows("profiling");
  ASSERT_EQ(prof.size(), 2u);
  for (const Row& r : prof) {
    EXPECT_EQ(r.values.at("unattributed_s"), 0) << r.batches;
    EXPECT_NEAR(r.values.at("runtime_s"), 0.09, 1e-9) << r.batches << ": 2 x 0.02 of harness and one report";
    double sum = 0;
    for (int i = 0; i < kProfilePhaseCount; ++i) sum += r.values.at(ProfilePhaseKey(static_cast<ProfilePhase>(i)));
    EXPECT_NEAR(sum, r.values.at("wall_s"), 1e-9) << r.batches;
  }
  EXPECT_NEAR(prof[0].values.at("wall_s"), 1.09, 1e-9) << "the first system sample inside it";
  EXPECT_NEAR(prof[1].values.at("wall_s"), 1.09, 1e-9) << "the first row's report inside it";
}

TEST_F(ProfilerTest, AnOperationsEndClosesTheWindowAndWindowsAtOneBatchAddUp) {
  Profiler p(Enabled(), &clock, &sampler, Sink());
  Batch(p, 0);
  p.EndOperation(1);
  {
    ProfileScope s(&p, ProfilePhase::kValidation);
    clock.now += 0.3;
  }
  p.EndOperation(1);
  clock.now += 5;  // the master's next operation: outside any window
  {
    ProfileScope s(&p, ProfilePhase::kCheckpoint);
    clock.now += 0.2;
  }
  p.EndOperation(1);
  EXPECT_TRUE(Rows("profiling").empty()) << "batch 1's row waits for a later batch or the end";
  Batch(p, 1);
  p.EndOperation(2);
  std::vector<Row> prof = Rows("profiling");
  ASSERT_EQ(prof.size(), 1u) << "one row per batch: the three windows at batch 1 in one";
  EXPECT_EQ(prof[0].batches, 1);
  EXPECT_NEAR(prof[0].values.at("wall_s"), 0.52 + 0.3 + 0.2, 1e-9);
  EXPECT_NEAR(prof[0].values.at("validation_s"), 0.3, 1e-9);
  EXPECT_NEAR(prof[0].values.at("checkpoint_s"), 0.2, 1e-9);
  EXPECT_EQ(prof[0].values.at("batches"), 1);
  p.Finish(2);
  prof = Rows("profiling");
  ASSERT_EQ(prof.size(), 2u);
  EXPECT_EQ(prof[1].batches, 2);
  EXPECT_NEAR(prof[1].values.at("wall_s"), 0.52, 1e-9);
}

TEST_F(ProfilerTest, BeginAndEndBatchesAreRespected) {
  Profiler p(Enabled(/*begin=*/2, /*end=*/3), &clock, &sampler, Sink());
  for (int64_t b = 0; b < 2; ++b) Batch(p, b);
  EXPECT_EQ(clock.reads, 0) << "no clock read before begin_on_batch";
  EXPECT_TRUE(rows.empty());
  for (int64_t b = 2; b < 8; ++b) Batch(p, b);
  p.EndOperation(8);
  p.Finish(8);
  std::vector<Row> prof = Rows("profiling");
  ASSERT_EQ(prof.size(), 1u);
  EXPECT_EQ(prof[0].values.at("batches"), 2) << "batches 2 and 3";
  EXPECT_EQ(prof[0].batches, 4);
  const int reads = clock.reads;
  Batch(p, 8);
  EXPECT_EQ(clock.reads, reads) << "no clock read after end_after_batch";
  // One system row when profiling started, one when it stopped.
  EXPECT_EQ(Rows("system").size(), 2u);
}

TEST_F(ProfilerTest, ProfilingOffReadsNoClockAndReportsNothing) {
  ProfilingConfig off;
  Profiler p(off, &clock, &sampler, Sink());
  EXPECT_EQ(internal::GetPhaseHook(), nullptr) << "no SDK hook when off";
  for (int64_t b = 0; b < 100; ++b) Batch(p, b);
  {
    ProfileScope s(&p, ProfilePhase::kValidation);
  }
  p.EndOperation(100);
  p.Finish(100);
  EXPECT_EQ(clock.reads, 0);
  EXPECT_EQ(sampler.samples, 0);
  EXPECT_TRUE(rows.empty());
  // And a null profiler (what the controller holds when off) is one branch.
  ProfileScope none(nullptr, ProfilePhase::kForward);
}

TEST_F(ProfilerTest, SystemRowsComeEveryFiveSecondsAtMost) {
  Profiler p(Enabled(), &clock, &sampler, Sink());
  for (int64_t b = 0; b < 40; ++b) Batch(p, b);  // 20.8 s
  p.Finish(40);
  // At the start, then at window closes >= 5 s apart (5.2, 10.4, 15.6, 20.8),
  // and at the end.
  std::vector<Row> sys = Rows("system");
  EXPECT_GE(sys.size(), 5u);
  EXPECT_LE(sys.size(), 6u);
  EXPECT_EQ(sys[0].values.at("cpu_ratio"), 0.5);
  // About one profiling row per second of training.
  EXPECT_GE(Rows("profiling").size(), 19u);
  EXPECT_LE(Rows("profiling").size(), 21u);
}

TEST_F(ProfilerTest, TheSdkHookIsInstalledWhileAnEnabledProfilerLives) {
  {
    Profiler p(Enabled(), &clock, &sampler, Sink());
    EXPECT_EQ(internal::GetPhaseHook(), &p);
  }
  EXPECT_EQ(internal::GetPhaseHook(), nullptr);
}

TEST_F(ProfilerTest, UnpairedOrTooDeepPhasesDoNotCorruptTheAccount) {
  Profiler p(Enabled(), &clock, &sampler, Sink());
  p.BeforeBatch(0);
  p.Exit(ProfilePhase::kBackward);  // never entered: ignored
  for (int i = 0; i < kMaxProfileDepth + 5; ++i) p.Enter(ProfilePhase::kForward);
  clock.now += 1.5;
  for (int i = 0; i < kMaxProfileDepth + 5; ++i) p.Exit(ProfilePhase::kForward);
  p.AfterBatch(1);
  p.Finish(1);
  std::vector<Row> prof = Rows("profiling");
  ASSERT_EQ(prof.size(), 1u);
  EXPECT_NEAR(prof[0].values.at("forward_s"), 1.5, 1e-9);
  EXPECT_NEAR(prof[0].values.at("wall_s"), 1.5, 1e-9);
}

}  // namespace
}  // namespace det::runtime
