// Replays scripted validations through the pbt searcher: exploit (the bottom
// fraction closed, children of the top ones created with parent set),
// explore (perturbed or resampled hparams), lineage, the last round, exits
// and snapshot/restore.
#include "master/search/pbt.h"

#include "master/search/preview.h"

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace master {
namespace {

using json = nlohmann::json;

ExperimentConfig PbtConfig(int64_t population, int64_t period, std::vector<double> factors, double resample) {
  ExperimentConfig config;
  config.hyperparameters = {
      {"global_batch_size", Hyperparameter::Const(32)},
      {"lr", Hyperparameter::Log(-4, -1)},
      {"width", Hyperparameter::Int(8, 64)},
      {"act", Hyperparameter::Categorical({"relu", "tanh", "gelu"})},
      {"opt", Hyperparameter::Object({{"momentum", Hyperparameter::Double(0.5, 0.99)}})},
  };
  config.searcher.name = SearcherName::kPbt;
  config.searcher.metric = "loss";
  config.searcher.max_length = Length{Length::Unit::kBatches, 30};
  config.searcher.options.pbt.population_size = population;
  config.searcher.options.pbt.perturb_period = period;
  config.searcher.options.pbt.perturb_factors = std::move(factors);
  config.searcher.options.pbt.resample_probability = resample;
  // Ray's 0: the scripted rounds below exploit from the first one on (the
  // default, half of max_length, has its own test).
  config.searcher.options.pbt.burn_in_period = 0;
  config.reproducibility.experiment_seed = 7;
  return config;
}

struct Ops {
  std::vector<CreateTrialOp> creates;
  std::vector<ValidateAfterOp> validates;
  std::vector<RequestId> closes;
  bool shutdown = false;
};

Ops Split(const std::vector<SearcherOp>& ops) {
  Ops out;
  for (const SearcherOp& op : ops) {
    if (auto* c = std::get_if<CreateTrialOp>(&op)) out.creates.push_back(*c);
    if (auto* v = std::get_if<ValidateAfterOp>(&op)) out.validates.push_back(*v);
    if (auto* c = std::get_if<CloseTrialOp>(&op)) out.closes.push_back(c->request_id);
    if (std::holds_alternative<ShutdownOp>(op)) out.shutdown = true;
  }
  return out;
}

TEST(PbtSearchTest, ExploitsTheBottomAndExploresTheTop) {
  ExperimentConfig config = PbtConfig(4, 10, {2.0}, 0.0);
  absl::StatusOr<Searcher> s = Searcher::Create(config, 30);
  ASSERT_TRUE(s.ok()) << s.status();
  Ops init = Split(s->InitialOperations());
  ASSERT_EQ(init.creates.size(), 4u);
  for (const CreateTrialOp& c : init.creates) EXPECT_EQ(c.parent, 0);
  ASSERT_EQ(init.validates.size(), 4u);
  for (const ValidateAfterOp& v : init.validates) EXPECT_EQ(v.length, 10);
  std::map<RequestId, json> hp;
  for (const CreateTrialOp& c : init.creates) hp[c.request_id] = c.hparams;

  // Round 1: nothing happens until the whole population validated.
  EXPECT_TRUE(s->ValidationCompleted(1, 0.4, 10).empty());
  EXPECT_TRUE(s->ValidationCompleted(2, 0.1, 10).empty());
  EXPECT_TRUE(s->ValidationCompleted(3, 0.3, 5).empty());  // short: ignored
  EXPECT_TRUE(s->ValidationCompleted(3, 0.3, 10).empty());
  Ops r1 = Split(s->ValidationCompleted(4, 0.2, 10));
  // k = floor(4 * 0.25) = 1: trial 1 (worst) is closed, trial 2 (best) begets trial 5.
  EXPECT_EQ(r1.closes, std::vector<RequestId>({1}));
  ASSERT_EQ(r1.creates.size(), 1u);
  const CreateTrialOp& child = r1.creates[0];
  EXPECT_EQ(child.request_id, 5);
  EXPECT_EQ(child.parent, 2);
  // Explore: every number doubled (clamped), the categorical moved to a neighbour, the const kept.
  const json& p = hp[2];
  EXPECT_DOUBLE_EQ(child.hparams["lr"].get<double>(), std::min(0.1, 2 * p["lr"].get<double>()));
  EXPECT_EQ(child.hparams["width"].get<int64_t>(), std::min<int64_t>(64, 2 * p["width"].get<int64_t>()));
  EXPECT_DOUBLE_EQ(child.hparams["opt"]["momentum"].get<double>(),
                   std::min(0.99, 2 * p["opt"]["momentum"].get<double>()));
  EXPECT_EQ(child.hparams["global_batch_size"], 32);
  std::vector<std::string> acts = {"relu", "tanh", "gelu"};
  int parent_act = std::find(acts.begin(), acts.end(), p["act"]) - acts.begin();
  int child_act = std::find(acts.begin(), acts.end(), child.hparams["act"]) - acts.begin();
  EXPECT_EQ(std::abs(parent_act - child_act) <= 1, true);
  // The child first (it copies its parent's state at this round's end),
  // then the survivors in rank order: all to round 2's length.
  std::vector<std::pair<RequestId, int64_t>> v;
  for (const ValidateAfterOp& x : r1.validates) v.emplace_back(x.request_id, x.length);
  EXPECT_EQ(v, (std::vector<std::pair<RequestId, int64_t>>{{5, 20}, {2, 20}, {4, 20}, {3, 20}}));
  EXPECT_TRUE(s->TrialClosed(1).empty());

  // Lineage survives a snapshot; the restored searcher makes the same decisions.
  absl::StatusOr<Searcher> restored = Searcher::Restore(config, 30, s->Snapshot());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->Snapshot(), s->Snapshot());
  for (Searcher* x : {&*s, &*restored}) {
    x->ValidationCompleted(2, 0.09, 20);
    x->ValidationCompleted(4, 0.3, 20);
    x->ValidationCompleted(3, 0.2, 20);
  }
  std::vector<SearcherOp> a = s->ValidationCompleted(5, 0.05, 20);
  std::vector<SearcherOp> b = restored->ValidationCompleted(5, 0.05, 20);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(ToString(a[i]), ToString(b[i]));
  // Round 2: 4 (worst) closed; 5 (a child, now best) begets 6.
  Ops r2 = Split(a);
  EXPECT_EQ(r2.closes, std::vector<RequestId>({4}));
  ASSERT_EQ(r2.creates.size(), 1u);
  EXPECT_EQ(r2.creates[0].parent, 5);
  EXPECT_EQ(s->Snapshot()["method"]["members"][5]["parent"], 5);  // trial 6's parent

  // The last round (30 = max_length): everyone is closed, then Shutdown.
  s->TrialClosed(4);
  for (RequestId id : {5, 2, 3}) EXPECT_TRUE(s->ValidationCompleted(id, 0.1, 30).empty());
  Ops last = Split(s->ValidationCompleted(6, 0.1, 30));
  EXPECT_EQ(last.closes.size(), 4u);
  EXPECT_TRUE(last.creates.empty());
  for (RequestId id : {5, 2, 3}) EXPECT_FALSE(Split(s->TrialClosed(id)).shutdown);
  EXPECT_TRUE(Split(s->TrialClosed(6)).shutdown);
  EXPECT_DOUBLE_EQ(s->Progress(), 1.0);
}

TEST(PbtSearchTest, ResampleProbabilityOneDrawsFromTheSpace) {
  ExperimentConfig config = PbtConfig(2, 10, {1.0}, 1.0);
  std::mt19937_64 rng(3);
  json parent = {{"global_batch_size", 32}, {"lr", 0.001}, {"width", 8}, {"act", "relu"}, {"opt", {{"momentum", 0.5}}}};
  int changed = 0;
  for (int i = 0; i < 20; ++i) {
    json child = ExploreHParams(config.hyperparameters, config.searcher.options.pbt, parent, rng);
    EXPECT_EQ(child["global_batch_size"], 32);
    EXPECT_GE(child["lr"].get<double>(), 1e-4);
    EXPECT_LE(child["lr"].get<double>(), 0.1);
    if (child["lr"] != parent["lr"]) ++changed;
  }
  EXPECT_EQ(changed, 20);
  // Factor 1 and no resampling: numbers unchanged.
  config = PbtConfig(2, 10, {1.0}, 0.0);
  json same = ExploreHParams(config.hyperparameters, config.searcher.options.pbt, parent, rng);
  EXPECT_EQ(same["lr"], parent["lr"]);
  EXPECT_EQ(same["width"], parent["width"]);
}

// explore: the listed hparams change, the others (a width: the model's shape,
// which the child's restored weights fix) are the parent's; the draws of the
// listed ones are those of exploring everything.
TEST(PbtSearchTest, ExploreKeepsTheUnlistedHparamsOfTheParent) {
  ExperimentConfig all = PbtConfig(2, 10, {0.5, 2.0}, 0.5);
  ExperimentConfig some = all;
  some.searcher.options.pbt.explore = {"lr", "opt"};
  json parent = {{"global_batch_size", 32}, {"lr", 0.001}, {"width", 8}, {"act", "relu"}, {"opt", {{"momentum", 0.5}}}};
  std::mt19937_64 rng_all(11), rng_some(11);
  int lr_changed = 0;
  for (int i = 0; i < 20; ++i) {
    json a = ExploreHParams(all.hyperparameters, all.searcher.options.pbt, parent, rng_all);
    json c = ExploreHParams(some.hyperparameters, some.searcher.options.pbt, parent, rng_some);
    EXPECT_EQ(c["width"], 8);
    EXPECT_EQ(c["act"], "relu");
    EXPECT_EQ(c["global_batch_size"], 32);
    EXPECT_EQ(c["lr"], a["lr"]);
    EXPECT_EQ(c["opt"], a["opt"]);
    if (c["lr"] != parent["lr"]) ++lr_changed;
  }
  EXPECT_EQ(lr_changed, 20);
  // Children created by the search carry it too.
  absl::StatusOr<Searcher> s = Searcher::Create(some, 30);
  ASSERT_TRUE(s.ok()) << s.status();
  Ops first = Split(s->InitialOperations());
  ASSERT_EQ(first.creates.size(), 2u);
  s->ValidationCompleted(1, 0.5, 10);
  Ops round = Split(s->ValidationCompleted(2, 0.4, 10));
  ASSERT_EQ(round.creates.size(), 1u);
  EXPECT_EQ(round.creates[0].parent, 2);
  EXPECT_EQ(round.creates[0].hparams["width"], first.creates[1].hparams["width"]);
  EXPECT_EQ(round.creates[0].hparams["act"], first.creates[1].hparams["act"]);
  EXPECT_NE(round.creates[0].hparams["lr"], first.creates[1].hparams["lr"]);
}

// The attack: explore naming what the space does not have, a const or an
// object of consts.
TEST(PbtSearchTest, ExploreNamesOnlySearchHparamsOfTheSpace) {
  ExperimentConfig config = PbtConfig(2, 10, {1.2}, 0.0);
  config.searcher.options.pbt.explore = {"lr", "widht"};
  absl::StatusOr<Searcher> s = Searcher::Create(config, 30);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::HasSubstr("searcher.explore[1]: 'widht' is not a hyperparameter"));
  config.searcher.options.pbt.explore = {"global_batch_size"};
  s = Searcher::Create(config, 30);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("searcher.explore[0]: 'global_batch_size' is a const"));
  // An object of consts only explores nothing either; one holding a search hparam does.
  config.hyperparameters["fixed"] = Hyperparameter::Object({{"a", Hyperparameter::Const(1)}});
  config.searcher.options.pbt.explore = {"opt", "fixed"};
  s = Searcher::Create(config, 30);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::HasSubstr("searcher.explore[1]: 'fixed' is a nested hyperparameter of consts only"));
  config.searcher.options.pbt.explore = {"opt"};
  EXPECT_TRUE(Searcher::Create(config, 30).ok());
  // The parser bounds the list and refuses a name given twice, naming the field.
  std::string yaml = "hyperparameters:\n  global_batch_size: 8\n  lr:\n    type: double\n    minval: 0.1\n"
                     "    maxval: 1\nsearcher:\n  name: pbt\n  metric: loss\n  max_length:\n    batches: 8\n"
                     "  population_size: 2\n  perturb_period: 4\n  explore: [lr, lr]\n";
  auto twice = ParseExperimentConfig(yaml, "config.yaml");
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()), ::testing::HasSubstr("'searcher.explore' names 'lr' twice"));
  std::string many = "[";
  for (size_t i = 0; i <= kMaxExplore; ++i) many += (i ? ",x" : "x") + std::to_string(i);
  auto bounded = ParseExperimentConfig(absl::StrReplaceAll(yaml, {{"[lr, lr]", many + "]"}}), "config.yaml");
  ASSERT_FALSE(bounded.ok());
  EXPECT_THAT(std::string(bounded.status().message()), ::testing::HasSubstr("searcher.explore"));
  // Echoed, and parsed back the same.
  auto one = ParseExperimentConfig(absl::StrReplaceAll(yaml, {{"[lr, lr]", "[lr]"}}), "config.yaml");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(ExperimentConfigToJson(*one)["searcher"]["explore"], json::array({"lr"}));
  auto back = ParseExperimentConfigJson(ExperimentConfigToJson(*one), "echo");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->searcher.options.pbt.explore, std::vector<std::string>({"lr"}));
}

TEST(PbtSearchTest, AnExitedTrialLeavesThePopulation) {
  ExperimentConfig config = PbtConfig(3, 10, {1.2}, 0.0);
  absl::StatusOr<Searcher> s = Searcher::Create(config, 30);
  ASSERT_TRUE(s.ok());
  s->InitialOperations();
  s->ValidationCompleted(1, 0.5, 10);
  s->ValidationCompleted(2, 0.4, 10);
  // Trial 3 errors: the round ends with the two left (k = 1: 1 closed, 2 begets 4).
  Ops r = Split(s->TrialExitedEarly(3, ExitedReason::kErrored));
  EXPECT_EQ(r.closes, std::vector<RequestId>({1}));
  ASSERT_EQ(r.creates.size(), 1u);
  EXPECT_EQ(r.creates[0].parent, 2);
}

TEST(PbtSearchTest, BurnInReplacesNoMemberBeforeItsLength) {
  ExperimentConfig config = PbtConfig(4, 10, {2.0}, 0.0);
  config.searcher.options.pbt.burn_in_period = 20;
  absl::StatusOr<Searcher> s = Searcher::Create(config, 40);
  ASSERT_TRUE(s.ok()) << s.status();
  s->InitialOperations();
  // Round 1 ends at 10 < 20: trial 1 is the worst, yet nobody is closed or
  // copied; all four go on to 20.
  for (RequestId id : {2, 3, 4}) EXPECT_TRUE(s->ValidationCompleted(id, 0.1 * id, 10).empty());
  Ops r1 = Split(s->ValidationCompleted(1, 0.9, 10));
  EXPECT_TRUE(r1.closes.empty());
  EXPECT_TRUE(r1.creates.empty());
  std::vector<std::pair<RequestId, int64_t>> v;
  for (const ValidateAfterOp& x : r1.validates) v.emplace_back(x.request_id, x.length);
  EXPECT_EQ(v, (std::vector<std::pair<RequestId, int64_t>>{{2, 20}, {3, 20}, {4, 20}, {1, 20}}));
  // Round 2 ends at 20, not before burn_in_period: trial 1, the worst again,
  // is exploited and the best (now 4) begets trial 5.
  for (RequestId id : {1, 2, 3}) EXPECT_TRUE(s->ValidationCompleted(id, 0.5 - 0.1 * id, 20).empty());
  Ops r2 = Split(s->ValidationCompleted(4, 0.01, 20));
  EXPECT_EQ(r2.closes, std::vector<RequestId>({1}));
  ASSERT_EQ(r2.creates.size(), 1u);
  EXPECT_EQ(r2.creates[0].parent, 4);
  // A restored searcher keeps the option (it comes from the config).
  absl::StatusOr<Searcher> restored = Searcher::Restore(config, 40, s->Snapshot());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->Snapshot(), s->Snapshot());
}

// Unset, burn_in_period is half of max_length: the parsed config echoes it,
// and the search behaves as with that value given.
TEST(PbtSearchTest, BurnInDefaultsToHalfOfMaxLength) {
  absl::StatusOr<ExperimentConfig> parsed = ParseExperimentConfig(
      "hyperparameters:\n  lr:\n    type: log\n    minval: -4\n    maxval: -1\nsearcher:\n  name: pbt\n"
      "  metric: loss\n  max_length:\n    batches: 40\n  population_size: 4\n  perturb_period: 10\n",
      "c.yaml");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->searcher.options.pbt.burn_in_period.has_value());
  EXPECT_EQ(ExperimentConfigToJson(*parsed)["searcher"]["burn_in_period"], 20);

  ExperimentConfig config = PbtConfig(4, 10, {2.0}, 0.0);
  config.searcher.options.pbt.burn_in_period.reset();
  // max_length 30: burn-in 15, so the boundary at 10 makes no child and the
  // one at 20 makes one (with 0 given, each boundary makes one).
  absl::StatusOr<SearchPreview> p = PreviewSearch(config, 30, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->trials.size(), 5u);
  config.searcher.options.pbt.burn_in_period = 0;
  p = PreviewSearch(config, 30, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->trials.size(), 6u);

  // max_length 40: the default (20) decides as burn_in_period: 20 given.
  auto decisions = [&](std::optional<int64_t> burn_in) {
    ExperimentConfig c = PbtConfig(4, 10, {2.0}, 0.0);
    c.searcher.options.pbt.burn_in_period = burn_in;
    absl::StatusOr<Searcher> s = Searcher::Create(c, 40);
    EXPECT_TRUE(s.ok()) << s.status();
    std::vector<size_t> ops = {s->InitialOperations().size()};
    for (int64_t length : {10, 20}) {
      for (RequestId id : {1, 2, 3, 4}) ops.push_back(s->ValidationCompleted(id, 0.1 * id, length).size());
    }
    return std::make_pair(ops, s->Snapshot());
  };
  EXPECT_EQ(decisions(std::nullopt), decisions(20));
  EXPECT_NE(decisions(std::nullopt), decisions(0));
  // max_length 1: burn-in 0, still a valid search.
  config.searcher.options.pbt.burn_in_period.reset();
  EXPECT_TRUE(Searcher::Create(config, 1).ok());
}

TEST(PbtSearchTest, BurnInMustEndBeforeMaxLength) {
  ExperimentConfig config = PbtConfig(4, 10, {1.2}, 0.0);
  config.searcher.options.pbt.burn_in_period = 30;
  absl::StatusOr<Searcher> s = Searcher::Create(config, 30);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), ::testing::HasSubstr("searcher.burn_in_period"));
  config.searcher.options.pbt.burn_in_period = -1;
  EXPECT_FALSE(Searcher::Create(config, 30).ok());
  config.searcher.options.pbt.burn_in_period = 29;
  EXPECT_TRUE(Searcher::Create(config, 30).ok());
}

TEST(PbtSearchTest, RejectsABadConfig) {
  ExperimentConfig config = PbtConfig(1, 10, {1.2}, 0.0);
  EXPECT_FALSE(Searcher::Create(config, 30).ok());
  config = PbtConfig(4, 0, {1.2}, 0.0);
  EXPECT_FALSE(Searcher::Create(config, 30).ok());
  absl::StatusOr<Searcher> s = Searcher::Create(PbtConfig(4, 10, {1.2}, 0.0), 30);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(Searcher::Restore(PbtConfig(4, 10, {1.2}, 0.0), 30, json{{"rng", "x"}}).ok());
}

TEST(PbtSearchTest, PreviewShowsGenerationsAndCountsOnlyWhatEachTrialTrains) {
  ExperimentConfig config = PbtConfig(4, 10, {0.8, 1.2}, 0.25);
  absl::StatusOr<SearchPreview> p = PreviewSearch(config, 30, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  // 4 trials and one child per generation boundary (10, 20).
  EXPECT_EQ(p->trials.size(), 6u);
  ASSERT_EQ(p->brackets.size(), 1u);
  ASSERT_EQ(p->brackets[0].rungs.size(), 3u);
  for (const PreviewRung& r : p->brackets[0].rungs) EXPECT_EQ(r.num_trials, 4) << r.length_per_trial;
  // 4 trials train 10 per generation: a child starts at its parent's length.
  EXPECT_EQ(p->total_length, 120);
  int children = 0;
  for (const PreviewTrial& t : p->trials) children += t.parent != 0 ? 1 : 0;
  EXPECT_EQ(children, 2);

  // With burn_in_period 20 the boundary at 10 makes no child.
  config.searcher.options.pbt.burn_in_period = 20;
  p = PreviewSearch(config, 30, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->trials.size(), 5u);
  EXPECT_EQ(p->total_length, 120);
}

}  // namespace
}  // namespace master
}  // namespace det
