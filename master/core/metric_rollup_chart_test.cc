// Charts from rollups (issue 50): GetTrialMetrics answered from the chart
// rollups kept at ingestion equals the full scan's downsampling, after the
// store and the master restart, with NaNs, ties, archived reports and a
// resumed run; the chart of every group (no group named) too.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "master/core/master_core.h"
#include "master/core/metric_downsample.h"
#include "absl/strings/str_cat.h"
#include "master/store/store.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

class RollupChartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StartMaster();
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(det::testing::SingleTrialConfig("rollups", dir_ / "checkpoints", 1));
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(true);
    auto resp = core_->CreateExperiment(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    auto trials = core_->store()->ListTrials(resp->experiment().id());
    ASSERT_TRUE(trials.ok() && !trials->empty());
    trial_ = trials->front().id;
  }
  void StartMaster() {
    core_.reset();
    MasterOptions options;
    options.data_dir = dir_.path();
    options.background_thread = false;
    auto core = MasterCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
  }
  // Training reports [from, to] of run `run` (loss with many ties, acc with
  // NaNs, lr constant) and a validation report every fifth batch, written
  // by the master's store 5,000 at a time.
  void Report(int64_t from, int64_t to, int64_t run) {
    std::vector<MetricRow> rows;
    for (int64_t b = from; b <= to; ++b) {
      MetricRow r;
      r.trial_id = trial_;
      r.trial_run_id = run;
      r.group = "training";
      r.total_batches = b;
      r.metrics = {{"loss", std::round(8 * std::sin(b / 700.0 + run)) / 2},
                   {"lr", 0.1},
                   {"acc", b % 11 == 0 ? std::nan("") : std::cos(b / 90.0) + run}};
      if (b % 3 == 0) r.metrics.erase("lr");
      rows.push_back(r);
      if (b % 5 == 0) {
        r.group = "validation";
        r.metrics = {{"vloss", b % 7 == 0 ? std::nan("") : std::round(std::sin(b / 50.0) * 4)}};
        rows.push_back(r);
      }
      if (custom_ && b % 2 == 0) {
        r.group = "custom";
        r.metrics = {{"c", std::round(std::cos(b / 300.0) * 6)}};
        if (b % 4 == 0) r.metrics["d"] = b % 13 == 0 ? std::nan("") : std::sin(b / 40.0);
        rows.push_back(r);
      }
      if (rows.size() >= 5000 || b == to) {
        ASSERT_TRUE(core_->store()->InsertMetrics(rows).ok());
        rows.clear();
      }
    }
  }
  apiv1::GetTrialMetricsResponse Get(const std::string& group, int limit, bool scan) {
    apiv1::GetTrialMetricsRequest req;
    req.set_trial_id(trial_);
    req.set_group(group);
    req.set_limit(limit);
    // Naming every metric is not a cacheable chart: the full scan answers.
    if (scan) {
      for (const char* name : {"loss", "lr", "acc", "vloss", "c", "d"}) req.add_metric_names(name);
    }
    auto resp = core_->GetTrialMetrics(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : apiv1::GetTrialMetricsResponse();
  }
  // A report a line ("id batches name=value ..."); only differing lines are
  // printed when two answers differ.
  static std::vector<std::string> Lines(const apiv1::GetTrialMetricsResponse& resp) {
    std::vector<std::string> out;
    for (const auto& m : resp.metrics()) {
      std::string line = std::to_string(m.id()) + " " + std::to_string(m.total_batches());
      std::map<std::string, double> sorted(m.metrics().begin(), m.metrics().end());
      for (const auto& [name, y] : sorted) line += " " + name + "=" + std::to_string(y);
      out.push_back(line);
    }
    return out;
  }
  static std::string FirstDifference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const std::string x = i < a.size() ? a[i] : "(none)", y = i < b.size() ? b[i] : "(none)";
      if (x != y) return "report " + std::to_string(i) + ": rollups " + x + ", scan " + y;
    }
    return "";
  }
  // Whether the rollups cover `group` for a chart of at most `limit` points.
  bool Covered(const std::string& group, int limit) {
    std::vector<RollupChartSeries> series;
    auto covered = core_->store()->ReadRollupChart(
        trial_, group,
        [limit](int64_t n) { return static_cast<int64_t>(ChartBucketWidth(static_cast<size_t>(n), limit)); },
        4096, &series);
    EXPECT_TRUE(covered.ok()) << covered.status();
    return covered.value_or(false);
  }
  // Runs `sql` on the master's database through a connection of its own
  // (the chart path reads the rollups from SQLite, not from memory).
  void Sql(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir_ / "det.db").c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 10000);
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    EXPECT_EQ(rc, SQLITE_OK) << sql << ": " << (err != nullptr ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
  // Spoils every stored rollup block of the trial (each keeps its minimum
  // as its maximum): a chart answered from rollups then differs from the
  // scan's, one answered by scanning does not.
  void SpoilRollupBlocks() {
    Sql(absl::StrCat("UPDATE metric_rollups SET hi_id = lo_id, hi = lo WHERE width > 0 AND trial_id = ", trial_));
  }
  void ExpectSameAsScan(const char* when) {
    for (const char* group : {"training", "validation", ""}) {
      for (int limit : {0, 100, 999, 4000, 10000}) {
        const apiv1::GetTrialMetricsResponse rollup = Get(group, limit, false), scan = Get(group, limit, true);
        ASSERT_GT(scan.metrics_size(), 0) << when;
        EXPECT_EQ(rollup.downsampled(), scan.downsampled()) << when << ": group " << group << ", limit " << limit;
        EXPECT_EQ(FirstDifference(Lines(rollup), Lines(scan)), "") << when << ": group " << group << ", limit " << limit;
      }
    }
    EXPECT_TRUE(Covered("training", 1000)) << when << ": the rollups answer";
  }

  det::testing::TempDir dir_;
  std::unique_ptr<MasterCore> core_;
  int64_t trial_ = 0;
  bool custom_ = false;  // Report also writes a "custom" group (c, d)
};

// 200,000 training reports (3 names) and 40,000 validation reports: the
// master restarts twice mid-block, the trial restarts from its checkpoint at
// batch 150,000 (the reports after it archived) and its resumed run reports
// to 200,000; every chart equals the full scan's.
TEST_F(RollupChartTest, RollupChartsEqualTheFullScanAfterRestartsAndArchives) {
  Report(1, 120000, 0);
  StartMaster();
  Report(120001, 170000, 0);
  ExpectSameAsScan("before the archive");
  ASSERT_TRUE(core_->store()->ArchiveMetricsAfter(trial_, 150000).ok());
  ExpectSameAsScan("after the archive");
  StartMaster();
  Report(150001, 200000, 1);
  ExpectSameAsScan("after the resumed run");
  StartMaster();
  const auto t0 = std::chrono::steady_clock::now();
  const apiv1::GetTrialMetricsResponse first = Get("training", 0, false);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ timing ] first chart of 200,000 training reports after a master start: %.1f ms (%d reports)\n", ms,
              first.metrics_size());
  ExpectSameAsScan("after the master restarted");
  // The all-groups chart was answered from the rollups: spoiled blocks show.
  SpoilRollupBlocks();
  for (int limit : {0, 999}) {
    EXPECT_NE(FirstDifference(Lines(Get("", limit, false)), Lines(Get("", limit, true))), "")
        << "limit " << limit << ": the all-groups chart did not read the rollups";
  }
}

// A custom group beside training and validation: the all-groups chart
// comes from the three groups' rollups. With the validation group's rollups
// marker gone (as for a group that began before migration 16) the whole
// all-groups chart is scanned, still equal, while the training chart alone
// still reads its rollups.
TEST_F(RollupChartTest, AllGroupsChartFallsBackToTheScanWhenAGroupHasNoRollups) {
  custom_ = true;
  Report(1, 90000, 0);
  StartMaster();
  Report(90001, 100000, 0);
  for (int limit : {0, 100, 4000}) {
    const apiv1::GetTrialMetricsResponse rollup = Get("", limit, false), scan = Get("", limit, true);
    EXPECT_TRUE(scan.downsampled());
    EXPECT_EQ(rollup.downsampled(), scan.downsampled()) << "limit " << limit;
    EXPECT_EQ(FirstDifference(Lines(rollup), Lines(scan)), "") << "limit " << limit;
  }
  EXPECT_TRUE(Covered("custom", 1000));
  Sql(absl::StrCat("DELETE FROM metric_rollups WHERE trial_id = ", trial_,
                   " AND metric_group = 'validation' AND width = 0 AND name = ''"));
  StartMaster();
  EXPECT_FALSE(Covered("validation", 1000));
  SpoilRollupBlocks();
  for (int limit : {0, 100, 4000}) {
    const apiv1::GetTrialMetricsResponse rollup = Get("", limit, false), scan = Get("", limit, true);
    EXPECT_EQ(rollup.downsampled(), scan.downsampled()) << "limit " << limit;
    EXPECT_EQ(FirstDifference(Lines(rollup), Lines(scan)), "") << "limit " << limit << ": not scanned";
  }
  EXPECT_NE(FirstDifference(Lines(Get("training", 0, false)), Lines(Get("training", 0, true))), "")
      << "the training chart alone reads its (spoiled) rollups";
}

}  // namespace
}  // namespace det::master
