// The trial profiler's groups (`profiling`, `system`: issue 48 review,
// finding 4) as the master takes them from a trial: only when the trial's
// config has profiling.enabled, only GPUs of the trial's slots (others
// dropped), finite values >= 0, and at most
// MetricLimits::max_profiler_bytes per trial, whoever calls ReportMetrics
// with the allocation's token (user code in the trial process has it, not
// only the SDK).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "master/core/core_test_fixture.h"
#include "nlohmann/json.hpp"
#include "master/store/store_internal.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

class ProfilerReportCoreTest : public MasterCoreFixture {
 protected:
  // One agent of one slot and an active 1-slot experiment of one trial,
  // profiling on or off; its first allocation in start_.
  void Start(bool profiling) {
    ASSERT_NO_FATAL_FAILURE(AttachOneSlotAgent(&session_));
    std::string yaml = det::testing::SingleTrialConfig("profiled", dir_ / "checkpoints", 1);
    if (profiling) yaml += "profiling:\n  enabled: true\n";
    ASSERT_GT(CreateActiveExperiment(yaml), 0);
    core_->RunBackgroundPass();
    for (const auto& s : Starts(*session_)) start_ = s;
    ASSERT_FALSE(start_.allocation_id().empty());
  }
  absl::Status Report(const std::string& group, int64_t batches, const std::map<std::string, double>& metrics) {
    trialv1::ReportMetricsRequest req;
    req.set_allocation_id(start_.allocation_id());
    req.set_group(group);
    trialv1::MetricsRow* row = req.add_rows();
    row->set_total_batches(batches);
    for (const auto& [k, v] : metrics) (*row->mutable_metrics())[k] = v;
    return core_->ReportMetrics(req, start_.allocation_token()).status();
  }
  int64_t StoredBytes() {
    auto rows = core_->store()->ListMetrics(1, "system", /*include_archived=*/true);
    EXPECT_TRUE(rows.ok()) << rows.status();
    int64_t bytes = 0;
    for (const MetricRow& r : rows.ok() ? *rows : std::vector<MetricRow>{}) {
      bytes += static_cast<int64_t>(store_internal::EncodeMetrics(r.metrics).size()) + MetricLimits::kRowOverhead;
    }
    return bytes;
  }

  std::shared_ptr<AgentSession> session_;
  agentv1::StartAllocation start_;
};

TEST_F(ProfilerReportCoreTest, ProfilerGroupsAreRefusedWhenProfilingIsOff) {
  ASSERT_NO_FATAL_FAILURE(Start(/*profiling=*/false));
  for (const char* group : {"system", "profiling"}) {
    absl::Status s = Report(group, 1, {{"cpu_ratio", 1}});
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << group << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("profiling.enabled")) << group;
  }
  EXPECT_TRUE(Report("inference", 1, {{"cpu_ratio", 1}}).ok()) << "other groups as before";
}

// A `system` row keeps only the trial's GPUs (gpu<I>, I < slots_per_trial):
// the keys of other GPUs (the sampler's fallback to every GPU of the node)
// are dropped and the rest of the row stored (issue 48 second review,
// finding 2). Values must still be finite and >= 0.
TEST_F(ProfilerReportCoreTest, SystemRowsKeepOnlyTheTrialsGpusAndTakeFiniteValues) {
  ASSERT_NO_FATAL_FAILURE(Start(/*profiling=*/true));
  absl::Status s = Report("system", 1, {{"cpu_ratio", 0.5}, {"rss_bytes", 1e9}, {"gpu0_utilization_ratio", 0.8},
                                        {"gpu0_memory_used_bytes", 1e9}, {"gpu1_utilization_ratio", 0.7},
                                        {"gpu1_memory_used_bytes", 2e9}, {"gpu12_utilization_ratio", 0.1}});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(Report("system", 2, {{"gpu1_utilization_ratio", 0.8}}).ok()) << "nothing of the trial's: no row";
  auto rows = core_->store()->ListMetrics(1, "system", /*include_archived=*/true);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 1u);
  std::vector<std::string> keys;
  for (const auto& [k, v] : (*rows)[0].metrics) keys.push_back(k);
  EXPECT_THAT(keys, ::testing::ElementsAre("cpu_ratio", "gpu0_memory_used_bytes", "gpu0_utilization_ratio",
                                           "rss_bytes"));
  for (double bad : {-1.0, std::nan(""), HUGE_VAL}) {
    s = Report("system", 3, {{"rss_bytes", bad}});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("metric group 'system' key 'rss_bytes'")) << bad;
  }
}

// Whether a trial profiles is decided from the config text it runs with
// (config_yaml), not the stored resolved JSON: an experiment created by
// v0.2.0, which ignored `profiling:` (its config_json has no profiling key),
// resumed after an upgrade (issue 48 second review, finding 2).
TEST_F(ProfilerReportCoreTest, ProfilingFollowsTheYamlTheTrialRunsWithAfterARestart) {
  std::string yaml = det::testing::SingleTrialConfig("profiled", dir_ / "checkpoints", 1);
  yaml += "profiling:\n  enabled: true\n";
  const int64_t id = CreateActiveExperiment(yaml);
  ASSERT_GT(id, 0);
  auto row = core_->store()->GetExperiment(id);
  ASSERT_TRUE(row.ok()) << row.status();
  nlohmann::json config = nlohmann::json::parse(row->config_json);
  ASSERT_EQ(config.erase("profiling"), 1u);
  row->config_json = config.dump();
  ASSERT_TRUE(core_->store()->UpdateExperiment(*row).ok());
  Restart();
  ASSERT_NO_FATAL_FAILURE(AttachOneSlotAgent(&session_));
  core_->RunBackgroundPass();
  for (const auto& st : Starts(*session_)) start_ = st;
  ASSERT_FALSE(start_.allocation_id().empty());
  absl::Status s = Report("profiling", 1, {{"wall_s", 1}});
  EXPECT_TRUE(s.ok()) << s;
  s = Report("system", 1, {{"cpu_ratio", 1}});
  EXPECT_TRUE(s.ok()) << s;
}

// The reviewer's attack: a trial reports `system` rows in a loop. It is
// refused with RESOURCE_EXHAUSTED once the profiler's byte bound (lowered to
// 64 KiB here; 16 MiB by default) is reached, and what is stored stays under it.
TEST_F(ProfilerReportCoreTest, ALoopOfSystemReportsStopsAtTheProfilerByteBound) {
  MetricLimits limits;
  limits.max_profiler_bytes = 64 << 10;
  core_->store()->set_metric_limits(limits);
  ASSERT_NO_FATAL_FAILURE(Start(/*profiling=*/true));
  absl::Status s;
  int64_t batches = 0;
  while (s.ok() && batches < 10000) {
    s = Report("system", ++batches, {{"cpu_ratio", 1.5}, {"rss_bytes", 123456789}, {"gpu0_utilization_ratio", 0.5},
                                     {"gpu0_memory_used_bytes", 1e9}});
  }
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << "after " << batches << " reports: " << s;
  EXPECT_THAT(s.message(), HasSubstr("the profiler's groups (profiling and system)"));
  EXPECT_GT(batches, 100);
  const int64_t stored = StoredBytes();
  EXPECT_LE(stored, limits.max_profiler_bytes);
  EXPECT_GT(stored, limits.max_profiler_bytes - 1024);
  EXPECT_EQ(Report("profiling", batches, {{"wall_s", 1}}).code(), absl::StatusCode::kResourceExhausted)
      << "one bound for both groups";
  EXPECT_TRUE(Report("inference", batches, {{"loss", 1}}).ok()) << "the trial's own metrics are not bound by it";
}

}  // namespace
}  // namespace det::master
