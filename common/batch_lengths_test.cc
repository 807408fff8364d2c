#include "common/batch_lengths.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
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

TEST(BatchLengthsTest, ConfigMaxLengthInEpochsWithoutEpochLengthIsCountedByTheRuntime) {
  const ExperimentConfig config = Config("epochs: 2");
  // The master cannot convert it: the trial runtime counts epochs of its
  // training data loader, as it counts a training metric.
  auto lengths = ResolveBatchLengths(config, "; hint");
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(lengths->max_length, 0);
  const SearcherLength cluster = ClusterSearcherLength(config);
  EXPECT_TRUE(cluster.is_metric());
  EXPECT_EQ(cluster.unit, "epochs");
  EXPECT_EQ(cluster.max, 2);
  EXPECT_EQ(FormatSearcherLength(cluster, 1), "1 epoch");
  EXPECT_FALSE(SearcherLengthOf(config.searcher).is_metric());  // local mode converts with its loader
  // With records_per_epoch the master converts it.
  EXPECT_FALSE(ClusterSearcherLength(Config("epochs: 2", "records_per_epoch: 64\n")).is_metric());
}

TEST(BatchLengthsTest, ConfigPeriodInEpochsWithoutEpochLengthKeepsItsCode) {
  auto lengths = ResolveBatchLengths(Config("batches: 10", "min_validation_period:\n  epochs: 1\n"), "; hint");
  ASSERT_FALSE(lengths.ok());
  EXPECT_EQ(lengths.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(lengths.status().message(), HasSubstr("'min_validation_period' (1 epoch)"));
  EXPECT_THAT(lengths.status().message(), ::testing::Not(HasSubstr("; hint")));
}

TEST(BatchLengthsTest, ConfigWithoutGlobalBatchSizeIsFineInBatches) {
  // global_batch_size is optional (Determined 0.38): batches need none.
  ExperimentConfig config;
  config.searcher.max_length = Length{Length::Unit::kBatches, 5};
  auto lengths = ResolveBatchLengths(config);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(lengths->global_batch_size, 0);
  EXPECT_EQ(lengths->max_length, 5);
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

// A config from its YAML (fixed seed); fails the test when it does not parse.
ExperimentConfig ParseOk(const std::string& yaml) {
  ParseOptions options;
  options.default_experiment_seed = 1;
  absl::StatusOr<ExperimentConfig> config = ParseExperimentConfig(yaml, "config.yaml", options);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *std::move(config) : ExperimentConfig();
}

std::string ParseError(const std::string& yaml) {
  absl::StatusOr<ExperimentConfig> config = ParseExperimentConfig(yaml, "config.yaml", ParseOptions());
  EXPECT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

// Determined 0.38's form: no max_length and no global_batch_size.
constexpr char k038[] =
    "hyperparameters:\n  lr: 0.1\n"
    "searcher:\n  name: single\n  metric: loss\n  time_metric: batches\n  max_time: 100\n";

TEST(SearcherLengthTest, TimeMetricAndMaxTimeReplaceMaxLength) {
  ExperimentConfig config = ParseOk(k038);
  SearcherLength length = SearcherLengthOf(config.searcher);
  EXPECT_EQ(length.unit, "batches");
  EXPECT_EQ(length.length_unit, Length::Unit::kBatches);
  EXPECT_EQ(length.max, 100);
  EXPECT_FALSE(length.is_metric());
  // No global_batch_size is needed for batches.
  auto lengths = ResolveBatchLengths(config);
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(lengths->global_batch_size, 0);
  EXPECT_EQ(lengths->max_length, 100);
  // The form survives ExperimentConfigToJson.
  auto again = ParseExperimentConfigJson(ExperimentConfigToJson(config), "json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->searcher.time_metric, "batches");
  EXPECT_EQ(again->searcher.max_time, 100);
}

TEST(SearcherLengthTest, TrainingMetricIsItsOwnUnit) {
  ExperimentConfig config = ParseOk(
      absl::StrCat(absl::StrReplaceAll(k038, {{"time_metric: batches", "time_metric: tokens"}}),
                   "min_validation_period:\n  batches: 20\n"));
  SearcherLength length = SearcherLengthOf(config.searcher);
  EXPECT_TRUE(length.is_metric());
  EXPECT_EQ(length.unit, "tokens");
  EXPECT_EQ(FormatSearcherLength(length, 1000), "1000 tokens");
  auto lengths = TrialBatchLengths(config, nlohmann::json::object());
  ASSERT_TRUE(lengths.ok()) << lengths.status();
  EXPECT_EQ(lengths->max_length, 0);  // no batch count: the runtime stops on the metric
  EXPECT_EQ(lengths->validation_period, 20);
  EXPECT_EQ(SearcherUnitsToBatches(length, 10, *lengths).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Determined 0.38's single/random/grid configs may give no length (the
// training code decides): one epoch of the trial's training data. Adaptive
// searchers need one.
TEST(SearcherLengthTest, NoLengthIsOneEpochOfDataForNonAdaptiveSearchers) {
  for (const char* name : {"single", "random", "grid"}) {
    SCOPED_TRACE(name);
    const std::string max_trials = name == std::string("random") ? "  max_trials: 2\n" : "";
    ExperimentConfig config = ParseOk(
        absl::StrCat("hyperparameters:\n  lr: 0.1\nsearcher:\n  name: ", name, "\n  metric: loss\n", max_trials));
    EXPECT_TRUE(config.searcher.length_from_data);
    const SearcherLength length = ClusterSearcherLength(config);
    EXPECT_TRUE(length.is_metric());
    EXPECT_EQ(length.unit, "epochs");
    EXPECT_EQ(length.max, 1);
    auto lengths = TrialBatchLengths(config, nlohmann::json::object());
    ASSERT_TRUE(lengths.ok()) << lengths.status();
    EXPECT_EQ(lengths->max_length, 0);
  }
  EXPECT_THAT(ParseError("hyperparameters:\n  lr: 0.1\nsearcher:\n  name: adaptive_asha\n  metric: loss\n"
                         "  max_trials: 4\n"),
              HasSubstr("missing required field 'searcher.max_length' (or 'searcher.time_metric' + "
                        "'searcher.max_time'): adaptive searchers need a training length"));
}

TEST(SearcherLengthTest, ExactlyOneFormAndAValidMetricName) {
  const std::string both = absl::StrCat(k038, "  max_length:\n    batches: 10\n");
  EXPECT_EQ(ParseError(both),
            "config.yaml:8: fields 'searcher.max_length' and 'searcher.time_metric' + 'searcher.max_time' both give "
            "the training length; use exactly one form");
  EXPECT_EQ(ParseError(absl::StrReplaceAll(k038, {{"  max_time: 100\n", ""}})),
            "config.yaml:6: field 'searcher.time_metric' requires field 'searcher.max_time'");
  EXPECT_THAT(ParseError(absl::StrReplaceAll(k038, {{"max_time: 100", "max_time: 0"}})),
              HasSubstr("field 'searcher.max_time' must be >= 1, got 0"));
  EXPECT_THAT(ParseError(absl::StrReplaceAll(k038, {{"time_metric: batches", "time_metric: \"a b\""}})),
              HasSubstr("field 'searcher.time_metric' must be batches, records, epochs or a training metric name"));
  EXPECT_THAT(ParseError(absl::StrReplaceAll(k038, {{"time_metric: batches", "time_metric: " + std::string(200, 'x')}})),
              HasSubstr("at most 128 characters"));
}

TEST(SearcherLengthTest, EachTrialConvertsWithItsOwnBatchSize) {
  ExperimentConfig config = ParseOk(
      "hyperparameters:\n  global_batch_size: {type: int, minval: 16, maxval: 64}\n"
      "searcher:\n  name: single\n  metric: loss\n  max_length:\n    epochs: 2\n"
      "records_per_epoch: 640\nmin_validation_period:\n  records: 100\n");
  SearcherLength length = SearcherLengthOf(config.searcher);
  EXPECT_EQ(FormatSearcherLength(length, 1), "1 epoch");
  for (int64_t gbs : {16, 20, 50, 64}) {
    auto lengths = TrialBatchLengths(config, nlohmann::json{{"global_batch_size", gbs}});
    ASSERT_TRUE(lengths.ok()) << lengths.status();
    const int64_t per_epoch = (640 + gbs - 1) / gbs;
    EXPECT_EQ(lengths->batches_per_epoch, per_epoch) << gbs;
    EXPECT_EQ(lengths->max_length, 2 * per_epoch) << gbs;
    EXPECT_EQ(lengths->validation_period, (100 + gbs - 1) / gbs) << gbs;
    EXPECT_EQ(*SearcherUnitsToBatches(length, 1, *lengths), per_epoch) << gbs;
  }
}

TEST(SearcherLengthTest, RecordsAndEpochsNeedTheBatchSizeNamedInTheError) {
  ExperimentConfig config = ParseOk(absl::StrReplaceAll(k038, {{"time_metric: batches", "time_metric: records"}}));
  auto lengths = TrialBatchLengths(config, nlohmann::json{{"lr", 0.1}});
  ASSERT_FALSE(lengths.ok());
  EXPECT_EQ(lengths.status().message(),
            "cannot convert 'searcher.max_time' (100 records) to batches: hyperparameters.global_batch_size is not "
            "set");
  auto with = TrialBatchLengths(config, nlohmann::json{{"global_batch_size", 32}});
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->max_length, 4);  // ceil(100 / 32)
}

}  // namespace
}  // namespace det
