// TPE on a 1-D objective with a fixed seed: after the random startup trials
// its proposals concentrate near the optimum; also nested/categorical spaces,
// the tpe searcher and ASHA with sampler: tpe, and snapshot/restore.
#include "master/search/tpe.h"

#include "common/experiment_config.h"
#include "master/search/asha.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <set>
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
    json hp = tpe.Propose(rng).hparams;
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

// random_fraction (BOHB's rho): that share of the proposals after the
// startup trials is drawn at random, so the search keeps covering the space.
TEST(TpeSamplerTest, RandomFractionKeepsCoveringTheSpace) {
  HyperparameterSpace space = {{"x", Hyperparameter::Double(0, 1)}};
  auto far_share = [&](double random_fraction) {
    TpeOptions options;
    options.random_fraction = random_fraction;
    TpeSampler tpe(space, options, /*smaller_is_better=*/true);
    std::mt19937_64 rng(42);
    int far = 0;
    for (RequestId id = 1; id <= 210; ++id) {
      json hp = tpe.Propose(rng).hparams;
      tpe.Record(id, hp);
      double x = hp["x"].get<double>();
      if (id > 10 && std::abs(x - 0.7) > 0.3) ++far;
      tpe.Observe(id, (x - 0.7) * (x - 0.7), 0);
    }
    return far / 200.0;
  };
  // At random, 40% of the draws are farther than 0.3 from the optimum.
  EXPECT_LT(far_share(0), 0.05);
  EXPECT_GT(far_share(0.5), 0.12);
  EXPECT_LT(far_share(0.5), 0.3);
  EXPECT_GT(far_share(1), 0.3);
}

// multivariate: true (Optuna's): l(x) and g(x) are joint, so the proposals
// follow an interaction no product of one estimator per hparam can express.
// Scripted results: trials near (0.1, 0.1) and (0.9, 0.9) are good, near
// (0.1, 0.9) and (0.9, 0.1) bad. Each coordinate on its own is as often good
// as bad, so the univariate l(x) and g(x) have the same marginals and half
// its proposals land in a bad corner; the joint l(x) proposes the good ones.
TEST(TpeSamplerTest, MultivariateFollowsAnInteractionTheUnivariateModelCannot) {
  HyperparameterSpace space = {{"x", Hyperparameter::Double(0, 1)}, {"y", Hyperparameter::Double(0, 1)}};
  auto good_proposals = [&](bool multivariate) {
    TpeOptions options;
    options.multivariate = multivariate;
    TpeSampler tpe(space, options, /*smaller_is_better=*/true);
    std::mt19937_64 jitter(3);
    std::uniform_real_distribution<double> near(-0.03, 0.03);
    const double corners[4][3] = {{0.1, 0.1, 0}, {0.9, 0.9, 0}, {0.1, 0.9, 1}, {0.9, 0.1, 1}};  // x, y, loss
    for (RequestId id = 1; id <= 40; ++id) {
      const double* c = corners[id % 4];
      tpe.Record(id, json{{"x", c[0] + near(jitter)}, {"y", c[1] + near(jitter)}});
      tpe.Observe(id, c[2] + near(jitter), 0);
    }
    std::mt19937_64 rng(5);
    int good = 0;
    for (int i = 0; i < 40; ++i) {
      json hp = tpe.Propose(rng).hparams;
      const double x = hp["x"].get<double>(), y = hp["y"].get<double>();
      good += std::abs(x - y) < 0.3 && std::abs(x - 0.5) > 0.2 ? 1 : 0;
    }
    return good;
  };
  const int univariate = good_proposals(false), multivariate = good_proposals(true);
  EXPECT_GE(multivariate, 34) << "of 40";
  EXPECT_LE(univariate, 28) << "of 40";
}

TEST(TpeSamplerTest, HandlesEveryHParamTypeAndRestores) {
  for (bool multivariate : {false, true}) {
    SCOPED_TRACE(multivariate ? "multivariate" : "univariate");
    HyperparameterSpace space = {
        {"lr", Hyperparameter::Log(-5, -1)},
        {"width", Hyperparameter::Int(4, 128)},
        {"act", Hyperparameter::Categorical({"relu", "tanh", "gelu"})},
        {"opt",
         Hyperparameter::Object({{"wd", Hyperparameter::Double(0, 0.1)}, {"name", Hyperparameter::Const("adam")}})},
        {"global_batch_size", Hyperparameter::Const(32)},
    };
    TpeOptions options;
    options.n_startup_trials = 5;
    options.multivariate = multivariate;
    TpeSampler tpe(space, options, /*smaller_is_better=*/false);
    std::mt19937_64 rng(1);
    for (RequestId id = 1; id <= 30; ++id) {
      json hp = tpe.Propose(rng).hparams;
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
    for (int i = 0; i < 5; ++i) {  // model proposals (the sampler's stream is restored too) and random ones
      TpeProposal x = tpe.Propose(a), y = copy.Propose(b);
      EXPECT_EQ(x.hparams, y.hparams);
      EXPECT_EQ(x.trial_seed, y.trial_seed);
    }
    EXPECT_FALSE(copy.Restore(json{{"x", 1}}).ok());
  }
}

// The head of an experiment YAML with a searcher map to complete.
const std::string kConfigHead =
    "name: x\nhyperparameters:\n  lr: {type: double, minval: 0, maxval: 1}\nsearcher:\n  metric: loss\n"
    "  max_length: {batches: 64}\n  max_trials: 10\n";

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

// A trial's validation metric from its x and the length it trained.
using Metric = std::function<double(double x, int64_t length)>;

// Drives a searcher to its end with `metric` (by default (x - 0.3)^2 at
// every length); returns the x of each trial in order (and, given
// `created`, the trials it created).
std::vector<double> Drive(Searcher& s, std::vector<CreateTrialOp>* created = nullptr, const Metric& metric = nullptr) {
  std::vector<double> xs;
  std::map<RequestId, double> x_of;
  std::vector<SearcherOp> pending = s.InitialOperations();
  for (int guard = 0; guard < 100000 && !pending.empty(); ++guard) {
    SearcherOp op = pending.front();
    pending.erase(pending.begin());
    std::vector<SearcherOp> more;
    if (auto* c = std::get_if<CreateTrialOp>(&op)) {
      if (created) created->push_back(*c);
      x_of[c->request_id] = c->hparams["x"].get<double>();
      xs.push_back(x_of[c->request_id]);
      more = s.TrialCreated(c->request_id);
    } else if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
      double x = x_of[v->request_id];
      more = s.ValidationCompleted(v->request_id, metric ? metric(x, v->length) : (x - 0.3) * (x - 0.3), v->length);
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
    // The model's proposals only (ASHA's default draws 1/3 of them at random).
    config.searcher.options.tpe.random_fraction = 0.0;
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

// adaptive_asha's brackets start at different lengths (here rungs of 4, 16
// and 64 batches; the last bracket trains 64 batches at its first rung): TPE
// ranks results by the batches behind them, not by the rung index, or a
// 64-batch result of the last bracket would rank with 4-batch ones.
TEST(TpeSearchTest, AshaFeedsTpeTheBatchesBehindEachResult) {
  ExperimentConfig config = TpeConfig(SearcherName::kAdaptiveAsha);
  config.searcher.max_length = Length{Length::Unit::kBatches, 64};
  config.searcher.max_rungs = 3;
  config.searcher.divisor = 4;
  config.searcher.max_trials = 30;
  absl::StatusOr<Searcher> s = Searcher::Create(config, 64);
  ASSERT_TRUE(s.ok()) << s.status();
  std::map<RequestId, int64_t> length_of;
  std::vector<SearcherOp> pending = s->InitialOperations();
  for (int guard = 0; guard < 10000 && !pending.empty(); ++guard) {
    SearcherOp op = pending.front();
    pending.erase(pending.begin());
    std::vector<SearcherOp> more;
    if (auto* c = std::get_if<CreateTrialOp>(&op)) {
      length_of[c->request_id] = 0;
      more = s->TrialCreated(c->request_id);
    } else if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
      length_of[v->request_id] = v->length;
      more = s->ValidationCompleted(v->request_id, 1.0 / static_cast<double>(v->length), v->length);
    } else if (auto* c = std::get_if<CloseTrialOp>(&op)) {
      more = s->TrialClosed(c->request_id);
    }
    pending.insert(pending.end(), more.begin(), more.end());
  }
  const json tpe = s->Snapshot()["method"]["tpe"]["trials"];
  ASSERT_TRUE(tpe.is_array()) << s->Snapshot()["method"].dump();
  std::set<int64_t> first_lengths;
  int scored = 0;
  for (const json& e : tpe) {
    if (!e["scored"].get<bool>()) continue;
    ++scored;
    RequestId id = e["id"].get<RequestId>();
    EXPECT_EQ(e["level"].get<int64_t>(), length_of[id]) << e.dump();
  }
  for (const auto& [id, length] : length_of) first_lengths.insert(length);
  EXPECT_EQ(scored, 30);
  EXPECT_TRUE(first_lengths.count(64)) << "no trial reached the full length";

  // A snapshot stored before the levels were batches (rung indexes, no
  // "tpe_level") is restored with each index turned into its rung's batches.
  // Such snapshots held TPE's results as a plain list, without its stream.
  json old = s->Snapshot();
  json& method = old["method"];
  method.erase("tpe_level");
  method["tpe"] = json(method["tpe"]["trials"]);
  std::map<RequestId, json> rung_lengths;  // of each trial's bracket
  for (const json& t : method["trials"]) {
    rung_lengths[t[0].get<RequestId>()] = method["brackets"][t[1].get<size_t>()]["rung_lengths"];
  }
  std::set<int64_t> indexes;
  for (json& e : method["tpe"]) {
    const json& lengths = rung_lengths.at(e["id"].get<RequestId>());
    const auto k = std::find(lengths.begin(), lengths.end(), e["level"]) - lengths.begin();
    ASSERT_LT(k, static_cast<std::ptrdiff_t>(lengths.size())) << e.dump();
    e["level"] = k;
    indexes.insert(k);
  }
  ASSERT_EQ(indexes.size(), 3u);  // 0, 1 and 2: the index alone is ambiguous
  absl::StatusOr<Searcher> restored = Searcher::Restore(config, 64, old);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->Snapshot()["method"]["tpe"]["trials"], tpe);
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
  config = ParseExperimentConfig(base + "  name: tpe\n  max_trials: 10\n  random_fraction: 1.5\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("searcher.random_fraction"), std::string::npos) << config.status();
  config = ParseExperimentConfig(base + "  name: pbt\n  population_size: 5000\n  perturb_period: 5\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("searcher.population_size"), std::string::npos) << config.status();
  config = ParseExperimentConfig(base + "  name: pbt\n  population_size: 4\n  perturb_period: 5\n"
                                 "  perturb_factors: [0.5, -1]\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("searcher.perturb_factors"), std::string::npos) << config.status();
}

// random_fraction unless given: BOHB's 1/3 with ASHA's sampler, Optuna's 0
// for the tpe searcher; given, it is kept and echoed.
TEST(TpeSearchTest, RandomFractionDefaultsToBohbsUnderAsha) {
  const std::string base = kConfigHead;
  auto asha = ParseExperimentConfig(base + "  name: adaptive_asha\n  sampler: tpe\n", "c.yaml");
  ASSERT_TRUE(asha.ok()) << asha.status();
  EXPECT_FALSE(asha->searcher.options.tpe.random_fraction.has_value());
  EXPECT_DOUBLE_EQ(ExperimentConfigToJson(*asha)["searcher"]["random_fraction"].get<double>(), 1.0 / 3);
  auto tpe = ParseExperimentConfig(base + "  name: tpe\n", "c.yaml");
  ASSERT_TRUE(tpe.ok()) << tpe.status();
  EXPECT_EQ(ExperimentConfigToJson(*tpe)["searcher"]["random_fraction"].get<double>(), 0);
  auto given = ParseExperimentConfig(base + "  name: adaptive_asha\n  sampler: tpe\n  random_fraction: 0\n", "c.yaml");
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->searcher.options.tpe.random_fraction, 0.0);
  EXPECT_EQ(ExperimentConfigToJson(*given)["searcher"]["random_fraction"].get<double>(), 0);

  // ASHA applies the default: unset proposes as 1/3 given does, not as 0.
  auto proposals = [](std::optional<double> random_fraction) {
    ExperimentConfig config = TpeConfig(SearcherName::kAsyncHalving);
    config.searcher.num_rungs = 3;
    config.searcher.options.tpe.random_fraction = random_fraction;
    absl::StatusOr<Searcher> s = Searcher::Create(config, 16);
    EXPECT_TRUE(s.ok()) << s.status();
    return Drive(*s);
  };
  EXPECT_EQ(proposals(std::nullopt), proposals(kAshaTpeRandomFraction));
  EXPECT_NE(proposals(std::nullopt), proposals(0.0));
}

// Random proposals draw from the searcher's rng exactly what random search
// draws for a trial (hparams, then trial seed); the coin and the model's
// proposals draw from the sampler's own stream.
TEST(TpeSamplerTest, RandomProposalsAreRandomSearchsDraws) {
  HyperparameterSpace space = {{"x", Hyperparameter::Double(0, 1)}, {"k", Hyperparameter::Int(1, 9)}};
  TpeOptions options;
  options.random_fraction = 0.5;
  TpeSampler tpe(space, options, /*smaller_is_better=*/true, /*model_seed=*/42);
  std::mt19937_64 rng(42), random_search(42);
  int random = 0, model = 0;
  for (RequestId id = 1; id <= 60; ++id) {
    TpeProposal p = tpe.Propose(rng);
    tpe.Record(id, p.hparams);
    tpe.Observe(id, std::abs(p.hparams["x"].get<double>() - 0.7), 0);
    if (p.from_model) {
      ++model;
      continue;
    }
    ++random;
    ASSERT_EQ(p.hparams, SampleHParams(space, random_search)) << "random proposal " << random;
    ASSERT_EQ(p.trial_seed, static_cast<uint32_t>(random_search() & 0xffffffffu)) << "random proposal " << random;
  }
  EXPECT_GE(random, 10 + 15);  // the startup trials and about half of the rest
  EXPECT_GE(model, 15);
}

// With the same experiment seed, ASHA with sampler: tpe tries random search's
// trials (hparams and trial seed) in random search's order among its own.
TEST(TpeSearchTest, AshaWithTpeTriesRandomSearchsTrialsInOrder) {
  std::vector<CreateTrialOp> random, asha;
  ExperimentConfig config = TpeConfig(SearcherName::kRandom);
  absl::StatusOr<Searcher> r = Searcher::Create(config, 16);
  ASSERT_TRUE(r.ok()) << r.status();
  Drive(*r, &random);
  config = TpeConfig(SearcherName::kAdaptiveAsha);
  config.searcher.max_length = Length{Length::Unit::kBatches, 64};
  config.searcher.max_rungs = 3;
  config.searcher.mode = AshaMode::kAggressive;
  config.searcher.max_trials = 60;
  absl::StatusOr<Searcher> a = Searcher::Create(config, 64);
  ASSERT_TRUE(a.ok()) << a.status();
  Drive(*a, &asha);
  ASSERT_EQ(random.size(), 40u);
  size_t matched = 0, model = 0;
  for (const CreateTrialOp& c : asha) {
    if (matched < random.size() && c.hparams == random[matched].hparams &&
        c.trial_seed == random[matched].trial_seed) {
      ++matched;
    } else {
      ++model;
    }
  }
  EXPECT_GE(matched, 4u + 12u);  // the 4 startup trials and about a third of the other 56
  EXPECT_GE(model, 20u);
}

// tpe_brackets: after_first (the default): adaptive_asha's first bracket
// (the most rungs) creates exactly the trials ASHA with sampler: random
// creates, in order; the later brackets take the model's proposals, fed by
// the first bracket's results. tpe_brackets: all: the model proposes in the
// first bracket too. (Whether its proposals beat random draws there is what
// bench/search_efficiency measures.)
TEST(TpeSearchTest, AshaFirstBracketDrawsAsRandomAshaAndTheOthersFromTheModel) {
  ExperimentConfig config = TpeConfig(SearcherName::kAdaptiveAsha);
  config.searcher.max_length = Length{Length::Unit::kBatches, 64};
  config.searcher.max_rungs = 3;  // standard mode: brackets of 3 and 2 rungs
  config.searcher.max_trials = 60;
  config.searcher.options.tpe.random_fraction = 0.0;
  absl::StatusOr<AshaLayout> layout = AshaLayoutFor(config, 64);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->brackets.size(), 2u);
  const size_t first = static_cast<size_t>(layout->brackets[0].max_trials);
  // The trials a search creates, driven to its end; its final snapshot in `snapshot` when given.
  auto run = [&](HParamSampler sampler, TpeBrackets brackets, json* snapshot = nullptr) {
    ExperimentConfig c = config;
    c.searcher.options.sampler = sampler;
    c.searcher.options.tpe_brackets = brackets;
    std::vector<CreateTrialOp> created;
    absl::StatusOr<Searcher> s = Searcher::Create(c, 64);
    EXPECT_TRUE(s.ok()) << s.status();
    if (s.ok()) Drive(*s, &created);
    if (s.ok() && snapshot) *snapshot = s->Snapshot();
    return created;
  };
  json snapshot;
  const std::vector<CreateTrialOp> random = run(HParamSampler::kRandom, TpeBrackets::kAfterFirst);
  const std::vector<CreateTrialOp> after_first = run(HParamSampler::kTpe, TpeBrackets::kAfterFirst, &snapshot);
  const std::vector<CreateTrialOp> all = run(HParamSampler::kTpe, TpeBrackets::kAll);
  ASSERT_EQ(random.size(), 60u);
  ASSERT_EQ(after_first.size(), 60u);
  ASSERT_EQ(all.size(), 60u);
  ASSERT_GT(first, 30u);
  ASSERT_LT(first, 56u);
  size_t all_differs = 0;
  for (size_t i = 0; i < first; ++i) {
    EXPECT_EQ(after_first[i].hparams, random[i].hparams) << i;
    EXPECT_EQ(after_first[i].trial_seed, random[i].trial_seed) << i;
    if (all[i].hparams != random[i].hparams) ++all_differs;
  }
  EXPECT_GE(all_differs, first / 2);
  // The second bracket takes the model's proposals (random_fraction 0 here),
  // not random search's next draws, and the model holds every trial's
  // result, the first bracket's included.
  size_t model = 0;
  for (size_t i = first; i < 60; ++i) model += after_first[i].hparams != random[i].hparams;
  EXPECT_EQ(model, 60 - first);
  size_t scored = 0;
  for (const json& e : snapshot["method"]["tpe"]["trials"]) scored += e["scored"].get<bool>();
  EXPECT_EQ(scored, 60u);
}

// tpe_brackets is parsed and echoed for adaptive_asha with sampler: tpe; a
// bad value is refused, naming the field.
TEST(TpeSearchTest, TpeBracketsIsParsedEchoedAndChecked) {
  const std::string base = kConfigHead + "  name: adaptive_asha\n  sampler: tpe\n";
  auto config = ParseExperimentConfig(base, "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->searcher.options.tpe_brackets, TpeBrackets::kAfterFirst);
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["tpe_brackets"], "after_first");
  config = ParseExperimentConfig(base + "  tpe_brackets: all\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->searcher.options.tpe_brackets, TpeBrackets::kAll);
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["tpe_brackets"], "all");
  config = ParseExperimentConfig(base + "  tpe_brackets: sometimes\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("searcher.tpe_brackets"), std::string::npos) << config.status();
}

// model_promotions is parsed and echoed for ASHA with sampler: tpe (false
// unless given, and false for stop_once, where nothing waits to be
// promoted); a non-boolean is refused naming the field; with sampler:
// random it is accepted with a warning naming its readers.
TEST(TpeSearchTest, ModelPromotionsIsParsedEchoedAndChecked) {
  const std::string base = kConfigHead + "  name: adaptive_asha\n";
  auto config = ParseExperimentConfig(base + "  sampler: tpe\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->searcher.options.model_promotions.has_value());
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["model_promotions"], false);
  config = ParseExperimentConfig(base + "  sampler: tpe\n  model_promotions: true\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->searcher.options.model_promotions, true);
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["model_promotions"], true);
  config = ParseExperimentConfig(base + "  sampler: tpe\n  model_promotions: true\n  stop_once: true\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["model_promotions"], false);
  config = ParseExperimentConfig(base + "  sampler: tpe\n  model_promotions: often\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("searcher.model_promotions"), std::string::npos) << config.status();
  config = ParseExperimentConfig(base + "  model_promotions: true\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->warnings.size(), 1u);
  EXPECT_NE(config->warnings[0].find("searcher.model_promotions"), std::string::npos) << config->warnings[0];
  EXPECT_NE(config->warnings[0].find("sampler: random"), std::string::npos) << config->warnings[0];
}

// multivariate unless given: true for the tpe searcher, false under ASHA;
// given, it is kept and echoed; a non-boolean is refused, naming the field;
// under random search it is accepted with a warning naming its readers.
TEST(TpeSearchTest, MultivariateDefaultsToTrueForTpeAndFalseUnderAsha) {
  const std::string base = kConfigHead;
  const std::string tpe = "  name: tpe\n", asha = "  name: adaptive_asha\n  sampler: tpe\n";
  for (const std::string& searcher : {tpe, asha}) {
    auto config = ParseExperimentConfig(base + searcher, "c.yaml");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_FALSE(config->searcher.options.tpe.multivariate.has_value());
    EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["multivariate"], searcher == tpe);
    for (bool given : {false, true}) {
      const std::string line = std::string("  multivariate: ") + (given ? "true" : "false") + "\n";
      config = ParseExperimentConfig(base + searcher + line, "c.yaml");
      ASSERT_TRUE(config.ok()) << config.status();
      EXPECT_EQ(config->searcher.options.tpe.multivariate, given);
      EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["multivariate"], given);
    }
    config = ParseExperimentConfig(base + searcher + "  multivariate: 3\n", "c.yaml");
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.status().message().find("searcher.multivariate"), std::string::npos) << config.status();
  }
  auto config = ParseExperimentConfig(base + "  name: random\n  multivariate: true\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_EQ(config->warnings.size(), 1u);
  EXPECT_NE(config->warnings[0].find("searcher.multivariate"), std::string::npos) << config->warnings[0];
  EXPECT_NE(config->warnings[0].find("tpe"), std::string::npos) << config->warnings[0];

  // The searchers apply the default: unset proposes as the default given
  // does, not as the other value.
  for (SearcherName name : {SearcherName::kTpe, SearcherName::kAsyncHalving}) {
    auto proposals = [&](std::optional<bool> multivariate) {
      ExperimentConfig c = TpeConfig(name);
      c.searcher.num_rungs = 3;
      c.searcher.options.tpe.multivariate = multivariate;
      absl::StatusOr<Searcher> s = Searcher::Create(c, 16);
      EXPECT_TRUE(s.ok()) << s.status();
      return Drive(*s);
    };
    const bool default_value = name == SearcherName::kTpe;
    EXPECT_EQ(proposals(std::nullopt), proposals(default_value));
    EXPECT_NE(proposals(std::nullopt), proposals(!default_value));
  }
}

// Many results: a proposal models only the best-ranked kMaxTpeModelTrials.
TEST(TpeSamplerTest, ModelsAtMostTheBestRankedTrials) {
  HyperparameterSpace space = {{"x", Hyperparameter::Double(0, 1)}};
  TpeSampler tpe(space, TpeOptions{}, true);
  std::mt19937_64 rng(3);
  for (RequestId id = 1; id <= 3000; ++id) {
    json hp = tpe.Propose(rng).hparams;
    tpe.Record(id, hp);
    double x = hp["x"].get<double>();
    tpe.Observe(id, (x - 0.5) * (x - 0.5), 0);
  }
  EXPECT_EQ(tpe.observed(), 3000);
  int near = 0;  // at random 8 of 20; the model's prior component still sends some far away
  for (int i = 0; i < 20; ++i) near += std::abs(tpe.Propose(rng).hparams["x"].get<double>() - 0.5) < 0.2 ? 1 : 0;
  EXPECT_GE(near, 12);
}

// ScoreAbove(level) models only the results above `level`: here short
// results favour small x and longer ones x near 0.8.
TEST(TpeSamplerTest, ScoreAboveModelsOnlyLongerResults) {
  HyperparameterSpace space = {{"x", Hyperparameter::Double(0, 1)}};
  TpeOptions options;
  options.n_startup_trials = 10;
  TpeSampler tpe(space, options, /*smaller_is_better=*/true);
  for (RequestId id = 1; id <= 40; ++id) {
    const double x = static_cast<double>(id - 1) / 40;
    tpe.Record(id, json{{"x", x}});
    if (id % 3 == 0) {
      tpe.Observe(id, (x - 0.8) * (x - 0.8), 64);
    } else {
      tpe.Observe(id, x, 16);
    }
  }
  const json low = {{"x", 0.1}}, high = {{"x", 0.8}};
  const std::vector<double> above16 = tpe.ScoreAbove(16, {&low, &high});
  ASSERT_EQ(above16.size(), 2u);  // 13 results at 64 batches
  EXPECT_GT(above16[1], 0);
  EXPECT_LT(above16[0], 0);
  EXPECT_TRUE(tpe.ScoreAbove(64, {&low, &high}).empty());  // nothing above 64 batches
  // From 13 results at 64 and 27 at 16 the model keeps the 64-batch ones
  // (the highest level with n_startup_trials), as proposals do.
  EXPECT_EQ(tpe.ScoreAbove(0, {&low, &high}), above16);
}

// model_promotions: where learning curves cross (short results favour x
// near 0.3, long ones x near 0.6), ASHA with sampler: tpe also promotes, at
// most floor(n / divisor^2) of them, waiting trials of the better half that
// the model of the longer results favours; without it ASHA promotes by the
// short results alone. The counts survive a snapshot.
TEST(TpeSearchTest, ModelPromotionsFollowTheLongerResults) {
  auto config = [](bool model_promotions) {
    ExperimentConfig c = TpeConfig(SearcherName::kAsyncHalving);
    c.searcher.num_rungs = 2;  // rungs of 4 and 16 batches
    c.searcher.max_trials = 200;
    c.searcher.options.tpe.n_startup_trials = 6;
    c.searcher.options.tpe.random_fraction = 1.0;  // random search's trials: only promotions differ
    c.searcher.options.model_promotions = model_promotions;
    return c;
  };
  // The x of each trial trained to 16 batches, the final snapshot, and one
  // taken mid-search.
  auto run = [&](bool model_promotions, json* mid_snapshot = nullptr) {
    absl::StatusOr<Searcher> s = Searcher::Create(config(model_promotions), 16);
    EXPECT_TRUE(s.ok()) << s.status();
    std::vector<double> promoted;
    int validations = 0;
    Drive(*s, nullptr, [&](double x, int64_t length) {
      if (length == 16) promoted.push_back(x);
      if (mid_snapshot && ++validations == 120) *mid_snapshot = s->Snapshot();
      return length == 16 ? (x - 0.6) * (x - 0.6) : std::abs(x - 0.3);
    });
    return std::make_pair(promoted, s->Snapshot());
  };
  auto late = [](const std::vector<double>& xs) {
    return std::count_if(xs.begin(), xs.end(), [](double x) { return x > 0.45; });
  };
  json mid;
  const auto [with_model, snapshot] = run(true, &mid);
  const auto [without, plain_snapshot] = run(false);
  // 200 trials: at least floor(200 / 4) = 50 promoted by their short result
  // (asynchronous ASHA promotes the top quarter of the results so far), and
  // up to floor(200 / 16) = 12 more by the model.
  EXPECT_GE(without.size(), 50u);
  const int64_t by_model = snapshot["method"]["brackets"][0]["model_promoted"][0].get<int64_t>();
  EXPECT_GT(by_model, 0);
  EXPECT_LE(by_model, 12);
  EXPECT_GE(static_cast<int64_t>(with_model.size()) - by_model, 50);
  EXPECT_GE(late(with_model), late(without) + 5) << late(with_model) << " vs " << late(without);
  EXPECT_EQ(plain_snapshot["method"]["brackets"][0]["model_promoted"][0], 0);
  // Restored mid-search, the counts are kept.
  ASSERT_FALSE(mid.is_null());
  ASSERT_GT(mid["method"]["brackets"][0]["model_promoted"][0].get<int64_t>(), 0);
  const ExperimentConfig c = config(true);
  absl::StatusOr<Searcher> restored = Searcher::Restore(c, 16, mid);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->Snapshot(), mid);
  json bad = mid;
  bad["method"]["brackets"][0]["model_promoted"][0] = -1;
  EXPECT_FALSE(Searcher::Restore(c, 16, bad).ok());
}

}  // namespace
}  // namespace master
}  // namespace det
