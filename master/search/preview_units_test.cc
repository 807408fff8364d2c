// Searchers and previews in the config's own unit: epochs, records, a
// training metric (time_metric: tokens), with the batches shown only where
// every trial has the same batch size.
#include <string>

#include "common/batch_lengths.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/search/preview.h"
#include "master/search/searcher.h"

namespace det {
namespace master {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ExperimentConfig Parse(const std::string& yaml) {
  ParseOptions options;
  options.default_experiment_seed = 7;
  absl::StatusOr<ExperimentConfig> config = ParseExperimentConfig(yaml, "config.yaml", options);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *std::move(config) : ExperimentConfig();
}

// cifar10_pytorch's adaptive.yaml shape: 32 epochs of 50000 records.
std::string Cifar(const std::string& batch_size) {
  return "hyperparameters:\n  global_batch_size: " + batch_size +
         "\n  lr: {type: log, base: 10, minval: -4, maxval: -1}\n"
         "records_per_epoch: 50000\n"
         "searcher:\n  name: adaptive_asha\n  metric: loss\n  max_trials: 16\n  max_length:\n    epochs: 32\n";
}

TEST(PreviewUnitsTest, EpochsWithAConstantBatchSizeShowBatchesToo) {
  ExperimentConfig config = Parse(Cifar("128"));
  absl::StatusOr<SearchPreview> p = PreviewSearch(config, SearcherLengthOf(config.searcher).max, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->batches_constant);
  EXPECT_EQ(p->length.unit, "epochs");
  EXPECT_EQ(p->max_length_batches, 32 * 391);  // ceil(50000 / 128) = 391 per epoch
  const PreviewRung& first = p->brackets[0].rungs[0];
  EXPECT_EQ(first.batches_per_trial, first.length_per_trial * 391);
  const std::string text = FormatPreview(*p);
  EXPECT_THAT(text, HasSubstr("Searcher: adaptive_asha, max_length 32 epochs (12512 batches)\n"));
  EXPECT_THAT(text, HasSubstr("  Rung  Trials  Length per trial\n"));
  EXPECT_THAT(text, HasSubstr("2 epochs (782 batches)\n"));
  EXPECT_THAT(text, HasSubstr("32 epochs (12512 batches)\n"));
  for (const PreviewTrial& t : p->trials) EXPECT_EQ(t.total_batches, t.total_length * 391);
}

TEST(PreviewUnitsTest, SearchedBatchSizeShowsEpochsOnly) {
  ExperimentConfig config = Parse(Cifar("{type: int, minval: 16, maxval: 64}"));
  absl::StatusOr<SearchPreview> p = PreviewSearch(config, 32, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->batches_constant);
  EXPECT_EQ(p->max_length_batches, 0);
  const std::string text = FormatPreview(*p);
  EXPECT_THAT(text, HasSubstr("max_length 32 epochs (batches differ per trial: each converts with its own "
                              "global_batch_size)\n"));
  EXPECT_THAT(text, HasSubstr("     0      12  2 epochs\n"));
  EXPECT_THAT(text, Not(HasSubstr("batches)")));
}

TEST(PreviewUnitsTest, TimeMetricTokensRungsInTokens) {
  ExperimentConfig config = Parse(
      "hyperparameters:\n  lr: 0.1\n"
      "searcher:\n  name: async_halving\n  metric: loss\n  max_trials: 4\n  num_rungs: 2\n  divisor: 2\n"
      "  time_metric: tokens\n  max_time: 1000\n");
  absl::StatusOr<SearchPreview> p = PreviewSearch(config, SearcherLengthOf(config.searcher).max, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->brackets.size(), 1u);
  ASSERT_EQ(p->brackets[0].rungs.size(), 2u);
  EXPECT_EQ(p->brackets[0].rungs[0].length_per_trial, 500);
  EXPECT_EQ(p->brackets[0].rungs[1].length_per_trial, 1000);
  EXPECT_EQ(p->brackets[0].rungs[0].batches_per_trial, 0);
  const std::string text = FormatPreview(*p);
  EXPECT_THAT(text, HasSubstr("Searcher: async_halving, max_time 1000 tokens\n"));
  EXPECT_THAT(text, HasSubstr("     0       4  500 tokens\n"));
}

TEST(PreviewUnitsTest, SearcherOpsAreInTheConfigUnit) {
  ExperimentConfig config = Parse(Cifar("{type: int, minval: 16, maxval: 64}"));
  absl::StatusOr<Searcher> s = Searcher::Create(config, SearcherLengthOf(config.searcher).max);
  ASSERT_TRUE(s.ok()) << s.status();
  int64_t first_rung = 0;
  for (const SearcherOp& op : s->InitialOperations()) {
    if (const auto* v = std::get_if<ValidateAfterOp>(&op)) first_rung = first_rung == 0 ? v->length : first_rung;
  }
  EXPECT_EQ(first_rung, 2);  // 32 epochs / 4^2 in bracket 1 (3 rungs): epochs, not batches
}

}  // namespace
}  // namespace master
}  // namespace det
