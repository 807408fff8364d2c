// TPE on a 1-D objective with a fixed seed: after the random startup trials
// its proposals concentrate near the optimum; also nested/categorical spaces,
// the tpe searcher and ASHA with sampler: tpe, and snapshot/restore.
#include "master/search/tpe.h"

#include "common/experiment_config.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace det {
namespace master {
namespace {

using json = nlohmann::json;

double MeanDistance(const std::vector<double>& xs, size_t from, size_t to, double optimum) {
  double sum = 0;
  for (size_t i = from; i < to; ++i) sum += std::abs(xs[i] - optimum);
  return sum / static_cast<double>(to - from);
}

TEST(TpeSamplerTest, ProposalsConcentrateNearTheOptimumAfterStartup) {
  HyperparameterSpace space = {{"x", Hyperparameter::Double(0, 1)}};
  TpeOptions options;
  options.n_startup_trials = 10;
  TpeSampler tpe(space, options, /*smaller_is_better=*/true);
  std::mt19937_64 rng(42);
  const double optimum = 0.7;
  std::vector<double> xs;
  for (RequestId id = 1; id <= 60; ++id) {
    json hp = tpe.Propose(rng);
    tpe.Record(id, hp);
    double x = hp["x"].get<double>();
    xs.push_back(x);
    tpe.Observe(id, (x - optimum) * (x - optimum), 0);
  }
  double startup = MeanDistance(xs, 0, 10, optimum);
  double late = MeanDistance(xs, 40, 60, optimum);
  int near = 0;
  for (size_t i = 40; i < 60; ++i) near += std::abs(xs[i] - optimum) < 0.1 ? 1 : 0;
  EXPECT_LT(late, startup / 2) << "startup " << startup << " late " << late;
  EXPECT_LT(late, 0.1);
  EXPECT_GE(near, 12);  // random search: 20% of draws within 0.1
}

TEST(TpeSamplerTest, HandlesEveryHParamTypeAndRestores) {
  HyperparameterSpace space = {
      {"lr", Hyperparameter::Log(-5, -1)},
      {"width", Hyperparameter::Int(4, 128)},
      {"act", Hyperparameter::Categorical({"relu", "tanh", "gelu"})},
      {"opt", Hyperparameter::Object({{"wd", Hyperparameter::Double(0, 0.1)}, {"name", Hyperparameter::Const("adam")}})},
      {"global_batch_size", Hyperparameter::Const(32)},
  };
  TpeOptions options;
  options.n_startup_trials = 5;
  TpeSampler tpe(space, options, /*smaller_is_better=*/false);
  std::mt19937_64 rng(1);
  for (RequestId id = 1; id <= 30; ++id) {
    json hp = tpe.Propose(rng);
    ASSERT_TRUE(hp["lr"].get<double>() >= 1e-5 && hp["lr"].get<double>() <= 0.1) << hp;
    ASSERT_TRUE(hp["width"].is_number_integer()) << hp;
    ASSERT_TRUE(hp["width"].get<int64_t>() >= 4 && hp["width"].get<int64_t>() <= 128) << hp;
    ASSERT_EQ(hp["opt"]["name"], "adam");
    ASSERT_EQ(hp["global_batch_size"], 32);
    tpe.Record(id, hp);
    // Accuracy: best with gelu and a learning rate near 1e-3.
    double acc = (hp["act"] == "gelu" ? 0.5 : 0.0) - std::abs(std::log10(hp["lr"].get<double>()) + 3) * 0.1;
    tpe.Observe(id, id % 7 == 0 ? NAN : acc, 0);
  }
  EXPECT_EQ(tpe.observed(), 30);
  TpeSampler copy(space, options, false);
  ASSERT_TRUE(copy.Restore(tpe.Snapshot()).ok());
  std::mt19937_64 a(5), b(5);
  EXPECT_EQ(tpe.Propose(a), copy.Propose(b));
  EXPECT_FALSE(copy.Restore(json{{"x", 1}}).ok());
}

ExperimentConfig TpeConfig(SearcherName name) {
  ExperimentConfig config;
  config.hyperparameters = {{"x", Hyperparameter::Double(0, 1)}};
  config.searcher.name = name;
  config.searcher.metric = "loss";
  config.searcher.max_length = Length{Length::Unit::kBatches, 16};
  config.searcher.max_trials = 40;
  config.searcher.max_concurrent_trials = 2;
  config.searcher.options.tpe.n_startup_trials = 4;
  config.searcher.options.sampler = HParamSampler::kTpe;
  config.reproducibility.experiment_seed = 9;
  return config;
}

// Drives a searcher to its end with metric (x - 0.3)^2; returns the x of each trial in order.
std::vector<double> Drive(Searcher& s) {
  std::vector<double> xs;
  std::map<RequestId, double> x_of;
  std::vector<SearcherOp> pending = s.InitialOperations();
  for (int guard = 0; guard < 10000 && !pending.empty(); ++guard) {
    SearcherOp op = pending.front();
    pending.erase(pending.begin());
    std::vector<SearcherOp> more;
    if (auto* c = std::get_if<CreateTrialOp>(&op)) {
      x_of[c->request_id] = c->hparams["x"].get<double>();
      xs.push_back(x_of[c->request_id]);
      more = s.TrialCreated(c->request_id);
    } else if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
      double x = x_of[v->request_id];
      more = s.ValidationCompleted(v->request_id, (x - 0.3) * (x - 0.3), v->length);
    } else if (auto* c = std::get_if<CloseTrialOp>(&op)) {
      more = s.TrialClosed(c->request_id);
    }
    pending.insert(pending.end(), more.begin(), more.end());
  }
  EXPECT_TRUE(s.shutdown());
  return xs;
}

TEST(TpeSearchTest, TheTpeSearcherAndAshaWithTheTpeSamplerConverge) {
  for (SearcherName name : {SearcherName::kTpe, SearcherName::kAsyncHalving}) {
    ExperimentConfig config = TpeConfig(name);
    config.searcher.num_rungs = 3;
    absl::StatusOr<Searcher> s = Searcher::Create(config, 16);
    ASSERT_TRUE(s.ok()) << s.status();
    std::vector<double> xs = Drive(*s);
    ASSERT_EQ(xs.size(), 40u);
    EXPECT_LT(MeanDistance(xs, 30, 40, 0.3), MeanDistance(xs, 0, 10, 0.3)) << SearcherNameToString(name);
    absl::StatusOr<Searcher> again = Searcher::Restore(config, 16, s->Snapshot());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->Snapshot(), s->Snapshot());
  }
}

// Attack: a config asking for unbounded work under the master's lock is
// refused, naming the field.
TEST(TpeSearchTest, ConfigsAskingForUnboundedWorkAreRefused) {
  const std::string base =
      "name: x\nhyperparameters:\n  lr: {type: double, minval: 0, maxval: 1}\nsearcher:\n  metric: loss\n"
      "  max_length: {batches: 10}\n";
  auto config = ParseExperimentConfig(base + "  name: tpe\n  max_trials: 10\n  n_ei_candidates: 100000\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("searcher.n_ei_candidates"), std::string::npos) << config.status();
  config = ParseExperimentConfig(base + "  name: pbt\n  population_size: 5000\n  perturb_period: 5\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("searcher.population_size"), std::string::npos) << config.status();
  config = ParseExperimentConfig(base + "  name: pbt\n  population_size: 4\n  perturb_period: 5\n"
                                 "  perturb_factors: [0.5, -1]\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("searcher.perturb_factors"), std::string::npos) << config.status();
}

// Many results: a proposal models only the best-ranked kMaxTpeModelTrials.
TEST(TpeSamplerTest, ModelsAtMostTheBestRankedTrials) {
  HyperparameterSpace space = {{"x", Hyperparameter::Double(0, 1)}};
  TpeSampler tpe(space, TpeOptions{}, true);
  std::mt19937_64 rng(3);
  for (RequestId id = 1; id <= 3000; ++id) {
    json hp = tpe.Propose(rng);
    tpe.Record(id, hp);
    double x = hp["x"].get<double>();
    tpe.Observe(id, (x - 0.5) * (x - 0.5), 0);
  }
  EXPECT_EQ(tpe.observed(), 3000);
  json hp = tpe.Propose(rng);
  EXPECT_LT(std::abs(hp["x"].get<double>() - 0.5), 0.2);
}

}  // namespace
}  // namespace master
}  // namespace det
