// searcher.second_chance (adaptive_asha): a bracket after the first, before
// it starts a new trial, continues the first bracket's best near miss (a
// waiting trial of the better half of the rung below its own first rung that
// nothing promoted) as one of its own trials.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/search/asha.h"
#include "master/search/asha_test_util.h"
#include "master/search/preview.h"
#include "master/search/searcher.h"

namespace det {
namespace master {
namespace {

using json = nlohmann::json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace asha_test;  // NOLINT(build/namespaces): the shared test helpers

// adaptive_asha, standard mode, 3 rungs of 4/16/64 batches, 16 trials, one
// slot: bracket 0 (4/16/64) gets 12 trials, bracket 1 (16/64) 4.
ExperimentConfig SmallStandard(bool second_chance) {
  ExperimentConfig config = AshaConfig(SearcherName::kAdaptiveAsha, 16, 1, 4);
  config.searcher.max_rungs = 3;
  config.searcher.mode = AshaMode::kStandard;
  config.searcher.max_length = Length{Length::Unit::kBatches, 64};
  config.searcher.options.second_chance = second_chance;
  return config;
}

// Runs `s` with one slot to its end: each trial's validations report
// metric[id] (smaller is better), the same at every length. Returns the log.
Ops RunSequentially(Searcher& s, const std::map<RequestId, double>& metric) {
  Ops log;
  std::vector<SearcherOp> pending = s.InitialOperations();
  for (int steps = 0; !pending.empty(); ++steps) {
    EXPECT_LT(steps, 1000);
    if (steps >= 1000) break;
    SearcherOp op = pending.front();
    pending.erase(pending.begin());
    log.push_back(ToString(op));
    std::vector<SearcherOp> next;
    if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
      next = s.ValidationCompleted(v->request_id, metric.at(v->request_id), v->length);
    } else if (auto* c = std::get_if<CloseTrialOp>(&op)) {
      next = s.TrialClosed(c->request_id);
    }
    pending.insert(pending.end(), next.begin(), next.end());
  }
  return log;
}

const std::map<RequestId, double> kMetric = {{1, 0.5},   {2, 0.3},  {3, 0.8},  {4, 0.1},  {5, 0.6},  {6, 0.2},
                                             {7, 0.9},   {8, 0.4},  {9, 0.7},  {10, 0.25}, {11, 0.95}, {12, 0.45},
                                             {13, 0.55}, {14, 0.05}, {15, 0.65}, {16, 0.85}};

// Bracket 0's first rung ends ranked 4 6 10 2 8 12 | 1 5 9 3 11 7; ASHA
// promoted 4, 6 and 10 (floor(n/4) as results came); the better half's near
// misses are 2, 8 and 12. Bracket 1 continues them, best first, to 16
// batches from their checkpoints before it starts its one new trial, 13, and
// judges them with it: 2, the best of its four, goes on to 64. Without the
// option bracket 1 starts 13, 14, 15 and 16.
TEST(SecondChanceTest, LaterBracketContinuesTheBestNearMissesFirst) {
  absl::StatusOr<AshaLayout> layout = AshaLayoutFor(SmallStandard(true), 64);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->brackets.size(), 2u);
  ASSERT_EQ(layout->brackets[0].max_trials, 12);
  ASSERT_EQ(layout->brackets[1].max_trials, 4);
  ASSERT_EQ(layout->brackets[1].rung_lengths[0], 16);

  Searcher with = Make(SmallStandard(true), 64);
  Ops log = RunSequentially(with, kMetric);
  EXPECT_TRUE(with.shutdown());
  EXPECT_EQ(with.trials().size(), 13u);  // 12 + 1 new: 2, 8 and 12 were continued
  for (RequestId id : {2, 8, 12, 13}) EXPECT_EQ(with.TrialBracket(id), 1) << id;
  for (RequestId id : {1, 3, 4, 5, 6, 7, 9, 10, 11}) EXPECT_EQ(with.TrialBracket(id), 0) << id;
  auto at = [&](const std::string& op) { return std::find(log.begin(), log.end(), op) - log.begin(); };
  for (const std::string& op : {VA(2, 16), VA(8, 16), VA(12, 16), VA(13, 16), VA(2, 64)}) {
    ASSERT_THAT(log, Contains(op));
  }
  EXPECT_LT(at(VA(2, 16)), at(VA(8, 16)));
  EXPECT_LT(at(VA(8, 16)), at(VA(12, 16)));
  EXPECT_LT(at(VA(12, 16)), at(VA(13, 16)));
  EXPECT_LT(at(VA(13, 16)), at(VA(2, 64)));
  EXPECT_THAT(log, Not(Contains(VA(1, 16))));  // below the better half: closed
  EXPECT_THAT(log, Contains(Close(1)));
  EXPECT_EQ(with.ended_trials(), 13);

  Searcher without = Make(SmallStandard(false), 64);
  Ops plain = RunSequentially(without, kMetric);
  EXPECT_TRUE(without.shutdown());
  EXPECT_EQ(without.trials().size(), 16u);
  EXPECT_EQ(without.TrialBracket(2), 0);
  EXPECT_THAT(plain, Not(Contains(VA(2, 16))));
  for (RequestId id : {13, 14, 15, 16}) EXPECT_EQ(without.TrialBracket(id), 1) << id;
}

// With random completion order, errors and invalid hparams, every mode and
// order runs to its end within its concurrency; a snapshot taken mid-search
// (through text) restores and decides the same from there.
TEST(SecondChanceTest, RunsToShutdownAndRestoresMidSearch) {
  int continued = 0;
  for (BracketOrder order : {BracketOrder::kAggressiveFirst, BracketOrder::kParallel}) {
    for (AshaMode mode : {AshaMode::kStandard, AshaMode::kConservative}) {
      ExperimentConfig config = Adaptive(mode, 100, 5);
      config.searcher.options.bracket_order = order;
      config.searcher.options.second_chance = true;
      SCOPED_TRACE(ExperimentConfigToJson(config)["searcher"].dump());
      absl::StatusOr<AshaLayout> layout = AshaLayoutFor(config, 937);
      ASSERT_TRUE(layout.ok());
      Searcher a = Make(config, 937);
      std::map<RequestId, int64_t> created_in;  // each trial's bracket when first seen
      auto note = [&] {
        for (const auto& [id, state] : a.trials()) created_in.emplace(id, a.TrialBracket(id));
      };
      Driver d;
      d.errors = true;
      d.Absorb(a.InitialOperations());
      note();
      for (int i = 0; i < 150 && d.Step(a); ++i) note();
      absl::StatusOr<Searcher> b = Searcher::Restore(config, 937, json::parse(a.Snapshot().dump()));
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(b->Snapshot(), a.Snapshot());
      Driver da = d, db = d;
      da.log.clear();
      db.log.clear();
      for (int steps = 0; da.Step(a); ++steps) {
        ASSERT_LT(steps, 100000);
        note();
        if (layout->shared_concurrency > 0) {
          ASSERT_LE(static_cast<int64_t>(da.training.size()), layout->shared_concurrency);
        } else {
          std::vector<int64_t> in_flight(layout->brackets.size(), 0);
          for (RequestId id : da.training) ++in_flight[static_cast<size_t>(a.TrialBracket(id))];
          for (size_t k = 0; k < in_flight.size(); ++k) {
            ASSERT_LE(in_flight[k], layout->brackets[k].max_concurrent_trials) << "bracket " << k;
          }
        }
      }
      while (db.Step(*b)) {
      }
      EXPECT_EQ(da.log, db.log);
      EXPECT_TRUE(a.shutdown());
      EXPECT_EQ(a.ended_trials(), static_cast<int64_t>(a.trials().size()));
      EXPECT_DOUBLE_EQ(a.Progress(), 1);
      for (const auto& [id, first] : created_in) {
        const int64_t now = a.TrialBracket(id);
        if (now == first) continue;
        EXPECT_EQ(first, 0) << "trial " << id;  // only the first bracket's trials move
        ++continued;
      }
    }
  }
  EXPECT_GT(continued, 0);  // near misses were continued instead of new trials
}

// preview-search simulates it: a continued trial trains 48 batches where a
// new one would train 64, and is counted in the first bracket, where it
// started (its lengths are that bracket's rungs).
TEST(SecondChanceTest, PreviewCountsContinuedTrialsInTheFirstBracket) {
  ExperimentConfig with = Adaptive(AshaMode::kStandard, 100, 4);
  with.searcher.max_rungs = 3;
  with.searcher.max_length = Length{Length::Unit::kBatches, 256};
  ExperimentConfig without = with;
  with.searcher.options.second_chance = true;
  absl::StatusOr<SearchPreview> a = PreviewSearch(with, 256, 0);
  absl::StatusOr<SearchPreview> b = PreviewSearch(without, 256, 0);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->brackets.size(), 2u);
  EXPECT_LT(a->trials.size(), b->trials.size());
  EXPECT_LT(a->brackets[1].num_trials, b->brackets[1].num_trials);
  EXPECT_EQ(a->brackets[0].num_trials, b->brackets[0].num_trials);
  EXPECT_GT(a->brackets[0].rungs[1].num_trials, b->brackets[0].rungs[1].num_trials);  // trained on to 64
  EXPECT_LT(a->total_batches, b->total_batches);
}

// searcher.second_chance is a boolean, false unless given, echoed in the
// resolved config, and accepted with a warning where nothing reads it.
TEST(SecondChanceTest, IsParsedEchoedAndChecked) {
  const std::string head =
      "name: x\nhyperparameters:\n  lr: {type: double, minval: 0, maxval: 1}\nsearcher:\n  metric: loss\n"
      "  max_length: {batches: 256}\n  max_trials: 64\n  max_concurrent_trials: 2\n";
  auto config = ParseExperimentConfig(head + "  name: adaptive_asha\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->searcher.options.second_chance);
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["second_chance"], false);
  config = ParseExperimentConfig(head + "  name: adaptive_asha\n  second_chance: true\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->searcher.options.second_chance);
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["second_chance"], true);
  config = ParseExperimentConfig(head + "  name: adaptive_asha\n  second_chance: true\n  stop_once: true\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["second_chance"], false);  // nothing waits
  config = ParseExperimentConfig(head + "  name: adaptive_asha\n  second_chance: often\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("searcher.second_chance"));
  config = ParseExperimentConfig(head + "  name: random\n  second_chance: true\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->warnings.size(), 1u);
  EXPECT_THAT(config->warnings[0], HasSubstr("searcher.second_chance"));
}

}  // namespace
}  // namespace master
}  // namespace det
