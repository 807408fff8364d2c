// The master's per-trial lengths: each trial converts the searcher's unit
// with its own global_batch_size; time metrics; snapshots of older masters.
#include "master/core/trial_lengths.h"

#include <string>

#include "gtest/gtest.h"

namespace det::master {
namespace {

ExperimentRuntime Experiment(const std::string& yaml) {
  ParseOptions options;
  options.default_experiment_seed = 1;
  absl::StatusOr<ExperimentConfig> config = ParseExperimentConfig(yaml, "config.yaml", options);
  EXPECT_TRUE(config.ok()) << config.status();
  ExperimentRuntime exp;
  if (config.ok()) exp.config = *std::move(config);
  exp.searcher_length = ExperimentSearcherLength(exp.config, nullptr);
  return exp;
}

TrialRuntime Trial(const ExperimentRuntime& exp, int64_t gbs) {
  TrialRuntime t;
  t.row.id = gbs;
  t.row.hparams_json = nlohmann::json{{"global_batch_size", gbs}}.dump();
  EXPECT_TRUE(InitTrialLengths(exp, t).ok());
  return t;
}

constexpr char kEpochs[] =
    "hyperparameters:\n  global_batch_size: {type: int, minval: 16, maxval: 64}\n"
    "records_per_epoch: 320\nmin_checkpoint_period:\n  records: 100\n"
    "searcher:\n  name: single\n  metric: loss\n  max_length:\n    epochs: 4\n";

TEST(TrialLengthsTest, EachTrialConvertsWithItsOwnBatchSize) {
  ExperimentRuntime exp = Experiment(kEpochs);
  EXPECT_EQ(exp.searcher_length.unit, "epochs");
  EXPECT_EQ(exp.searcher_length.max, 4);
  TrialRuntime small = Trial(exp, 16);
  TrialRuntime big = Trial(exp, 64);
  ASSERT_TRUE(SetSearcherTarget(exp, small, 2).ok());
  ASSERT_TRUE(SetSearcherTarget(exp, big, 2).ok());
  EXPECT_EQ(small.searcher_target, 2);   // the searcher's unit
  EXPECT_EQ(small.target_batches, 40);   // 2 x ceil(320 / 16)
  EXPECT_EQ(big.target_batches, 10);     // 2 x ceil(320 / 64)
  EXPECT_EQ(small.lengths.checkpoint_period, 7);  // ceil(100 / 16)
  EXPECT_EQ(big.lengths.checkpoint_period, 2);
  EXPECT_FALSE(SearcherTargetReached(exp, small, 39));
  EXPECT_TRUE(SearcherTargetReached(exp, small, 40));
  EXPECT_TRUE(SearcherTargetReached(exp, big, 10));
}

TEST(TrialLengthsTest, TrainingMetricIsReachedByItsReportedValue) {
  ExperimentRuntime exp = Experiment(
      "hyperparameters:\n  lr: 0.1\nsearcher:\n  name: single\n  metric: loss\n  time_metric: tokens\n"
      "  max_time: 1000\n");
  EXPECT_TRUE(exp.searcher_length.is_metric());
  TrialRuntime t;
  t.row.hparams_json = "{\"lr\": 0.1}";
  ASSERT_TRUE(InitTrialLengths(exp, t).ok());
  ASSERT_TRUE(SetSearcherTarget(exp, t, 1000).ok());
  EXPECT_EQ(t.target_batches, 0);
  EXPECT_FALSE(SearcherTargetReached(exp, t, 1000000));  // batches do not count
  t.time_metric_value = 999.5;
  EXPECT_FALSE(SearcherTargetReached(exp, t, 10));
  t.time_metric_value = 1000;
  EXPECT_TRUE(SearcherTargetReached(exp, t, 10));
}

TEST(TrialLengthsTest, OlderSnapshotsInEpochsKeepTheirBatchPlan) {
  ExperimentRuntime exp = Experiment(
      "hyperparameters:\n  global_batch_size: 32\nrecords_per_epoch: 320\n"
      "searcher:\n  name: single\n  metric: loss\n  max_length:\n    epochs: 4\n");
  nlohmann::json old = {{"rng", "1"}, {"method", nlohmann::json::object()}};  // no "length_unit"
  SearcherLength legacy = ExperimentSearcherLength(exp.config, old);
  EXPECT_EQ(legacy.unit, "batches");
  EXPECT_EQ(legacy.max, 40);  // 4 x ceil(320 / 32), as the older master planned
  nlohmann::json current = old;
  current[kSnapshotLengthUnit] = "epochs";
  EXPECT_EQ(ExperimentSearcherLength(exp.config, current).unit, "epochs");
  EXPECT_EQ(ExperimentSearcherLength(exp.config, current).max, 4);
}

}  // namespace
}  // namespace det::master
