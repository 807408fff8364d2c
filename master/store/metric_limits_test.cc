// MetricLimits (issue 46, finding 6): the pure check, and the Store applying
// it on every insert path, counting names over groups, and deriving a trial's
// count from the stored rows after a restart.
#include "master/store/metric_limits.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <type_traits>
#include <utility>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/store.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {
namespace {

using ::testing::HasSubstr;

MetricRow Row(int64_t trial, int64_t batches, int first, int n, const std::string& group = "training") {
  MetricRow m;
  m.trial_id = trial;
  m.trial_run_id = 1;
  m.group = group;
  m.total_batches = batches;
  for (int i = first; i < first + n; ++i) m.metrics[absl::StrCat("m", i)] = i;
  return m;
}

absl::Status Check(const std::vector<MetricRow>& rows, const MetricLimits& limits, const MetricBudget& budget,
                   MetricBudget* added) {
  std::vector<std::string> encoded(rows.size(), std::string(100, 'x'));
  return CheckMetricRows(7, rows, encoded, limits, budget, added);
}

TEST(MetricLimitsTest, EachBoundRefusesNamingTrialAndFlag) {
  MetricLimits limits;
  limits.max_name_bytes = 8;
  limits.max_values_per_report = 3;
  limits.max_trial_names = 4;
  limits.max_trial_bytes = 1000;
  MetricBudget budget, added;
  ASSERT_TRUE(Check({Row(7, 1, 0, 3)}, limits, budget, &added).ok());
  EXPECT_EQ(added.names.size(), 3u);
  EXPECT_EQ(added.bytes, 100 + MetricLimits::kRowOverhead);

  absl::Status s = Check({Row(7, 1, 0, 4)}, limits, budget, &added);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("trial 7"));
  EXPECT_THAT(s.message(), HasSubstr("--max-metric-values-per-report"));

  MetricRow long_name = Row(7, 1, 0, 0);
  long_name.metrics[std::string(9, 'n')] = 1;
  s = Check({long_name}, limits, budget, &added);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--max-metric-name-bytes"));

  for (const char* known : {"m0", "m1", "m2"}) budget.Add(MetricNameHash(known));
  EXPECT_TRUE(Check({Row(7, 1, 0, 3)}, limits, budget, &added).ok()) << "known names are accepted";
  EXPECT_TRUE(added.names.empty());
  EXPECT_TRUE(Check({Row(7, 1, 2, 2)}, limits, budget, &added).ok()) << "a fourth name fits";
  s = Check({Row(7, 1, 2, 3)}, limits, budget, &added);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--max-trial-metric-names"));

  budget.bytes = 1000 - (100 + MetricLimits::kRowOverhead);
  EXPECT_TRUE(Check({Row(7, 1, 0, 1)}, limits, budget, &added).ok()) << "exactly the bound fits";
  budget.bytes += 1;
  s = Check({Row(7, 1, 0, 1)}, limits, budget, &added);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("--max-trial-metric-mib"));
}

// Review item 7: a budget keeps 8 bytes per name (a hash), not the name.
TEST(MetricLimitsTest, BudgetKeepsAHashPerNameNotTheName) {
  static_assert(std::is_same_v<decltype(MetricBudget::names), std::vector<uint64_t>>);
  MetricBudget budget;
  for (int i = 0; i < 1000; ++i) budget.Add(MetricNameHash(absl::StrCat(std::string(200, 'n'), i)));
  budget.Add(MetricNameHash(absl::StrCat(std::string(200, 'n'), 5)));  // known: not added again
  EXPECT_EQ(budget.names.size(), 1000u);
  EXPECT_TRUE(std::is_sorted(budget.names.begin(), budget.names.end()));
  EXPECT_LE(budget.names.capacity() * sizeof(uint64_t), 16u << 10) << "at most 16 KiB for 1,000 names";
  EXPECT_TRUE(budget.Has(MetricNameHash(std::string(200, 'n') + "999")));
  EXPECT_FALSE(budget.Has(MetricNameHash("other")));
}

// Review item 4: each checkpoint bound refuses naming the trial and its flag.
TEST(MetricLimitsTest, EachCheckpointBoundRefusesNamingTrialAndFlag) {
  CheckpointLimits limits{3, 10, 100, 1000};
  CheckpointBudget budget{2, 500};
  EXPECT_TRUE(CheckCheckpointReport(7, 10, 100, 500, limits, budget).ok()) << "exactly the bounds fit";
  const std::vector<std::pair<absl::Status, std::string>> refusals = {
      {CheckCheckpointReport(7, 11, 0, 0, limits, budget), "--max-checkpoint-resources"},
      {CheckCheckpointReport(7, 0, 101, 0, limits, budget), "--max-checkpoint-metadata-kib"},
      {CheckCheckpointReport(7, 0, 0, 0, limits, CheckpointBudget{3, 0}), "--max-trial-checkpoints"},
      {CheckCheckpointReport(7, 0, 0, 501, limits, budget), "--max-trial-checkpoint-mib"},
  };
  for (const auto& [s, flag] : refusals) {
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << flag;
    EXPECT_THAT(s.message(), HasSubstr("trial 7: "));
    EXPECT_THAT(s.message(), HasSubstr("(det-master " + flag + ")"));
  }
  EXPECT_TRUE(CheckCheckpointReport(7, 1 << 30, 1 << 30, 1LL << 40, CheckpointLimits{0, 0, 0, 0},
                                    CheckpointBudget{1 << 30, 1LL << 40})
                  .ok())
      << "0: unbounded";
}

TEST(MetricLimitsTest, ZeroIsUnbounded) {
  MetricLimits limits{0, 0, 0, 0};
  MetricBudget budget, added;
  budget.bytes = int64_t{1} << 40;
  MetricRow r = Row(7, 1, 0, 5000);
  r.metrics[std::string(10000, 'n')] = 1;
  EXPECT_TRUE(Check({r}, limits, budget, &added).ok());
}

class MetricLimitsStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/det_metric_limits_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Open();
    ExperimentRow e;
    e.name = "exp";
    e.state = "ACTIVE";
    auto exp = store_->InsertExperiment(e);
    ASSERT_TRUE(exp.ok()) << exp.status();
    TrialRow t;
    t.experiment_id = *exp;
    t.state = "ACTIVE";
    auto trial = store_->InsertTrial(t);
    ASSERT_TRUE(trial.ok()) << trial.status();
    trial_ = *trial;
  }
  void TearDown() override {
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  void Open() {
    store_.reset();
    auto store = Store::Open(dir_ + "/det.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    MetricLimits limits;
    limits.max_trial_names = 10;
    limits.max_trial_bytes = 4096;
    store_->set_metric_limits(limits);
  }
  std::string dir_;
  std::unique_ptr<Store> store_;
  int64_t trial_ = 0;
};

TEST_F(MetricLimitsStoreTest, NamesCountOverGroupsAndPathsAndSurviveReopen) {
  ASSERT_TRUE(store_->InsertMetrics({Row(trial_, 1, 0, 4, "inference")}).ok());
  ASSERT_TRUE(store_->InsertMetricsGrouped({Row(trial_, 1, 4, 4)}).ok());
  absl::Status s = store_->InsertMetricsGrouped({Row(trial_, 2, 8, 3)});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("--max-trial-metric-names"));
  Open();  // a restart: the count comes from the stored rows
  s = store_->InsertMetrics({Row(trial_, 3, 8, 3, "validation")});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_TRUE(store_->InsertMetrics({Row(trial_, 3, 8, 2, "validation")}).ok()) << "the 9th and 10th name fit";
  auto rows = store_->ListMetrics(trial_, "", true);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 3u) << "refused reports stored nothing";
}

TEST_F(MetricLimitsStoreTest, BytesPerTrialSurviveReopen) {
  int accepted = 0;
  absl::Status s;
  for (int b = 1; b <= 100 && (s = store_->InsertMetrics({Row(trial_, b, 0, 5)})).ok(); ++b) ++accepted;
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("--max-trial-metric-mib"));
  EXPECT_GT(accepted, 5);
  Open();
  s = store_->InsertMetricsGrouped({Row(trial_, 1000, 0, 5)});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  auto rows = store_->ListMetrics(trial_, "", true);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(static_cast<int>(rows->size()), accepted);
}

// The profiler's rows (issue 48) do not use up the names or bytes of a trial
// (max_trial_names 10, max_trial_bytes 4096 here), before and after a
// restart, and the store counts them per group from the stored rows.
TEST_F(MetricLimitsStoreTest, ProfilerRowsAreOutsideTheTrialsNameAndByteBounds) {
  for (int b = 1; b <= 100; ++b) {
    MetricRow prof = Row(trial_, b, 0, 0, "profiling");
    for (const char* k : {"wall_s", "data_loader_s", "forward_s", "backward_s", "allreduce_s", "optimizer_step_s",
                          "checkpoint_s", "validation_s", "runtime_s", "batches", "samples"}) {
      prof.metrics[k] = b;
    }
    MetricRow sys = Row(trial_, b, 0, 0, "system");
    sys.metrics["cpu_ratio"] = 1;
    sys.metrics["rss_bytes"] = 1e9;
    ASSERT_TRUE(store_->InsertMetrics({prof, sys}).ok()) << "row " << b;
  }
  Open();  // a restart: the counts come from the stored rows
  EXPECT_TRUE(store_->InsertMetrics({Row(trial_, 1, 0, 10, "inference")}).ok())
      << "all 10 names are still the trial's own";
  MetricRow spoof = Row(trial_, 101, 0, 0, "system");
  spoof.metrics["loss"] = 1;
  absl::Status s = store_->InsertMetrics({spoof});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("metric group 'system' is the profiler's and has no key 'loss'"));
  auto rows = store_->ListMetrics(trial_, "profiling", true);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 100u);
}

// The profiler's groups (issue 48): outside the names and bytes bounds, with
// a fixed key set and a row bound of their own.
TEST(MetricLimitsTest, ProfilerGroupsHaveTheirOwnKeysAndRowBound) {
  MetricLimits limits;
  limits.max_trial_names = 1;
  limits.max_trial_bytes = 10;
  MetricBudget budget, added;
  MetricRow prof = Row(7, 1, 0, 0, "profiling");
  for (const char* k : {"wall_s", "data_loader_s", "forward_s", "backward_s", "allreduce_s", "optimizer_step_s",
                        "checkpoint_s", "validation_s", "runtime_s", "unattributed_s", "batches", "samples"}) {
    prof.metrics[k] = 1;
  }
  MetricRow sys = Row(7, 1, 0, 0, "system");
  for (const char* k : {"cpu_ratio", "rss_bytes", "gpu0_utilization_ratio", "gpu63_memory_used_bytes"}) sys.metrics[k] = 1;
  ASSERT_TRUE(Check({prof, sys}, limits, budget, &added).ok()) << "not counted against names or bytes";
  EXPECT_TRUE(added.names.empty());
  EXPECT_EQ(added.bytes, 0);
  EXPECT_EQ(added.profiling_rows, 1);
  EXPECT_EQ(added.system_rows, 1);

  for (const char* bad : {"loss", "gpu64_utilization_ratio", "gpu01_memory_used_bytes", "gpu_memory_used_bytes"}) {
    MetricRow spoof = Row(7, 2, 0, 0, "system");
    spoof.metrics[bad] = 1;
    absl::Status s = Check({spoof}, limits, budget, &added);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("metric group 'system' is the profiler's and has no key '", bad)));
  }
  MetricRow spoof = prof;
  spoof.metrics["m0"] = 1;
  EXPECT_THAT(Check({spoof}, limits, budget, &added).message(), HasSubstr("group 'profiling'"));

  budget.profiling_rows = kMaxProfilerRowsPerGroup - 1;
  EXPECT_TRUE(Check({prof}, limits, budget, &added).ok()) << "exactly the bound fits";
  absl::Status s = Check({prof, prof}, limits, budget, &added);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("metric group 'profiling' holds"));
  EXPECT_TRUE(Check({sys}, limits, budget, &added).ok()) << "each group has its own count";
  ApplyMetricBudget(added, &budget);
  EXPECT_EQ(budget.system_rows, 1);
}

// The profiler's groups together have a byte bound of their own (issue 48
// review, finding 4), counted from the stored rows after a restart like the
// trial's other bytes, and take only finite values >= 0.
TEST_F(MetricLimitsStoreTest, ProfilerBytesAreBoundedAndCountedAfterAReopen) {
  MetricLimits limits;
  limits.max_profiler_bytes = 2000;
  store_->set_metric_limits(limits);
  auto sys = [&](int64_t b) {
    MetricRow r = Row(trial_, b, 0, 0, b % 2 == 0 ? "system" : "profiling");
    r.metrics[b % 2 == 0 ? "cpu_ratio" : "wall_s"] = 1.5;
    return r;
  };
  int64_t b = 1;
  absl::Status s;
  while ((s = store_->InsertMetrics({sys(b)})).ok() && b < 1000) ++b;
  ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("the profiler's groups (profiling and system) hold"));
  EXPECT_GT(b, 10);
  Open();  // a restart: the bytes come from the stored rows
  store_->set_metric_limits(limits);
  s = store_->InsertMetrics({sys(b)});
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << "still full after a restart: " << s;
  EXPECT_TRUE(store_->InsertMetrics({Row(trial_, b, 0, 1, "inference")}).ok()) << "not the trial's own bytes";

  MetricBudget budget, added;
  for (double bad : {-0.5, std::nan(""), -HUGE_VAL}) {
    MetricRow r = Row(7, 1, 0, 0, "system");
    r.metrics["rss_bytes"] = bad;
    s = Check({r}, limits, budget, &added);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("metric group 'system' key 'rss_bytes'")) << bad;
  }
}

// A re-sent report (the runtime's queue retries after a lost answer) is
// skipped by INSERT OR IGNORE and charges no budget (issue 48 second review,
// finding 4): with room for two profiler rows (and the trial's own bytes for
// two rows), sending the same row 20 times leaves room for a second one.
TEST_F(MetricLimitsStoreTest, ResentRowsChargeNoBudget) {
  MetricRow first = Row(trial_, 1, 0, 0, "profiling"), second = Row(trial_, 2, 0, 0, "profiling");
  first.metrics["wall_s"] = second.metrics["wall_s"] = 1.5;
  const int64_t row_bytes = static_cast<int64_t>(store_internal::EncodeMetrics(first.metrics).size()) +
                            MetricLimits::kRowOverhead;
  MetricRow own = Row(trial_, 1, 0, 2, "inference"), own2 = Row(trial_, 2, 2, 2, "inference");
  MetricLimits limits;
  limits.max_profiler_bytes = 2 * row_bytes + 1;
  limits.max_trial_names = 4;
  limits.max_trial_bytes = 2 * (static_cast<int64_t>(store_internal::EncodeMetrics(own.metrics).size()) +
                                MetricLimits::kRowOverhead) + 1;
  store_->set_metric_limits(limits);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(store_->InsertMetrics({first}).ok()) << "send " << i;
    ASSERT_TRUE(store_->InsertMetricsGrouped({own}).ok()) << "send " << i;
  }
  EXPECT_TRUE(store_->InsertMetrics({second}).ok()) << "one row stored, room for another";
  EXPECT_TRUE(store_->InsertMetricsGrouped({own2}).ok()) << "one row stored, room for another";
  auto rows = store_->ListMetrics(trial_, "profiling", true);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->size(), 2u);
}

}  // namespace
}  // namespace master
}  // namespace det
