#include "common/searcher_fields.h"

#include <filesystem>
#include <string>

#include "common/experiment_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// A config with `searcher_lines` (indented two spaces) under `searcher:`.
absl::StatusOr<ExperimentConfig> Parse(const std::string& searcher_lines) {
  ParseOptions o;
  o.default_experiment_seed = 7;
  return ParseExperimentConfig(
      "hyperparameters:\n  global_batch_size: 32\n  lr:\n    type: log\n    minval: -4\n    maxval: 0\n"
      "    base: 10\n    count: 3\nsearcher:\n  metric: loss\n  max_length:\n    batches: 64\n" +
          searcher_lines,
      "config.yaml", o);
}

TEST(SearcherFieldsTest, EachSearcherReadsItsOwnFieldsWithoutAWarning) {
  for (const char* lines : {
           "  name: adaptive_asha\n  max_trials: 8\n  divisor: 3\n  max_rungs: 2\n  mode: standard\n"
           "  stop_once: false\n  sampler: tpe\n  tpe_brackets: all\n  gamma: 0.2\n  n_startup_trials: 3\n"
           "  n_ei_candidates: 8\n  random_fraction: 0.5\n  rung_metric: best\n  bracket_order: parallel\n",
           "  name: async_halving\n  max_trials: 8\n  num_rungs: 3\n  divisor: 3\n  sampler: random\n",
           "  name: pbt\n  population_size: 4\n  perturb_period: 8\n  truncate_fraction: 0.5\n"
           "  resample_probability: 0.1\n  perturb_factors: [0.5, 2]\n  burn_in_period: 16\n",
           "  name: tpe\n  max_trials: 8\n  gamma: 0.2\n  n_startup_trials: 3\n  random_fraction: 0.25\n",
           "  name: random\n  max_trials: 8\n  max_concurrent_trials: 2\n",
       }) {
    auto c = Parse(lines);
    ASSERT_TRUE(c.ok()) << c.status() << "\n" << lines;
    EXPECT_THAT(c->warnings, IsEmpty()) << lines;
  }
}

// The attack: options of other searchers, given to `random`, were parsed and
// silently ignored; a user believed they applied.
TEST(SearcherFieldsTest, AFieldItsSearcherDoesNotReadIsNamedWithTheSearchersThatDo) {
  auto c = Parse("  name: random\n  max_trials: 8\n  divisor: 3\n  population_size: 4\n  tpe_brackets: all\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->warnings,
              ElementsAre("field 'searcher.divisor' is accepted but not used by searcher 'random' (it is read by "
                          "adaptive_asha and async_halving)",
                          "field 'searcher.population_size' is accepted but not used by searcher 'random' (it is "
                          "read by pbt)",
                          "field 'searcher.tpe_brackets' is accepted but not used by searcher 'random' (it is read "
                          "by adaptive_asha with sampler: tpe)"));
  // A field's own checks still hold where it is not read.
  auto bad = Parse("  name: random\n  max_trials: 8\n  divisor: 1\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("searcher.divisor"));
  // So do a pbt field's (a negative burn-in names the field).
  auto negative = Parse("  name: pbt\n  population_size: 4\n  perturb_period: 8\n  burn_in_period: -8\n");
  ASSERT_FALSE(negative.ok());
  EXPECT_THAT(std::string(negative.status().message()), HasSubstr("searcher.burn_in_period"));
}

TEST(SearcherFieldsTest, TpeOptionsUnderAshaNeedSamplerTpe) {
  auto c = Parse("  name: adaptive_asha\n  max_trials: 8\n  gamma: 0.2\n  tpe_brackets: all\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->warnings, ElementsAre(HasSubstr("'searcher.gamma' is accepted but not used by searcher "
                                                 "'adaptive_asha' with sampler: random (it is read by tpe, and "
                                                 "adaptive_asha or async_halving with sampler: tpe)"),
                                       HasSubstr("'searcher.tpe_brackets'")));
  // The sampler is named only where it decides.
  auto p = Parse("  name: adaptive_asha\n  max_trials: 8\n  population_size: 4\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->warnings, ElementsAre("field 'searcher.population_size' is accepted but not used by searcher "
                                       "'adaptive_asha' (it is read by pbt)"));
  // async_halving reads the TPE options with sampler: tpe, not adaptive_asha's
  // layout fields.
  auto a = Parse("  name: async_halving\n  max_trials: 8\n  sampler: tpe\n  gamma: 0.2\n  max_rungs: 3\n"
                 "  tpe_brackets: all\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(a->warnings, ElementsAre(HasSubstr("'searcher.max_rungs' is accepted but not used by searcher "
                                                 "'async_halving' (it is read by adaptive_asha)"),
                                       HasSubstr("'searcher.tpe_brackets'")));
  // Written as null: absent.
  auto n = Parse("  name: random\n  max_trials: 8\n  divisor: null\n");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_THAT(n->warnings, IsEmpty());
}

// The master stores ExperimentConfigToJson's echo: it must hold only fields
// its searcher reads, or every re-parse of it would warn.
TEST(SearcherFieldsTest, TheEchoOfEveryConfigParsesBackWithoutAWarning) {
  for (const char* lines : {
           "  name: adaptive_asha\n  max_trials: 8\n  sampler: tpe\n",
           "  name: adaptive_asha\n  max_trials: 8\n",
           "  name: async_halving\n  max_trials: 8\n  sampler: tpe\n",
           "  name: pbt\n  population_size: 4\n  perturb_period: 8\n",
           "  name: tpe\n  max_trials: 8\n",
           "  name: random\n  max_trials: 8\n  sampler: tpe\n  gamma: 0.3\n",
           "  name: grid\n",
           "  name: single\n",
       }) {
    auto c = Parse(lines);
    ASSERT_TRUE(c.ok()) << c.status() << "\n" << lines;
    auto back = ParseExperimentConfigJson(ExperimentConfigToJson(*c), "echo");
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << lines;
    EXPECT_THAT(back->warnings, IsEmpty()) << lines;
  }
}

// pbt without `explore` over a space with widths: children that change a
// width fail to restore their parent's checkpoint. The config says so at
// create (and preview) instead of half the population erroring later.
TEST(SearcherFieldsTest, PbtWithoutExploreNamesTheHparamsThatMaySetShapes) {
  const std::string space =
      "hyperparameters:\n  global_batch_size: 32\n  lr:\n    type: log\n    minval: -4\n    maxval: 0\n"
      "    base: 10\n  dropout:\n    type: double\n    minval: 0\n    maxval: 0.5\n"
      "  width:\n    type: int\n    minval: 8\n    maxval: 64\n"
      "  act:\n    type: categorical\n    vals: [relu, tanh]\n"
      "  fixed:\n    depth: 2\n    norm: batch\n"  // consts only: not searched, not named
      "  block:\n    units:\n      type: int\n      minval: 2\n      maxval: 4\n    norm: batch\n";
  auto parse = [&](const std::string& extra) {
    return ParseExperimentConfig(space + "searcher:\n  name: pbt\n  metric: loss\n  max_length:\n    batches: 64\n"
                                         "  population_size: 4\n  perturb_period: 16\n" + extra,
                                 "config.yaml", ParseOptions());
  };
  auto c = parse("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->warnings,
              ElementsAre("searcher.explore is not set, so a pbt child may change every search hyperparameter, "
                          "including 'act' (categorical), 'block' (object), 'width' (int); a child whose change alters a model's "
                          "shape fails to restore its parent's checkpoint. List the hyperparameters a child may "
                          "change in searcher.explore (for example [dropout, lr])"));
  // With the list, or without widths in the space, nothing to say.
  auto listed = parse("  explore: [lr, dropout]\n");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(listed->warnings, IsEmpty());
  auto smooth = Parse("  name: pbt\n  population_size: 4\n  perturb_period: 16\n");
  ASSERT_TRUE(smooth.ok()) << smooth.status();
  EXPECT_THAT(smooth->warnings, IsEmpty());
  // Other searchers over the same space: no such warning.
  auto random = ParseExperimentConfig(space + "searcher:\n  name: random\n  metric: loss\n  max_trials: 2\n"
                                              "  max_length:\n    batches: 64\n",
                                      "config.yaml", ParseOptions());
  ASSERT_TRUE(random.ok()) << random.status();
  EXPECT_THAT(random->warnings, IsEmpty());
}

// The shipped examples set only fields their searchers read.
TEST(SearcherFieldsTest, NoExampleSetsAFieldItsSearcherIgnores) {
  int examples = 0;
  for (const auto& dir : std::filesystem::directory_iterator(std::filesystem::path(DET_SOURCE_DIR) / "examples")) {
    if (!dir.is_directory()) continue;
    for (const auto& file : std::filesystem::directory_iterator(dir.path())) {
      if (file.path().extension() != ".yaml") continue;
      auto c = LoadExperimentConfigFile(file.path().string());
      ASSERT_TRUE(c.ok()) << c.status();
      for (const std::string& w : c->warnings) EXPECT_THAT(w, Not(HasSubstr("by searcher"))) << file.path();
      ++examples;
    }
  }
  EXPECT_GE(examples, 8);
}

}  // namespace
}  // namespace det
