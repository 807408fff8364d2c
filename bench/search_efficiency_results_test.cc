// The results file behind bench/search_efficiency's figures: outcomes keep
// only improvements, survive a round trip through the file, never mix keys,
// and a damaged line is skipped, not fatal.
#include "bench/search_efficiency_results.h"

#include <cmath>
#include <fstream>
#include <optional>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace det::bench {
namespace {

TEST(SearchEfficiencyResultsTest, OutcomeKeepsImprovementsAndFindsTheFirstBatchAtATarget) {
  Outcome o;
  o.AddValidation(16, -0.50);  // a loss of 0.50, negated
  o.AddValidation(32, -0.70);  // worse: not kept
  o.AddValidation(64, -0.20);
  o.AddValidation(80, std::nan(""));  // a diverged trial: not kept
  ASSERT_EQ(o.points.size(), 2u);
  EXPECT_DOUBLE_EQ(o.best, -0.20);
  EXPECT_EQ(o.BatchesToReach(-0.60), 16);
  EXPECT_EQ(o.BatchesToReach(-0.25), 64);
  EXPECT_EQ(o.BatchesToReach(-0.10), -1);
}

TEST(SearchEfficiencyResultsTest, RoundTripsThroughTheFileAndSkipsADamagedLine) {
  det::testing::TempDir dir;
  const std::string path = dir / "results.jsonl";
  Outcome o;
  o.AddValidation(256, 0.81);
  o.AddValidation(1024, 0.87);
  o.total_batches = 2048;
  o.seconds = 12.5;
  o.stopped_early = true;
  {
    ResultsFile file(path);
    file.Add("fmnist trials=64", 7, "promotion", o);
  }
  { std::ofstream(path, std::ios::app) << "{\"key\": \"truncated\n"; }
  ResultsFile again(path);
  auto found = again.Find("fmnist trials=64", 7, "promotion");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->total_batches, 2048);
  EXPECT_TRUE(found->stopped_early);
  EXPECT_DOUBLE_EQ(found->best, 0.87);
  EXPECT_EQ(found->BatchesToReach(0.86), 1024);
  // Another budget, seed or searcher is another measurement.
  EXPECT_FALSE(again.Find("fmnist trials=16", 7, "promotion").has_value());
  EXPECT_FALSE(again.Find("fmnist trials=64", 8, "promotion").has_value());
  EXPECT_FALSE(again.Find("fmnist trials=64", 7, "random").has_value());
}

// Issue 50's figure: the median over seeds of seconds / batches; a seed not
// measured (or with no batch) is left out.
TEST(SearchEfficiencyResultsTest, WallPerBatchIsTheMedianOverTheMeasuredSeeds) {
  auto outcome = [](double seconds, int64_t batches, bool early) {
    Outcome o;
    o.seconds = seconds;
    o.total_batches = batches;
    o.stopped_early = early;
    return std::optional<Outcome>(o);
  };
  std::vector<std::optional<Outcome>> four = {outcome(4, 1000, false), outcome(10, 1000, true), std::nullopt,
                                              outcome(2, 1000, false), outcome(6, 1000, true), outcome(1, 0, false)};
  WallPerBatch w = MedianWallPerBatch(four);
  EXPECT_EQ(w.seeds, 4);
  EXPECT_EQ(w.stopped_early, 2);
  EXPECT_DOUBLE_EQ(w.median_ms, 5.0);  // 2, 4, 6, 10 ms: (4 + 6) / 2
  four.pop_back();
  four.pop_back();
  w = MedianWallPerBatch(four);
  EXPECT_EQ(w.seeds, 3);
  EXPECT_DOUBLE_EQ(w.median_ms, 4.0);
  EXPECT_EQ(MedianWallPerBatch({}).seeds, 0);
}

}  // namespace
}  // namespace det::bench
