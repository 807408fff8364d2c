// The facts computed from what trials report (checkpoint_facts.h).
#include "master/core/checkpoint_facts.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace det::master {
namespace {

CheckpointRow Ckpt(const std::string& uuid, int64_t batches, std::optional<double> metric,
                   const std::string& state = "COMPLETED") {
  CheckpointRow r;
  r.uuid = uuid;
  r.state = state;
  r.total_batches = batches;
  r.searcher_metric = metric;
  r.time_ms = batches;
  return r;
}

MetricRow Val(int64_t batches, std::map<std::string, double> metrics, bool archived = false) {
  MetricRow r;
  r.group = "validation";
  r.total_batches = batches;
  r.metrics = std::move(metrics);
  r.archived = archived;
  return r;
}

BatchLengths Lengths(int64_t global_batch_size, int64_t batches_per_epoch) {
  BatchLengths l;
  l.global_batch_size = global_batch_size;
  l.batches_per_epoch = batches_per_epoch;
  return l;
}

TEST(CheckpointFactsTest, SizeIsTheSumOfTheFiles) {
  EXPECT_EQ(CheckpointSizeBytes({}), 0);
  EXPECT_EQ(CheckpointSizeBytes({{"model.pt", 226000}, {"optimizer.pt", 1000}, {"meta.json", 24}}), 227024);
  EXPECT_EQ(CheckpointSizeBytes({{"a", -5}, {"b", 7}}), 7);
  EXPECT_EQ(CheckpointSizeBytes({{"a", std::numeric_limits<int64_t>::max()}, {"b", 7}}),
            std::numeric_limits<int64_t>::max());
}

TEST(CheckpointFactsTest, EpochsOnlyWhereAnEpochLengthIsKnown) {
  EXPECT_DOUBLE_EQ(EpochsAt(800, 10), 80);
  EXPECT_DOUBLE_EQ(EpochsAt(15, 10), 1.5);
  EXPECT_EQ(EpochsAt(800, 0), 0);  // no records_per_epoch: unknown
  EXPECT_EQ(EpochsAt(0, 10), 0);
}

TEST(CheckpointFactsTest, ARowGetsItsValidationsSearcherMetricAndEpochs) {
  CheckpointRow r = Ckpt("a", 200, std::nullopt);
  r.validation_metrics = {{"accuracy", 0.97}, {"loss", 0.1}};
  CompleteCheckpointRow("accuracy", Lengths(16, 100), &r);
  ASSERT_TRUE(r.searcher_metric.has_value());
  EXPECT_DOUBLE_EQ(*r.searcher_metric, 0.97);
  EXPECT_DOUBLE_EQ(r.total_epochs, 2);
  EXPECT_EQ(r.total_records, 3200);
  // A stored metric and epochs are kept; no validation: no metric.
  CheckpointRow kept = Ckpt("b", 200, 0.5);
  kept.total_epochs = 3;
  kept.validation_metrics = {{"accuracy", 0.97}};
  CompleteCheckpointRow("accuracy", Lengths(16, 100), &kept);
  EXPECT_DOUBLE_EQ(*kept.searcher_metric, 0.5);
  EXPECT_DOUBLE_EQ(kept.total_epochs, 3);
  CheckpointRow none = Ckpt("c", 200, std::nullopt);
  CompleteCheckpointRow("accuracy", Lengths(0, 0), &none);
  EXPECT_FALSE(none.searcher_metric.has_value());
  EXPECT_EQ(none.total_epochs, 0);
  EXPECT_EQ(none.total_records, 0);
}

TEST(CheckpointFactsTest, BestCheckpointHonoursSmallerIsBetterAndSkipsUnusable) {
  const double nan = std::nan("");
  std::vector<CheckpointRow> rows = {Ckpt("low", 100, 0.2),          Ckpt("high", 200, 0.9),
                                     Ckpt("nan", 300, nan),          Ckpt("none", 400, std::nullopt),
                                     Ckpt("deleted", 500, 5.0, "DELETED"), Ckpt("deleted-low", 600, -1, "DELETED")};
  ASSERT_NE(BestCheckpoint(rows, /*smaller_is_better=*/false), nullptr);
  EXPECT_EQ(BestCheckpoint(rows, false)->uuid, "high");
  EXPECT_EQ(BestCheckpoint(rows, true)->uuid, "low");
  EXPECT_EQ(BestCheckpoint({Ckpt("none", 1, std::nullopt), Ckpt("nan", 2, nan)}, true), nullptr);
  // Ties: the later batches.
  EXPECT_EQ(BestCheckpoint({Ckpt("early", 100, 0.5), Ckpt("late", 200, 0.5)}, true)->uuid, "late");
}

TEST(CheckpointFactsTest, BestValidationIsTheBestMetricAtItsEarliestBatch) {
  std::vector<MetricRow> v = {Val(100, {{"loss", 0.5}}), Val(200, {{"loss", 0.2}}), Val(300, {{"loss", 0.2}}),
                              Val(400, {{"loss", std::nan("")}}), Val(500, {{"other", 0.0}})};
  const MetricRow* best = BestValidation(v, "loss", /*smaller_is_better=*/true);
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(best->total_batches, 200);
  EXPECT_EQ(BestValidation(v, "loss", false)->total_batches, 100);
  EXPECT_EQ(BestValidation(v, "accuracy", true), nullptr);
}

TEST(CheckpointFactsTest, TrainedUnitsScaleTheBatchesToTheTarget) {
  EXPECT_DOUBLE_EQ(TrainedUnits(/*target_units=*/800, /*target_batches=*/800, /*total_batches=*/480), 480);
  EXPECT_DOUBLE_EQ(TrainedUnits(2, 40, 20), 1);      // epochs: 2 epochs of 20 batches each
  EXPECT_DOUBLE_EQ(TrainedUnits(800, 800, 1000), 800);  // at most the target
  EXPECT_EQ(TrainedUnits(0, 800, 480), 0);            // no pending target
  EXPECT_EQ(TrainedUnits(800, 0, 480), 0);
}

}  // namespace
}  // namespace det::master
