#include "common/batch_lengths.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::HasSubstr;

// A config with global_batch_size 32, searcher.max_length `max_length` (one
// "unit: value" line) and the top-level lines `extra` (records_per_epoch, the
// periods).
ExperimentConfig Config(const std::string& max_length, const std::string& extra = "") {
  const std::string yaml = absl::StrCat(
      "hyperparameters:\n  global_batch_size: 32\n"
      "searcher:\n  name: single\n  metric: loss\n  max_length:\n    ",
      max_length, "\n", extra);
  ParseOptions options;
  options.default_experiment_seed = 1;
  absl::StatusOr<ExperimentConfig> config = ParseExperimentConfig(yaml, "config.yaml", options);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *std::move(config) : ExperimentConfig();
}

TEST(BatchLengthsTest, ConfigInBatchesNeedsNoEpochLength) {
  auto lengths = ResolveBatchLengths(Config("batches: 100"), "; hint");
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(lengths->global_batch_size, 32);
  EXPECT_EQ(lengths->batches_per_epoch, 0);
  EXPECT_EQ(lengths->max_length, 100);
  EXPECT_EQ(lengths->validation_period, 0);
  EXPECT_EQ(lengths->checkpoint_period, 0);
}

TEST(BatchLengthsTest, ConfigConvertsEveryUnitWithRecordsPerEpoch) {
  auto lengths = ResolveBatchLengths(Config("epochs: 2",
                                            "records_per_epoch: 100\n"
                                            "min_validation_period:\n  records: 65\n"
                                            "min_checkpoint_period:\n  epochs: 1\n"));
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(lengths->batches_per_epoch, 4);  // ceil(100 / 32)
  EXPECT_EQ(lengths->max_length, 8);
  EXPECT_EQ(lengths->validation_period, 3);  // ceil(65 / 32)
  EXPECT_EQ(lengths->checkpoint_period, 4);
}

TEST(BatchLengthsTest, ConfigMaxLengthInEpochsWithoutEpochLengthIsInvalidWithTheHint) {
  auto lengths = ResolveBatchLengths(Config("epochs: 2"), "; set records_per_epoch to use epochs with the master");
  ASSERT_FALSE(lengths.ok());
  EXPECT_EQ(lengths.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lengths.status().message(),
            "cannot convert 'searcher.max_length' (2 epochs) to batches: the epoch length is unknown; set "
            "records_per_epoch in the config or use a training data loader with a known length; set "
            "records_per_epoch to use epochs with the master");
}

TEST(BatchLengthsTest, ConfigPeriodInEpochsWithoutEpochLengthKeepsItsCode) {
  auto lengths = ResolveBatchLengths(Config("batches: 10", "min_validation_period:\n  epochs: 1\n"), "; hint");
  ASSERT_FALSE(lengths.ok());
  EXPECT_EQ(lengths.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lengths.status().message(), HasSubstr("'min_validation_period' (1 epoch)"));
  EXPECT_THAT(lengths.status().message(), ::testing::Not(HasSubstr("; hint")));
}

TEST(BatchLengthsTest, ConfigWithoutGlobalBatchSizeIsInvalid) {
  // The parser requires global_batch_size; a config built by hand may lack it.
  ExperimentConfig config;
  config.searcher.max_length = Length{Length::Unit::kBatches, 5};
  auto lengths = ResolveBatchLengths(config);
  ASSERT_FALSE(lengths.ok());
  EXPECT_EQ(lengths.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(lengths.status().message(), "hyperparameters lack global_batch_size");
}

TEST(BatchLengthsTest, FallbackEpochLengthIsUsedWithoutRecordsPerEpoch) {
  TrainingLengths in;
  in.max_length = Length{Length::Unit::kEpochs, 3};
  in.min_checkpoint_period = Length{Length::Unit::kEpochs, 1};
  auto lengths = ResolveBatchLengths(in, 16, 7);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(lengths->global_batch_size, 16);
  EXPECT_EQ(lengths->batches_per_epoch, 7);
  EXPECT_EQ(lengths->max_length, 21);
  EXPECT_EQ(lengths->checkpoint_period, 7);
  EXPECT_EQ(lengths->validation_period, 0);

  in.records_per_epoch = 100;  // wins over the fallback
  lengths = ResolveBatchLengths(in, 16, 7);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(lengths->batches_per_epoch, 7);  // ceil(100 / 16) happens to be 7 too
  lengths = ResolveBatchLengths(in, 50, 7);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(lengths->batches_per_epoch, 2);
  EXPECT_EQ(lengths->max_length, 6);
}

TEST(BatchLengthsTest, LowerLevelKeepsToBatchesErrors) {
  TrainingLengths in;
  in.max_length = Length{Length::Unit::kEpochs, 3};
  auto lengths = ResolveBatchLengths(in, 16, 0);
  ASSERT_FALSE(lengths.ok());
  EXPECT_EQ(lengths.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lengths.status().message(),
            "cannot convert 'searcher.max_length' (3 epochs) to batches: the epoch length is unknown; set "
            "records_per_epoch in the config or use a training data loader with a known length");

  in.max_length = Length{Length::Unit::kBatches, 10};
  in.min_validation_period = Length{Length::Unit::kRecords, 10};
  lengths = ResolveBatchLengths(in, 0, 5);
  ASSERT_FALSE(lengths.ok());
  EXPECT_EQ(lengths.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(lengths.status().message(), HasSubstr("'min_validation_period' (10 records)"));

  in.min_validation_period.reset();
  in.min_checkpoint_period = Length{Length::Unit::kBatches, -1};
  lengths = ResolveBatchLengths(in, 4, 5);
  ASSERT_FALSE(lengths.ok());
  EXPECT_EQ(lengths.status().message(), "field 'min_checkpoint_period' must not be negative, got -1 batches");
}

TEST(BatchLengthsTest, TrainingLengthsOfCopiesTheConfigFields) {
  ExperimentConfig config = Config("records: 640", "records_per_epoch: 320\nmin_validation_period:\n  batches: 4\n");
  TrainingLengths lengths = TrainingLengthsOf(config);
  EXPECT_EQ(lengths.max_length, (Length{Length::Unit::kRecords, 640}));
  ASSERT_TRUE(lengths.min_validation_period.has_value());
  EXPECT_EQ(*lengths.min_validation_period, (Length{Length::Unit::kBatches, 4}));
  EXPECT_FALSE(lengths.min_checkpoint_period.has_value());
  EXPECT_EQ(lengths.records_per_epoch, 320);
}

}  // namespace
}  // namespace det
