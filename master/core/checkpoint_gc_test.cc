// The checkpoint GC keep policy (checkpoint_gc.h): pure, so every case is a
// list of rows in and a set of uuids out.
#include "master/core/checkpoint_gc.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/experiment_config.h"

namespace det::master {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

CheckpointRow Ck(const std::string& uuid, int64_t trial, int64_t batches, std::optional<double> metric,
                 const std::string& state = "COMPLETED") {
  CheckpointRow r;
  r.uuid = uuid;
  r.trial_id = trial;
  r.total_batches = batches;
  r.searcher_metric = metric;
  r.state = state;
  r.time_ms = batches;
  return r;
}

::det::api::v1::CheckpointGcPolicy Policy(int experiment_best, int trial_best, int trial_latest) {
  ::det::api::v1::CheckpointGcPolicy p;
  p.set_save_experiment_best(experiment_best);
  p.set_save_trial_best(trial_best);
  p.set_save_trial_latest(trial_latest);
  return p;
}

TEST(CheckpointGcTest, KeepsEachTrialsBestAndLatestByDefault) {
  std::vector<CheckpointRow> rows = {Ck("a1", 1, 10, 0.5), Ck("a2", 1, 20, 0.3), Ck("a3", 1, 30, 0.4),
                                     Ck("b1", 2, 10, 0.2), Ck("b2", 2, 20, 0.6)};
  EXPECT_THAT(CheckpointsToKeep(rows, Policy(0, 1, 1), /*smaller_is_better=*/true),
              ElementsAre("a2", "a3", "b1", "b2"));
  EXPECT_THAT(CheckpointsToKeep(rows, Policy(0, 1, 1), /*smaller_is_better=*/false),
              ElementsAre("a1", "a3", "b2"));
}

TEST(CheckpointGcTest, ExperimentBestSpansTrials) {
  std::vector<CheckpointRow> rows = {Ck("a1", 1, 10, 0.5), Ck("a2", 1, 20, 0.3), Ck("b1", 2, 10, 0.2),
                                     Ck("b2", 2, 20, 0.6)};
  EXPECT_THAT(CheckpointsToKeep(rows, Policy(2, 0, 0), true), ElementsAre("a2", "b1"));
  EXPECT_THAT(CheckpointsToKeep(rows, Policy(0, 0, 0), true), IsEmpty());
}

TEST(CheckpointGcTest, UnscoredAndNanCheckpointsAreNeverBestButCanBeLatest) {
  std::vector<CheckpointRow> rows = {Ck("a1", 1, 10, std::nullopt), Ck("a2", 1, 20, std::nan("")),
                                     Ck("a3", 1, 30, 0.9)};
  EXPECT_THAT(CheckpointsToKeep(rows, Policy(1, 1, 0), true), ElementsAre("a3"));
  EXPECT_THAT(CheckpointsToKeep(rows, Policy(0, 0, 2), true), ElementsAre("a2", "a3"));
}

TEST(CheckpointGcTest, OnlyCompletedCheckpointsCount) {
  std::vector<CheckpointRow> rows = {Ck("a1", 1, 10, 0.1, "DELETED"), Ck("a2", 1, 20, 0.5)};
  EXPECT_THAT(CheckpointsToKeep(rows, Policy(1, 1, 1), true), ElementsAre("a2"));
}

TEST(CheckpointGcTest, TiesGoToTheLaterCheckpoint) {
  std::vector<CheckpointRow> rows = {Ck("a1", 1, 10, 0.5), Ck("a2", 1, 20, 0.5)};
  EXPECT_THAT(CheckpointsToKeep(rows, Policy(1, 0, 0), true), ElementsAre("a2"));
}

TEST(CheckpointGcTest, NegativeCountsKeepNothing) {
  std::vector<CheckpointRow> rows = {Ck("a1", 1, 10, 0.5)};
  EXPECT_THAT(CheckpointsToKeep(rows, Policy(-1, -5, -2), true), IsEmpty());
}

TEST(CheckpointGcTest, EffectivePolicyIsTheConfigOverriddenByThePatch) {
  ExperimentConfig config;
  auto p = EffectiveGcPolicy(config, "");
  EXPECT_EQ(p.save_experiment_best(), 0);
  EXPECT_EQ(p.save_trial_best(), 1);
  EXPECT_EQ(p.save_trial_latest(), 1);
  config.checkpoint_storage = CheckpointStorageConfig();
  config.checkpoint_storage->save_experiment_best = 3;
  p = EffectiveGcPolicy(config, R"({"save_trial_latest": 0})");
  EXPECT_EQ(p.save_experiment_best(), 3);
  EXPECT_EQ(p.save_trial_best(), 1);
  EXPECT_EQ(p.save_trial_latest(), 0);
  // A malformed override is no override.
  p = EffectiveGcPolicy(config, R"({"save_trial_best": "many"})");
  EXPECT_EQ(p.save_trial_best(), 1);
  EXPECT_EQ(EffectiveGcPolicy(config, "not json").save_experiment_best(), 3);
}

}  // namespace
}  // namespace det::master
