// The chart downsampler (metric_downsample.h) and GetTrialMetrics: the
// default downsampled answer (count bound, first/last and extremes kept,
// exact passthrough under the limit) and full-resolution paging.
#include "master/core/metric_downsample.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "master/core/chart_cache.h"
#include "master/core/master_core.h"
#include "master/store/store.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

TEST(MinMaxBucketIndicesTest, UnderTheLimitEveryPoint) {
  std::vector<double> ys = {3, 1, 4, 1, 5};
  EXPECT_EQ(MinMaxBucketIndices(ys, 5), (std::vector<size_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(MinMaxBucketIndices(ys, 1000), (std::vector<size_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(MinMaxBucketIndices({}, 10).empty());
}

TEST(MinMaxBucketIndicesTest, BoundFirstLastAndExtremes) {
  for (size_t n : {1001u, 5000u, 123457u}) {
    std::vector<double> ys(n);
    for (size_t i = 0; i < n; ++i) ys[i] = std::sin(static_cast<double>(i) / 37.0) * 10 + static_cast<double>(i % 7);
    const size_t spike_hi = n / 3, spike_lo = 2 * n / 3;
    ys[spike_hi] = 1e6;
    ys[spike_lo] = -1e6;
    auto idx = MinMaxBucketIndices(ys, 1000);
    EXPECT_LE(idx.size(), 1000u) << n;
    EXPECT_GT(idx.size(), 499u / 2) << n;  // more than half the 499 buckets hold a point
    EXPECT_EQ(idx.front(), 0u);
    EXPECT_EQ(idx.back(), n - 1);
    EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
    EXPECT_EQ(std::set<size_t>(idx.begin(), idx.end()).size(), idx.size()) << "duplicates";
    EXPECT_NE(std::find(idx.begin(), idx.end(), spike_hi), idx.end());
    EXPECT_NE(std::find(idx.begin(), idx.end(), spike_lo), idx.end());
  }
}

TEST(MinMaxBucketIndicesTest, NanIsNeverPreferredToANumber) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> ys(100, nan);
  ys[50] = 7;
  auto idx = MinMaxBucketIndices(ys, 4);  // one bucket over 1..98
  EXPECT_EQ(idx, (std::vector<size_t>{0, 50, 99}));
}

// Issue 50: the buckets are aligned power-of-two runs of the point index,
// the fewest that fit the bound, so a bucket is a union of aligned rollup
// blocks; folding each bucket from blocks of 64 (PointExtremes::Merge)
// chooses exactly what the point-by-point fold chooses, NaNs and ties
// included.
TEST(MinMaxBucketIndicesTest, AlignedBucketsComposeFromBlocks) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  uint64_t seed = 12345;
  auto next = [&seed] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(seed >> 33);
  };
  for (size_t n : {3u, 64u, 1000u, 1001u, 4097u, 70001u}) {
    std::vector<double> ys(n);
    for (size_t i = 0; i < n; ++i) ys[i] = next() % 10 == 0 ? nan : static_cast<double>(next() % 50);  // ties
    for (size_t i = 200; i < std::min<size_t>(n, 400); ++i) ys[i] = nan;  // whole NaN blocks
    for (size_t max_points : {4u, 10u, 101u, 1000u, 10000u}) {
      const size_t w = ChartBucketWidth(n, max_points);
      const auto idx = MinMaxBucketIndices(ys, max_points);
      if (w == 0) {
        EXPECT_EQ(idx.size(), n);
        continue;
      }
      const size_t bound = std::max<size_t>((std::max<size_t>(max_points, 4) - 2) / 2, 1);
      EXPECT_EQ(w & (w - 1), 0u) << "a power of two";
      EXPECT_LE((n + w - 1) / w, bound);
      if (w > 1) {
        EXPECT_GT((n + w / 2 - 1) / (w / 2), bound) << "the smallest that fits";
      }
      std::vector<size_t> composed = {0, n - 1};
      for (size_t begin = 0; begin < n; begin += w) {
        PointExtremes bucket;
        for (size_t block = begin; block < std::min(n, begin + w); block += 64) {
          PointExtremes e;
          for (size_t i = block; i < std::min({n, begin + w, block + 64}); ++i) e.Add(static_cast<int64_t>(i), ys[i]);
          bucket.Merge(e);
        }
        EXPECT_EQ(bucket.count, static_cast<int64_t>(std::min(n, begin + w) - begin));
        composed.push_back(static_cast<size_t>(bucket.lo));
        composed.push_back(static_cast<size_t>(bucket.hi));
      }
      std::sort(composed.begin(), composed.end());
      composed.erase(std::unique(composed.begin(), composed.end()), composed.end());
      EXPECT_EQ(idx, composed) << "n=" << n << " max_points=" << max_points;
      EXPECT_LE(idx.size(), std::max<size_t>(max_points, 4));
    }
  }
}

// The chart cache stays within its byte bound: the least recently used
// scan goes first, and a scan larger than the whole bound is not kept.
TEST(ChartCacheTest, BoundedLeastRecentlyUsedFirst) {
  auto entry = [](size_t rows) {
    ChartCache::Entry e;
    for (size_t i = 0; i < rows; ++i) {
      e.scan.ids.push_back(static_cast<int64_t>(i + 1));
      e.scan.batches.push_back(static_cast<int64_t>(i + 1));
      e.scan.group_of.push_back(0);
      e.scan.values.emplace_back(0, 1.0);
      e.scan.offsets.push_back(static_cast<uint32_t>(i + 1));
    }
    e.max_id = static_cast<int64_t>(rows);
    return e;
  };
  const size_t one = ChartCache::Bytes(entry(1000).scan);
  ChartCache cache(3 * one);
  cache.Put(1, "training", entry(1000));
  cache.Put(2, "training", entry(1000));
  cache.Put(3, "training", entry(1000));
  EXPECT_LE(cache.bytes(), 3 * one);
  auto taken = cache.Take(1, "training");  // trial 1 becomes the most recent
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->max_id, 1000);
  cache.Put(1, "training", *std::move(taken));
  cache.Put(4, "training", entry(1000));  // over the bound: trial 2 goes
  EXPECT_LE(cache.bytes(), 3 * one);
  EXPECT_FALSE(cache.Take(2, "training").has_value());
  EXPECT_TRUE(cache.Take(3, "training").has_value());
  EXPECT_FALSE(cache.Take(3, "training").has_value()) << "Take removes";
  cache.Put(5, "validation", entry(10000));  // larger than the whole bound
  EXPECT_FALSE(cache.Take(5, "validation").has_value());
  EXPECT_LE(cache.bytes(), 3 * one);
}

MetricRow Row(int64_t id, const std::string& group, int64_t batches, std::map<std::string, double> m) {
  MetricRow r;
  r.id = id;
  r.group = group;
  r.total_batches = batches;
  r.metrics = std::move(m);
  return r;
}

TEST(DownsampleReportsTest, PerSeriesBoundAndShortGroupsUntouched) {
  std::vector<MetricRow> rows;
  int64_t id = 0;
  for (int64_t b = 1; b <= 5000; ++b) {
    rows.push_back(Row(++id, "training", b, {{"loss", 1.0 / b}, {"acc", b % 13 == 0 ? 1.0 : 0.5}}));
    if (b % 100 == 0) rows.push_back(Row(++id, "validation", b, {{"loss", 2.0 / b}}));
  }
  bool downsampled = false;
  auto out = DownsampleReports(rows, 100, &downsampled);
  EXPECT_TRUE(downsampled);
  size_t loss = 0, acc = 0, validation = 0;
  for (const auto& r : out) {
    if (r.group == "validation") {
      ++validation;
      EXPECT_EQ(r.metrics.size(), 1u);
      continue;
    }
    loss += r.metrics.count("loss");
    acc += r.metrics.count("acc");
    EXPECT_FALSE(r.metrics.empty());
  }
  EXPECT_EQ(validation, 50u);  // 50 points: under the limit, every one
  EXPECT_LE(loss, 100u);
  EXPECT_LE(acc, 100u);
  EXPECT_EQ(out.front().total_batches, 1);
  EXPECT_EQ(out.back().total_batches, 5000);
  EXPECT_TRUE(std::is_sorted(out.begin(), out.end(),
                             [](const MetricRow& a, const MetricRow& b) { return a.id < b.id; }));

  auto same = DownsampleReports(rows, 10000, &downsampled);
  EXPECT_FALSE(downsampled);
  ASSERT_EQ(same.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(same[i].metrics, rows[i].metrics);
}

class MetricQueryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterOptions options;
    options.data_dir = dir_.path();
    options.background_thread = false;
    auto core = MasterCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(det::testing::SingleTrialConfig("metrics", dir_ / "checkpoints", 1));
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(true);
    auto resp = core_->CreateExperiment(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    // A second connection to the master's database writes the reports.
    auto store = Store::Open(dir_ / "det.db");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto trials = store_->ListTrials(resp->experiment().id());
    ASSERT_TRUE(trials.ok() && !trials->empty());
    trial_ = trials->front().id;
  }
  void Insert(int64_t n) {
    std::vector<MetricRow> rows;
    for (int64_t b = 1; b <= n; ++b) {
      MetricRow r = Row(0, "training", b, {{"loss", b == n / 2 ? 100.0 : 1.0 + std::sin(b / 50.0)}});
      r.trial_id = trial_;
      rows.push_back(r);
      if (b % 10 == 0) {
        r.group = "validation";
        rows.push_back(r);
      }
    }
    ASSERT_TRUE(store_->InsertMetrics(rows).ok());
  }
  apiv1::GetTrialMetricsResponse Get(apiv1::GetTrialMetricsRequest req) {
    req.set_trial_id(trial_);
    auto resp = core_->GetTrialMetrics(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : apiv1::GetTrialMetricsResponse();
  }

  det::testing::TempDir dir_;
  std::unique_ptr<MasterCore> core_;
  std::unique_ptr<Store> store_;
  int64_t trial_ = 0;
};

TEST_F(MetricQueryTest, DefaultIsDownsampledToAThousandPointsPerSeries) {
  Insert(20000);
  apiv1::GetTrialMetricsRequest req;
  req.set_group("training");
  auto resp = Get(req);
  EXPECT_TRUE(resp.downsampled());
  EXPECT_LE(resp.metrics_size(), 1000);
  // Aligned power-of-two buckets (ChartBucketWidth): 20,000 points in 313
  // buckets of 64 (499 allowed), a minimum and a maximum each.
  EXPECT_GE(resp.metrics_size(), 600);
  EXPECT_EQ(resp.metrics(0).total_batches(), 1);
  EXPECT_EQ(resp.metrics(resp.metrics_size() - 1).total_batches(), 20000);
  bool spike = false;
  for (const auto& m : resp.metrics()) spike = spike || m.metrics().at("loss") == 100.0;
  EXPECT_TRUE(spike) << "the maximum survives";

  req.set_group("validation");  // 2,000 points: 1,000 kept
  resp = Get(req);
  EXPECT_TRUE(resp.downsampled());
  EXPECT_LE(resp.metrics_size(), 1000);
  req.set_limit(5000);  // under the limit: exact
  resp = Get(req);
  EXPECT_FALSE(resp.downsampled());
  EXPECT_EQ(resp.metrics_size(), 2000);
}

// A chart asked for again extends its cached scan with the rows reported
// since; every answer equals a fresh scan's (asking for metric_names skips
// the cache): after new reports, after a report that arrived out of order,
// and after the master archived reports (a trial resumed from a checkpoint).
TEST_F(MetricQueryTest, CachedChartsMatchAFreshScan) {
  apiv1::GetTrialMetricsRequest cached;
  cached.set_group("training");
  apiv1::GetTrialMetricsRequest fresh = cached;
  fresh.add_metric_names("loss");
  auto expect_same = [&](const char* when) {
    const std::string a = Get(cached).SerializeAsString(), b = Get(fresh).SerializeAsString();
    EXPECT_FALSE(b.empty()) << when;
    EXPECT_EQ(a, b) << when;
  };
  auto add = [&](int64_t from, int64_t to, int64_t run, double value) {
    std::vector<MetricRow> rows;
    for (int64_t b = from; b <= to; ++b) {
      MetricRow r = Row(0, "training", b, {{"loss", value + std::sin(b / 30.0)}});
      r.trial_id = trial_;
      r.trial_run_id = run;
      rows.push_back(r);
    }
    ASSERT_TRUE(store_->InsertMetrics(rows).ok());
  };
  add(1, 5000, 0, 1.0);
  expect_same("first chart");
  add(5001, 8000, 0, 2.0);
  expect_same("after more reports");
  add(10, 10, 1, 500.0);  // a late report that sorts near the start
  expect_same("after a report out of order");
  bool late = false;
  const apiv1::GetTrialMetricsResponse with_late = Get(cached);
  for (const auto& m : with_late.metrics()) late = late || m.metrics().at("loss") > 400;
  EXPECT_TRUE(late) << "the late maximum is charted";
  ASSERT_TRUE(core_->store()->ArchiveMetricsAfter(trial_, 3000).ok());
  expect_same("after an archive");
  auto resp = Get(cached);
  ASSERT_GT(resp.metrics_size(), 0);
  EXPECT_EQ(resp.metrics(resp.metrics_size() - 1).total_batches(), 3000);
  add(3001, 4000, 2, 3.0);  // the resumed run reports again
  expect_same("after the resumed run's reports");
}

TEST_F(MetricQueryTest, FullResolutionPagesEveryReportOnce) {
  Insert(2500);  // 2,750 reports, several per total_batches
  apiv1::GetTrialMetricsRequest req;
  req.set_full_resolution(true);
  req.set_limit(1000);
  std::set<int64_t> ids;
  int pages = 0;
  for (;;) {
    auto resp = Get(req);
    ++pages;
    for (const auto& m : resp.metrics()) EXPECT_TRUE(ids.insert(m.id()).second) << "duplicate " << m.id();
    if (!resp.has_more()) break;
    req.set_after_total_batches(resp.next_after_total_batches());
    req.set_after_id(resp.next_after_id());
    ASSERT_LT(pages, 10);
  }
  EXPECT_EQ(ids.size(), 2750u);
  EXPECT_EQ(pages, 3);
}

TEST_F(MetricQueryTest, MetricNamesAreFilteredBeforeDownsampling) {
  std::vector<MetricRow> rows;
  for (int64_t b = 1; b <= 3000; ++b) {
    MetricRow r = Row(0, "training", b, {{"loss", 1.0 / b}, {"acc", b == 1234 ? -5.0 : 0.5}});
    r.trial_id = trial_;
    rows.push_back(r);
  }
  ASSERT_TRUE(store_->InsertMetrics(rows).ok());
  apiv1::GetTrialMetricsRequest req;
  req.add_metric_names("acc");
  auto resp = Get(req);
  EXPECT_TRUE(resp.downsampled());
  EXPECT_LE(resp.metrics_size(), 1000);
  bool low = false;
  for (const auto& m : resp.metrics()) {
    ASSERT_EQ(m.metrics_size(), 1);
    low = low || m.metrics().at("acc") == -5.0;
  }
  EXPECT_TRUE(low) << "the minimum of the series asked for survives";
}

TEST_F(MetricQueryTest, ScanStopsAfterItsValueBudget) {
  Insert(10);  // 10 training rows of one value each, one validation row
  Store::MetricScan scan;
  auto n = store_->ScanMetrics(trial_, "training", false, -1, 0, 100, &scan, 3);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 4);  // the 4th row took this call past 3 values
  n = store_->ScanMetrics(trial_, "training", false, scan.batches.back(), scan.ids.back(), 100, &scan, 100);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 6);
  EXPECT_EQ(scan.rows(), 10u);
  EXPECT_EQ(scan.values.size(), 10u);
  EXPECT_EQ(scan.batches.back(), 10);
}

TEST_F(MetricQueryTest, BadLimitsAreRejected) {
  for (auto [full, limit] : {std::pair{false, 10001}, std::pair{true, 10001}, std::pair{false, -1}}) {
    apiv1::GetTrialMetricsRequest req;
    req.set_trial_id(trial_);
    req.set_full_resolution(full);
    req.set_limit(limit);
    auto resp = core_->GetTrialMetrics(req);
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kInvalidArgument) << limit;
    EXPECT_NE(resp.status().message().find("limit"), std::string::npos);
  }
}

}  // namespace
}  // namespace det::master
