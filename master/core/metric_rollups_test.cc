// Issue 50's chart rollups, the in-memory and pure parts: MetricRollups
// (master/store/metric_rollups.h: blocks closed as points arrive,
// transaction hooks, bounds) and a chart composed from closed blocks plus
// an open tail choosing exactly what a point-by-point downsampling chooses
// (MinMaxBucketIndices, metric_downsample.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "master/core/metric_downsample.h"
#include "master/store/metric_rollups.h"

namespace det::master {
namespace {

std::vector<double> Series(size_t n, uint64_t seed) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto next = [&seed] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<uint32_t>(seed >> 33);
  };
  std::vector<double> ys(n);
  for (size_t i = 0; i < n; ++i) ys[i] = next() % 10 == 0 ? nan : static_cast<double>(next() % 50);  // ties
  for (size_t i = 3000; i < std::min<size_t>(n, 3200); ++i) ys[i] = nan;  // NaN-only blocks
  if (n > 40000) ys[40000] = 1e9;  // a global maximum deep inside
  return ys;
}

// Feeds `ys` (row id = index + 1, total_batches = index) and returns the
// closed blocks, as the store would have written them.
std::vector<RollupBlock> Feed(const std::vector<double>& ys, MetricRollups* rollups, const RollupSeriesKey& key) {
  rollups->Restore(key, RollupSeries{});
  std::vector<RollupBlock> closed;
  for (size_t i = 0; i < ys.size(); ++i) {
    EXPECT_TRUE(rollups->Add(key, static_cast<int64_t>(i), static_cast<int64_t>(i + 1), ys[i], &closed));
  }
  rollups->Commit();
  return closed;
}

TEST(MetricRollupsTest, ChartFromBlocksEqualsThePointByPointDownsampling) {
  const RollupSeriesKey key{1, "training", "loss"};
  for (size_t n : {63u, 64u, 1000u, 4097u, 70001u, 200000u}) {
    const std::vector<double> ys = Series(n, n);
    MetricRollups rollups;
    const std::vector<RollupBlock> blocks = Feed(ys, &rollups, key);
    ASSERT_EQ(rollups.Find(key)->points, static_cast<int64_t>(n));
    for (size_t max_points : {4u, 100u, 1000u, 10000u}) {
      const int64_t w = static_cast<int64_t>(ChartBucketWidth(n, max_points));
      if (w == 0) continue;  // every point: no rollup needed
      // The open tail: the points after the last closed 64-block (every
      // point when the buckets are narrower than a block: the caller scans).
      const size_t tail_from = w < kRollupWidths[0] ? 0 : n / 64 * 64;
      std::vector<std::tuple<int64_t, int64_t, double>> tail;
      for (size_t i = tail_from; i < n; ++i) tail.emplace_back(i, i + 1, ys[i]);
      std::vector<RollupRun> runs;
      ASSERT_TRUE(RollupRunsFor(blocks, static_cast<int64_t>(n), w, tail, &runs));
      if (w >= kRollupWidths[0]) {
        // O(points): at most 4 blocks a bucket, then at most 3 of each
        // narrower width and a tail of less than 64 points.
        EXPECT_LE(runs.size(), 4 * (n / static_cast<size_t>(w) + 1) + 3 * kRollupWidths.size() + 64) << n;
      }
      std::vector<size_t> picks = {0, n - 1};
      for (const PointExtremes& b : MergeRunsIntoBuckets(runs, w)) {
        picks.push_back(static_cast<size_t>(b.lo - 1));
        picks.push_back(static_cast<size_t>(b.hi - 1));
      }
      std::sort(picks.begin(), picks.end());
      picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
      EXPECT_EQ(picks, MinMaxBucketIndices(ys, max_points)) << "n=" << n << " max_points=" << max_points;
    }
  }
}

TEST(MetricRollupsTest, BlocksCloseAtEveryWidth) {
  MetricRollups rollups;
  const std::vector<RollupBlock> blocks = Feed(std::vector<double>(16384 + 100, 1.0), &rollups, {1, "g", "m"});
  size_t per_width[kRollupWidths.size()] = {};
  for (const RollupBlock& b : blocks) {
    const size_t i = static_cast<size_t>(std::find(kRollupWidths.begin(), kRollupWidths.end(), b.width) -
                                         kRollupWidths.begin());
    ASSERT_LT(i, kRollupWidths.size());
    EXPECT_EQ(b.block, static_cast<int64_t>(per_width[i]++)) << "in order, from 0";
    EXPECT_EQ(b.extremes.count, b.width);
    EXPECT_EQ(b.last_id, (b.block + 1) * b.width) << "its last point";
    EXPECT_EQ(b.extremes.lo, b.block * b.width + 1) << "the first on ties";
  }
  EXPECT_EQ(per_width[0], 257u);
  EXPECT_EQ(per_width[1], 64u);
  EXPECT_EQ(per_width[2], 16u);
  EXPECT_EQ(per_width[3], 4u);
  EXPECT_EQ(per_width[4], 1u);
  EXPECT_EQ(per_width[5], 0u);
  const RollupSeries* s = rollups.Find({1, "g", "m"});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->open[0].count, 100 - 64);
  EXPECT_EQ(s->open[4].count, 100);
  EXPECT_EQ(s->open[5].count, 16384 + 100);
}

// In-memory state never runs ahead of what is committed: a series changed
// after a savepoint's mark is dropped when that savepoint rolls back (and
// every series changed in the transaction when it aborts), to be rebuilt
// from what the database holds.
TEST(MetricRollupsTest, RollbackDropsWhatTheSavepointChanged) {
  MetricRollups rollups;
  const RollupSeriesKey a{1, "training", "loss"}, b{1, "training", "acc"}, c{2, "validation", "loss"};
  std::vector<RollupBlock> closed;
  for (const auto& k : {a, b, c}) rollups.Restore(k, RollupSeries{});
  rollups.Commit();

  const size_t outer = rollups.Mark();
  ASSERT_TRUE(rollups.Add(b, 1, 10, 0.5, &closed));
  const size_t inner = rollups.Mark();
  ASSERT_TRUE(rollups.Add(a, 1, 11, 0.5, &closed));
  rollups.RollbackTo(inner);
  EXPECT_EQ(rollups.Find(a), nullptr) << "changed inside the rolled-back savepoint";
  ASSERT_NE(rollups.Find(b), nullptr) << "changed before it";
  EXPECT_EQ(rollups.Find(b)->points, 1);
  // b, changed before the mark, changed again after a new one: dropped too.
  const size_t again = rollups.Mark();
  ASSERT_TRUE(rollups.Add(b, 2, 12, 0.5, &closed));
  rollups.RollbackTo(again);
  EXPECT_EQ(rollups.Find(b), nullptr);
  ASSERT_TRUE(rollups.Add(c, 1, 13, 0.5, &closed));
  rollups.RollbackTo(outer);
  EXPECT_EQ(rollups.Find(c), nullptr);

  // Committed changes stay; an aborted transaction drops what it changed.
  rollups.Restore(a, RollupSeries{});
  ASSERT_TRUE(rollups.Add(a, 1, 20, 1.0, &closed));
  rollups.Commit();
  rollups.Mark();
  rollups.Restore(c, RollupSeries{});
  ASSERT_TRUE(rollups.Add(c, 1, 21, 1.0, &closed));
  rollups.Abort();
  ASSERT_NE(rollups.Find(a), nullptr);
  EXPECT_EQ(rollups.Find(a)->points, 1);
  EXPECT_EQ(rollups.Find(c), nullptr);
  // After a commit, a change after a mark is still dropped by its rollback.
  const size_t m = rollups.Mark();
  ASSERT_TRUE(rollups.Add(a, 2, 22, 1.0, &closed));
  rollups.RollbackTo(m);
  EXPECT_EQ(rollups.Find(a), nullptr);
}

TEST(MetricRollupsTest, OutOfOrderPointsAndUnknownSeriesAreRefused) {
  MetricRollups rollups;
  const RollupSeriesKey a{1, "training", "loss"};
  std::vector<RollupBlock> closed;
  EXPECT_FALSE(rollups.Add(a, 1, 1, 0.0, &closed)) << "not held: the store rebuilds it first";
  rollups.Restore(a, RollupSeries{});
  ASSERT_TRUE(rollups.Add(a, 10, 5, 0.0, &closed));
  EXPECT_FALSE(rollups.Add(a, 9, 6, 0.0, &closed)) << "sorts before the last point";
  EXPECT_FALSE(rollups.Add(a, 10, 4, 0.0, &closed)) << "same batches, smaller id";
  EXPECT_TRUE(rollups.Add(a, 10, 7, 0.0, &closed)) << "same batches, larger id";
  EXPECT_EQ(rollups.Find(a)->points, 2);
  rollups.DropTrial(1);
  EXPECT_EQ(rollups.Find(a), nullptr);
}

TEST(MetricRollupsTest, HeldSeriesAreBounded) {
  MetricRollups rollups(3);
  for (int64_t t = 1; t <= 10; ++t) rollups.Restore({t, "training", "loss"}, RollupSeries{});
  EXPECT_EQ(rollups.series(), 3u);
  EXPECT_NE(rollups.Find({10, "training", "loss"}), nullptr) << "the newest is held";
}

TEST(MetricRollupsTest, AnUncoveredPointIsReported) {
  MetricRollups rollups;
  const std::vector<RollupBlock> blocks = Feed(std::vector<double>(200, 1.0), &rollups, {1, "g", "m"});
  std::vector<RollupRun> runs;
  EXPECT_FALSE(RollupRunsFor(blocks, 200, 64, {}, &runs)) << "points 192..199 are in no closed block";
  runs.clear();
  std::vector<std::tuple<int64_t, int64_t, double>> tail;
  for (int64_t i = 192; i < 200; ++i) tail.emplace_back(i, i + 1, 1.0);
  EXPECT_TRUE(RollupRunsFor(blocks, 200, 64, tail, &runs));
  EXPECT_EQ(runs.size(), 3u + 8u);
}

}  // namespace
}  // namespace det::master
