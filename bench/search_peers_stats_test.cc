#include "bench/search_peers_stats.h"

#include <cmath>

#include "gtest/gtest.h"

namespace det {
namespace bench {
namespace {

std::vector<ValidationEvent> Curve() { return {{16, 0.5}, {32, 0.9}, {48, 0.95}, {5000, 0.97}, {9000, 0.99}}; }

TEST(SearchPeersStats, TimeToTargetIsTheFirstValidationAtOrAboveIt) {
  SeedOutcome o = Summarize(Curve(), 16384, 0.9, 16384);
  EXPECT_TRUE(o.reached);
  EXPECT_EQ(o.time_to_target, 32);
  EXPECT_EQ(o.total, 16384);
  o = Summarize(Curve(), 16384, 0.96, 16384);
  EXPECT_EQ(o.time_to_target, 5000);
}

TEST(SearchPeersStats, AMissCountsTheWholeBudget) {
  SeedOutcome o = Summarize(Curve(), 12000, 0.995, 16384);
  EXPECT_FALSE(o.reached);
  EXPECT_EQ(o.time_to_target, 16384);
  EXPECT_EQ(o.total, 12000);
  // A validation after the budget does not count.
  o = Summarize(Curve(), 12000, 0.99, 8000);
  EXPECT_FALSE(o.reached);
  EXPECT_EQ(o.time_to_target, 8000);
}

TEST(SearchPeersStats, BestAtQuarterHalfAndWholeBudget) {
  // Budget 16384: 4096, 8192, 16384.
  SeedOutcome o = Summarize(Curve(), 16384, 1.0, 16384);
  EXPECT_DOUBLE_EQ(o.best_at[0], 0.95);
  EXPECT_DOUBLE_EQ(o.best_at[1], 0.97);
  EXPECT_DOUBLE_EQ(o.best_at[2], 0.99);
  EXPECT_TRUE(std::isinf(BestUpTo(Curve(), 15)));
  EXPECT_DOUBLE_EQ(BestUpTo(Curve(), 16), 0.5);
}

TEST(SearchPeersStats, MedianAndMean) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({7}), 7);
  EXPECT_DOUBLE_EQ(Mean({1, 2, 6}), 3);
}

TEST(SearchPeersStats, BootstrapOfAConstantSampleIsThatValue) {
  Interval in = BootstrapInterval({5, 5, 5, 5}, MedianOf);
  EXPECT_DOUBLE_EQ(in.lo, 5);
  EXPECT_DOUBLE_EQ(in.hi, 5);
}

TEST(SearchPeersStats, BootstrapOfTwoValues) {
  // Resampled medians of {1, 2}: 1 (p 1/4), 1.5 (1/2), 2 (1/4); the 5th and
  // 95th percentiles of 2000 of them are 1 and 2.
  Interval in = BootstrapInterval({1, 2}, MedianOf);
  EXPECT_DOUBLE_EQ(in.lo, 1);
  EXPECT_DOUBLE_EQ(in.hi, 2);
  // The same for the mean (the same three values).
  in = BootstrapInterval({1, 2}, MeanOf);
  EXPECT_DOUBLE_EQ(in.lo, 1);
  EXPECT_DOUBLE_EQ(in.hi, 2);
}

TEST(SearchPeersStats, BootstrapIsDeterministicAndInsideTheRange) {
  std::vector<double> x = {100, 400, 250, 16384, 900, 1200, 300, 5000};
  Interval a = BootstrapInterval(x, MedianOf);
  Interval b = BootstrapInterval(x, MedianOf);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  EXPECT_LE(100, a.lo);
  EXPECT_LE(a.lo, Median(x));
  EXPECT_LE(Median(x), a.hi);
  EXPECT_LE(a.hi, 16384);
  EXPECT_LT(a.lo, a.hi);
}

TEST(SearchPeersStats, BootstrapDifferenceOfTwoSets) {
  // Constant sets: the difference is exact.
  Interval d = BootstrapDifference({5, 5, 5}, {8, 8}, MedianOf);
  EXPECT_DOUBLE_EQ(d.lo, 3);
  EXPECT_DOUBLE_EQ(d.hi, 3);
  // Two draws of the same values: 0 inside, symmetric spread.
  std::vector<double> x = {100, 400, 250, 900, 1200, 300, 5000, 700};
  d = BootstrapDifference(x, x, MedianOf);
  EXPECT_LT(d.lo, 0);
  EXPECT_GT(d.hi, 0);
  // Far-apart sets: 0 outside.
  std::vector<double> far = x;
  for (double& v : far) v += 10000;
  d = BootstrapDifference(x, far, MedianOf);
  EXPECT_GT(d.lo, 0);
}

}  // namespace
}  // namespace bench
}  // namespace det
