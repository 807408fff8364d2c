// checkpoint_policy and perform_initial_validation as pure rules.
#include "common/validation_policy.h"

#include <gtest/gtest.h>

namespace det {
namespace {

ExperimentConfig Config(CheckpointPolicy policy, bool smaller_is_better = true) {
  ExperimentConfig c;
  c.checkpoint_policy = policy;
  c.searcher.smaller_is_better = smaller_is_better;
  return c;
}

TEST(ValidationPolicyTest, AllCheckpointsAfterEveryValidation) {
  EXPECT_TRUE(CheckpointAfterValidation(Config(CheckpointPolicy::kAll), 5.0, 1.0));
  EXPECT_TRUE(CheckpointAfterValidation(Config(CheckpointPolicy::kAll), std::nullopt, 1.0));
}

TEST(ValidationPolicyTest, NoneNeverCheckpointsBecauseOfAValidation) {
  EXPECT_FALSE(CheckpointAfterValidation(Config(CheckpointPolicy::kNone), 0.1, 1.0));
  EXPECT_FALSE(CheckpointAfterValidation(Config(CheckpointPolicy::kNone), 0.1, std::nullopt));
}

TEST(ValidationPolicyTest, BestCheckpointsWhenTheExperimentsBestImproves) {
  const ExperimentConfig smaller = Config(CheckpointPolicy::kBest, true);
  EXPECT_TRUE(CheckpointAfterValidation(smaller, 0.5, std::nullopt));  // the first is the best so far
  EXPECT_TRUE(CheckpointAfterValidation(smaller, 0.4, 0.5));
  EXPECT_FALSE(CheckpointAfterValidation(smaller, 0.5, 0.5));  // a tie is no improvement
  EXPECT_FALSE(CheckpointAfterValidation(smaller, 0.6, 0.5));
  EXPECT_FALSE(CheckpointAfterValidation(smaller, std::nullopt, 0.5));
  const ExperimentConfig larger = Config(CheckpointPolicy::kBest, false);
  EXPECT_TRUE(CheckpointAfterValidation(larger, 0.9, 0.8));
  EXPECT_FALSE(CheckpointAfterValidation(larger, 0.7, 0.8));
}

TEST(ValidationPolicyTest, InitialValidationOnlyBeforeAnyTrainingOrValidation) {
  ExperimentConfig c;
  EXPECT_FALSE(InitialValidationDue(c, 0, false));
  c.perform_initial_validation = true;
  EXPECT_TRUE(InitialValidationDue(c, 0, false));
  EXPECT_FALSE(InitialValidationDue(c, 0, true));   // done (e.g. before a restart)
  EXPECT_FALSE(InitialValidationDue(c, 10, false));  // resumed past batch 0
}

}  // namespace
}  // namespace det
