// bench/search_efficiency: searchers next to random search with the same
// budget (hyperparameter space, max_trials x max_length batches, concurrency),
// through a real det-master and two det-agents on loopback, on two tasks:
//  - fmnist: the Fashion-MNIST example (CNN; Adam's learning rate 1e-4..1,
//    both convolution widths, hidden size, dropout; metric accuracy);
//  - synthetic: the synthetic example (an MLP on generated data) over a wide
//    space where few configurations are good (learning rate 1e-5..1, hidden
//    size 2..128, dropout 0..0.9; metric validation_loss, smaller is better):
//    cheap batches, so a seed costs mostly process starts.
// For each seed it prints, for each search, the best validation and the total
// batches trained (over all trials, in the order things happened) until the
// search first reached the best validation random search found; the ratio to
// random's batches is the figure of merit (goal: at most 1/3). Where random's
// best falls in its sequence of trials is luck, so one seed says little: the
// summary prints the ratio of the summed batches (the expected cost) and each
// seed's ratio with their spread.
//
//   search_efficiency [--task fmnist|synthetic] [--seeds 1,2,3,4,5,6] [--max-trials 64]
//                     [--max-length 256] [--max-rungs 3] [--lr-min -4] [--lr-max 0]
//                     [--train-limit 16384] [--validation-limit 2000]   (fmnist)
//                     [--tolerance 0.005 (fmnist) | 0.01 (synthetic)]
//                     [--searchers promotion,aggressive]
//                     (promotion, stop_once, aggressive, conservative: adaptive_asha modes;
//                     best: standard with rung_metric: best; asha_tpe: standard with sampler:
//                     tpe; aggressive_tpe: aggressive with sampler: tpe; suffixes on the ASHA
//                     ones: _d3 divisor 3, _r2/_r4 max_rungs 2/4, _par bracket_order: parallel;
//                     on asha_tpe: _all tpe_brackets: all;
//                     on asha_tpe, aggressive_tpe and tpe: _rf/_rf0 random_fraction 1/3 / 0,
//                     _s64 n_startup_trials 64, _mv/_uv multivariate: true/false;
//                     on asha_tpe and aggressive_tpe: _mp/_mp0 model_promotions: true/false;
//                     tpe; pbt: population 64, perturb_period 32, explore learning_rate and dropout,
//                     _b0 burn_in_period: 0 (the default: 128, half of max_length);
//                     --asha-variants is the same flag)
//                     [--results FILE] [--report] [--full] [--prestart-pool N]
//
// --prestart-pool N starts each agent with det-agent --prestart-pool N (0..8;
// results are kept apart from those without). The summary ends with each
// search's wall time per batch trained, the median over the seeds, next to
// random search's (issue 50's goal: ASHA's no more than random's on 2 slots).
//
// --results FILE appends each search's outcome to FILE (JSON lines) as soon
// as it ends, and a search FILE already holds (same task, options, seed and
// searcher) is not run again: a run of many seeds can be stopped and taken up
// later, or spread over several machines and the files concatenated.
// --report prints the summary of FILE for --seeds/--searchers and trains
// nothing. bench/results/ holds the files behind the figures of docs/benchmarks.md.
//
// --lr-min/--lr-max: log10 bounds of the learning rate. Each ASHA variant
// gets as many trials as its brackets fit in the same budget (by the
// searcher's own preview). A search is killed as soon as it has reached
// random search's best (all the figure needs); --full runs it to the end.
//
// fmnist's budget is reduced (a quarter of the training set per trial, 2000
// validation images) so that random search takes about 6 minutes a seed on
// two cores; --max-length 937 --train-limit 0 --validation-limit 0 is the full
// example. bench/search_seeds is the same figure on simulated curves.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/bench_cluster.h"
#include "bench/search_efficiency_results.h"
#include "common/experiment_config.h"
#include "det/api/v1/api.grpc.pb.h"
#include "master/search/preview.h"
#include "tests/test_util.h"

namespace {
using det::bench::Authorize;
using det::bench::Outcome;
using det::bench::ResultsFile;
using det::testing::ReadFile;
using det::testing::TempDir;
using det::testing::WriteFile;
namespace v1 = det::api::v1;


// A searcher configuration: an adaptive_asha mode (and whether it stops,
// stop_once, rather than promotes), or tpe / pbt.
struct AshaVariant {
  std::string name;
  std::string searcher = "adaptive_asha";  // or tpe, pbt
  std::string mode = "standard";
  bool stop_once = false;
  int divisor = 4;
  int max_rungs = 0;  // 0: --max-rungs
  std::string extra;  // more searcher lines (sampler: tpe, rung_metric: best)
  // As many trials as fit the budget, and the batches the preview plans.
  int trials = 0;
  int64_t planned = 0;
};

// A name is a base (promotion, stop_once, aggressive, conservative, best,
// asha_tpe, aggressive_tpe, tpe, pbt) and, on an ASHA one, suffixes: _d3
// (divisor 3), _r2 / _r4 (max_rungs 2: a first rung of max_length/4, a grace
// period; 4), _par (bracket_order: parallel, Determined's); on asha_tpe:
// _all (tpe_brackets: all, the model in the first bracket too); on asha_tpe,
// aggressive_tpe and tpe: _rf / _rf0 (random_fraction 1/3 / 0; the defaults
// are 1/3 under ASHA, as BOHB, and 0 for tpe); _s64 (n_startup_trials 64:
// the model waits for as many results as random search has trials); _mv
// / _uv (multivariate: true / false; the defaults are false under ASHA and
// true for tpe); on asha_tpe and aggressive_tpe: _mp / _mp0
// (model_promotions: true / false; the default is false); on pbt: _b0 (burn_in_period 0, Ray's default; pbt's own
// default is half of max_length, 128 here: no member replaced in the first
// half).
std::optional<AshaVariant> ParseVariant(const std::string& name) {
  AshaVariant v;
  v.name = name;
  std::string base = name;
  std::string random_fraction;  // _rf / _rf0: given, else the searcher's default
  bool parallel = false;        // _par: bracket_order: parallel
  bool tpe_all = false;         // _all: tpe_brackets: all
  bool startup64 = false;       // _s64: n_startup_trials: 64
  bool no_burn_in = false;      // _b0: burn_in_period: 0
  std::string multivariate;     // _mv / _uv: given, else the searcher's default
  std::string model_promotions;  // _mp / _mp0: given, else the default (false)
  auto suffix = [&](const char* s) {
    const size_t n = std::strlen(s);
    if (base.size() <= n || base.compare(base.size() - n, n, s) != 0) return false;
    base.resize(base.size() - n);
    return true;
  };
  for (bool more = true; more;) {
    more = false;
    if (suffix("_d3")) v.divisor = 3, more = true;
    if (suffix("_r2")) v.max_rungs = 2, more = true;
    if (suffix("_r4")) v.max_rungs = 4, more = true;
    if (suffix("_rf")) random_fraction = "0.3333333333333333", more = true;
    if (suffix("_rf0")) random_fraction = "0", more = true;
    if (suffix("_par")) parallel = true, more = true;
    if (suffix("_all")) tpe_all = true, more = true;
    if (suffix("_s64")) startup64 = true, more = true;
    if (suffix("_b0")) no_burn_in = true, more = true;
    if (suffix("_mv")) multivariate = "true", more = true;
    if (suffix("_uv")) multivariate = "false", more = true;
    if (suffix("_mp")) model_promotions = "true", more = true;
    if (suffix("_mp0")) model_promotions = "false", more = true;
  }
  const bool plain = v.divisor == 4 && v.max_rungs == 0 && !parallel;
  if (base == "stop_once") v.stop_once = true;
  else if (base == "aggressive" || base == "conservative") v.mode = base;
  else if (base == "asha_tpe") v.extra = "  sampler: tpe\n";
  else if (base == "aggressive_tpe") v.mode = "aggressive", v.extra = "  sampler: tpe\n";
  else if (base == "best") v.extra = "  rung_metric: best\n";
  else if ((base == "tpe" || base == "pbt") && plain) v.searcher = base;
  else if (base != "promotion") return std::nullopt;
  if (parallel) v.extra += "  bracket_order: parallel\n";
  if (tpe_all) {  // TPE's proposals in the first bracket too
    if (base != "asha_tpe") return std::nullopt;
    v.extra += "  tpe_brackets: all\n";
  }
  if (startup64) {
    if (base != "asha_tpe" && base != "aggressive_tpe" && base != "tpe") return std::nullopt;
    v.extra += "  n_startup_trials: 64\n";
  }
  if (no_burn_in) {  // PBT may replace members from its first round on
    if (base != "pbt") return std::nullopt;
    v.extra += "  burn_in_period: 0\n";
  }
  if (!multivariate.empty()) {  // TPE's joint estimators, or one per hparam
    if (base != "asha_tpe" && base != "aggressive_tpe" && base != "tpe") return std::nullopt;
    v.extra += "  multivariate: " + multivariate + "\n";
  }
  if (!model_promotions.empty()) {  // the model's promotions under ASHA
    if (base != "asha_tpe" && base != "aggressive_tpe") return std::nullopt;
    v.extra += "  model_promotions: " + model_promotions + "\n";
  }
  if (!random_fraction.empty()) {  // TPE's share of random proposals
    if (base != "asha_tpe" && base != "aggressive_tpe" && base != "tpe") return std::nullopt;
    v.extra += "  random_fraction: " + random_fraction + "\n";
  }
  return v;
}

// What is trained: the trial, its space and data, and the metric searched.
struct Task {
  std::string name;
  std::string trial_so;
  std::string metric;
  bool smaller_is_better = false;
  double tolerance = 0.005;
  double lr_min = -4, lr_max = 0;  // log10
};

Task MakeTask(const std::string& name) {
  const std::string trials = DET_TRIALS_DIR;
  if (name == "synthetic") return {name, trials + "/synthetic_trial.so", "validation_loss", true, 0.01, -5, 0};
  return {"fmnist", trials + "/fashion_mnist_trial.so", "accuracy", false, 0.005, -4, 0};
}

struct Options {
  Task task = MakeTask("fmnist");
  int max_trials = 64;
  int asha_trials = 0;  // 0: as many as fit in random search's batch budget
  int max_length = 256;
  int train_limit = 16384;
  int validation_limit = 2000;
  std::optional<double> tolerance, lr_min, lr_max;  // the task's unless given
  std::vector<AshaVariant> asha_variants;
  // reproducibility.experiment_seed of both experiments, one run of each
  // search per seed.
  std::vector<int64_t> seeds = {1, 2, 3, 4, 5, 6};
  // adaptive_asha's max_rungs: with max_length 256, Determined's default of
  // 5 would make the first rung 1 batch; 3 makes it 16.
  int max_rungs = 3;
  bool full = false;
  // det-agent --prestart-pool of each agent (0: off); timing only, but
  // named in the key so that wall times of either setting never mix.
  int prestart_pool = 0;
  std::string results;
  bool report = false;

  double LrMin() const { return lr_min.value_or(task.lr_min); }
  double LrMax() const { return lr_max.value_or(task.lr_max); }
  // Names the task and every option that changes what a search does, so the
  // results file never mixes other budgets. Random search always runs to its
  // end, so its key never says `full`.
  std::string Key(bool random = false) const {
    std::string k = absl::StrCat(task.name, " trials=", max_trials, " length=", max_length, " rungs=", max_rungs,
                                 " lr=", LrMin(), "..", LrMax());
    if (task.name == "fmnist") absl::StrAppend(&k, " train=", train_limit, " val=", validation_limit);
    if (full && !random) k += " full";  // searches run to their end, not killed at random's best
    if (prestart_pool > 0) absl::StrAppend(&k, " pool=", prestart_pool);
    return k;
  }
};

// A variant's max_rungs: its own suffix's, else --max-rungs.
int Rungs(const AshaVariant& v, const Options& o) { return v.max_rungs > 0 ? v.max_rungs : o.max_rungs; }

std::string Hyperparameters(const Options& o) {
  std::string lr = absl::StrCat("  learning_rate:\n    type: log\n    minval: ", o.LrMin(), "\n    maxval: ",
                                o.LrMax(), "\n    base: 10\n");
  if (o.task.name == "synthetic") {
    return absl::StrCat("hyperparameters:\n  global_batch_size: 32\n", lr, R"(  hidden_size:
    type: int
    minval: 2
    maxval: 128
  dropout:
    type: double
    minval: 0.0
    maxval: 0.9
)");
  }
  return absl::StrCat("hyperparameters:\n  global_batch_size: 64\n", lr, R"(  n_filters1:
    type: int
    minval: 4
    maxval: 32
  n_filters2:
    type: int
    minval: 8
    maxval: 64
  hidden_size:
    type: categorical
    vals: [32, 64, 128, 256]
  dropout:
    type: double
    minval: 0.0
    maxval: 0.5
)");
}

std::string Data(const Options& o) {
  if (o.task.name == "synthetic") {
    return "data:\n  train_size: 4096\n  val_size: 1024\n  features: 32\n  seed: 1\n";
  }
  return absl::StrCat("records_per_epoch: 60000\ndata:\n  source_dir: /usr/share/datasets/fashion-mnist\n"
                      "  train_limit: ",
                      o.train_limit, "\n  validation_limit: ", o.validation_limit, "\n  workers: 0\n");
}

std::string Config(const Options& o, int64_t seed, const std::string& searcher, const std::string& checkpoints,
                   int max_trials, const AshaVariant& variant = {}) {
  std::string s = absl::StrCat("name: search-efficiency-", o.task.name, "-", searcher, "\n", Hyperparameters(o),
                               "searcher:\n  name: ", searcher, "\n  metric: ", o.task.metric,
                               "\n  smaller_is_better: ", o.task.smaller_is_better ? "true" : "false",
                               "\n  max_length:\n    batches: ", o.max_length, "\n  max_trials: ", max_trials,
                               "\n  max_concurrent_trials: 2\n");
  if (searcher == "adaptive_asha") {
    absl::StrAppend(&s, "  mode: ", variant.mode, "\n  divisor: ", variant.divisor, "\n  max_rungs: ",
                    Rungs(variant, o), "\n", variant.extra);
    if (variant.stop_once) s += "  stop_once: true\n";
  }
  // pbt: the same budget as random search (population max_trials x max_length);
  // a child keeps its parent's widths (its model's shape), explores the rest.
  if (searcher == "pbt") {
    absl::StrAppend(&s, "  population_size: ", max_trials,
                    "\n  perturb_period: 32\n  explore: [learning_rate, dropout]\n", variant.extra);
  }
  absl::StrAppend(&s, "scheduling_unit: 16\nreproducibility:\n  experiment_seed: ", seed, R"(
# Two agents with one slot each share this machine's cores: one thread each.
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoints, "\n", Data(o));
  return s;
}

int64_t Ms(const google::protobuf::Timestamp& t) { return t.seconds() * 1000 + t.nanos() / 1000000; }

// The score of a metric value: higher is better.
double Score(const Task& task, double value) { return task.smaller_is_better ? -value : value; }

// Batches a trial started from: a PBT child continues at its parent's
// checkpoint, and those batches were trained (and counted) by the parent.
int64_t InheritedBatches(v1::Determined::Stub& api, const v1::Trial& t) {
  if (t.parent_checkpoint_uuid().empty()) return 0;
  grpc::ClientContext ctx;
  Authorize(&ctx);
  v1::GetCheckpointRequest r;
  r.set_checkpoint_uuid(t.parent_checkpoint_uuid());
  v1::GetCheckpointResponse c;
  auto s = api.GetCheckpoint(&ctx, r, &c);
  if (!s.ok()) {
    std::fprintf(stderr, "GetCheckpoint %s (parent of trial %lld): %s\n", t.parent_checkpoint_uuid().c_str(),
                 static_cast<long long>(t.id()), s.error_message().c_str());
    std::exit(1);
  }
  return c.checkpoint().total_batches();
}

// The outcome of a finished experiment from its trials' metrics: a training
// report moves its trial's batch count (from the batches it inherited); a
// validation is a point on the (batches trained so far, score) curve.
Outcome Collect(v1::Determined::Stub& api, const Task& task, int64_t id) {
  const v1::GetExperimentTrialsResponse trials = det::bench::ExperimentTrials(api, id);
  struct Event {
    int64_t time_ms;
    int64_t trial;
    int64_t batches;
    bool validation;
    double value;
  };
  std::vector<Event> events;
  std::map<int64_t, int64_t> trained;  // per trial
  for (const auto& t : trials.trials()) {
    trained[t.id()] = InheritedBatches(api, t);
    const v1::GetTrialMetricsResponse metrics = det::bench::TrialMetrics(api, t.id());
    for (const auto& m : metrics.metrics()) {
      bool val = m.group() == "validation";
      auto it = m.metrics().find(task.metric);
      if (val && it == m.metrics().end()) continue;
      events.push_back({Ms(m.end_time()), t.id(), m.total_batches(), val, val ? it->second : 0.0});
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.time_ms < b.time_ms; });
  Outcome out;
  int64_t sum = 0;
  for (const auto& e : events) {
    int64_t& b = trained[e.trial];
    if (e.batches > b) {
      sum += e.batches - b;
      b = e.batches;
    }
    if (e.validation) out.AddValidation(sum, Score(task, e.value));
  }
  out.total_batches = sum;
  return out;
}

// Runs one experiment to the end, or, with stop_at (a score), until its best
// validation reaches stop_at (then kills it).
Outcome Run(v1::Determined::Stub& api, const Task& task, const std::string& config_path,
            std::optional<double> stop_at) {
  const int64_t id = det::bench::CreateExperiment(api, task.trial_so, ReadFile(config_path));
  auto t0 = std::chrono::steady_clock::now();
  bool killed = false;
  det::bench::WaitForEnd(api, id, std::chrono::hours(2), [&](const v1::Experiment& e) {
    if (!stop_at || killed || !e.has_best_validation_metric() || Score(task, e.best_validation_metric()) < *stop_at) {
      return;
    }
    grpc::ClientContext kctx;
    Authorize(&kctx);
    v1::KillExperimentRequest kill;
    kill.set_experiment_id(id);
    v1::KillExperimentResponse killed_resp;
    auto ks = api.KillExperiment(&kctx, kill, &killed_resp);
    if (!ks.ok()) std::fprintf(stderr, "KillExperiment %lld: %s\n", static_cast<long long>(id),
                               ks.error_message().c_str());
    killed = ks.ok();
  });
  Outcome out = Collect(api, task, id);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.stopped_early = killed;
  return out;
}

// Parses the flags into `o`; false (after a message) on a bad one.
bool ParseFlags(int argc, char** argv, Options& o) {
  bool variants_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--full" || a == "--report") {
      (a == "--full" ? o.full : o.report) = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return false;
    }
    const std::string v = argv[++i];
    if (a == "--task") {
      if (v != "fmnist" && v != "synthetic") {
        std::fprintf(stderr, "--task: unknown task '%s' (fmnist, synthetic)\n", v.c_str());
        return false;
      }
      o.task = MakeTask(v);
    } else if (a == "--max-trials") o.max_trials = std::atoi(v.c_str());
    else if (a == "--asha-trials") o.asha_trials = std::atoi(v.c_str());
    else if (a == "--max-length") o.max_length = std::atoi(v.c_str());
    else if (a == "--train-limit") o.train_limit = std::atoi(v.c_str());
    else if (a == "--validation-limit") o.validation_limit = std::atoi(v.c_str());
    else if (a == "--tolerance") o.tolerance = std::atof(v.c_str());
    else if (a == "--lr-min") o.lr_min = std::atof(v.c_str());
    else if (a == "--lr-max") o.lr_max = std::atof(v.c_str());
    else if (a == "--max-rungs") o.max_rungs = std::atoi(v.c_str());
    else if (a == "--results") o.results = v;
    else if (a == "--prestart-pool") {
      o.prestart_pool = std::atoi(v.c_str());
      if (o.prestart_pool < 0 || o.prestart_pool > 8) {
        std::fprintf(stderr, "--prestart-pool: %s is not 0..8 (prestarted det-trial processes per agent)\n", v.c_str());
        return false;
      }
    }
    else if (a == "--seeds" || a == "--seed") {
      o.seeds.clear();
      std::stringstream list(v);
      for (std::string seed; std::getline(list, seed, ',');) {
        char* rest = nullptr;
        long long n = std::strtoll(seed.c_str(), &rest, 10);
        if (seed.empty() || *rest != '\0') {
          std::fprintf(stderr, "%s: '%s' is not an integer seed\n", a.c_str(), seed.c_str());
          return false;
        }
        o.seeds.push_back(n);
      }
    } else if (a == "--asha-variants" || a == "--searchers") {
      variants_given = true;
      o.asha_variants.clear();
      std::stringstream list(v);
      for (std::string name; std::getline(list, name, ',');) {
        auto variant = ParseVariant(name);
        if (!variant) {
          std::fprintf(stderr,
                       "%s: unknown searcher '%s' (promotion, stop_once, aggressive, conservative, asha_tpe, "
                       "best, tpe, pbt; _d3, _r2, _r4 after an ASHA one; _rf, _rf0, _s64, _mv, _uv after "
                       "asha_tpe or tpe; _b0 after pbt)\n",
                       a.c_str(), name.c_str());
          return false;
        }
        o.asha_variants.push_back(*variant);
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return false;
    }
  }
  if (o.asha_variants.empty() && !variants_given) {
    o.asha_variants = {*ParseVariant("promotion"), *ParseVariant("aggressive")};
  }
  if (o.seeds.empty() || o.asha_variants.empty()) {
    std::fprintf(stderr, "--seeds and --searchers need at least one value\n");
    return false;
  }
  if (o.report && o.results.empty()) {
    std::fprintf(stderr, "--report needs --results FILE\n");
    return false;
  }
  return true;
}

// Gives each searcher the same budget as random search (max_trials x
// max_length batches): tpe and pbt random search's trials (population), ASHA
// as many trials as fit, by the searcher's own preview.
bool PlanBudgets(Options& o, const std::string& checkpoints) {
  const int64_t budget = static_cast<int64_t>(o.max_trials) * o.max_length;
  for (AshaVariant& variant : o.asha_variants) {
    if (variant.searcher != "adaptive_asha") {
      variant.trials = o.max_trials;
      variant.planned = budget;
      std::printf("budget: %lld batches; %s: %d trials x %d batches\n", static_cast<long long>(budget),
                  variant.name.c_str(), variant.trials, o.max_length);
      continue;
    }
    for (int m = o.max_trials; o.asha_trials == 0 || m <= o.asha_trials; ++m) {
      auto config =
          det::ParseExperimentConfig(Config(o, o.seeds[0], "adaptive_asha", checkpoints, m, variant), "asha.yaml");
      if (!config.ok()) {
        std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
        return false;
      }
      auto preview = det::master::PreviewSearch(*config, o.max_length, 0);
      if (!preview.ok()) return false;
      if (o.asha_trials == 0 && preview->total_batches > budget) break;
      variant.trials = m;
      variant.planned = preview->total_batches;
      if (m >= 4096) break;
    }
    std::printf("budget: %lld batches; random: %d trials x %d batches; adaptive_asha (%s): %d trials (%s mode, "
                "divisor %d, max_rungs %d%s), %lld batches planned\n",
                static_cast<long long>(budget), o.max_trials, o.max_length, variant.name.c_str(), variant.trials,
                variant.mode.c_str(), variant.divisor, Rungs(variant, o), variant.stop_once ? ", stop_once" : "",
                static_cast<long long>(variant.planned));
  }
  std::fflush(stdout);
  return true;
}

void PrintOutcome(const Options& o, const std::string& name, const Outcome& out, bool recorded) {
  const double best = o.task.smaller_is_better ? -out.best : out.best;
  std::printf("[%s]: best %s %.4f%s, %lld batches%s, %.0f s%s\n", name.c_str(), o.task.metric.c_str(), best,
              out.stopped_early ? " (reached random's best, killed there)" : "",
              static_cast<long long>(out.total_batches), out.stopped_early ? "" : " in all", out.seconds,
              recorded ? " (from the results file)" : "");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!ParseFlags(argc, argv, o)) return 2;
  TempDir dir;
  ResultsFile results(o.results);
  const std::string key = o.Key();
  std::printf("search_efficiency: task %s (%s), %d trials, max_length %d batches, 2 slots, learning rate "
              "1e%g..1e%g, seeds %s%s\n",
              o.task.name.c_str(), key.c_str(), o.max_trials, o.max_length, o.LrMin(), o.LrMax(),
              absl::StrJoin(o.seeds, ",").c_str(), o.report ? " (report of the results file)" : "");
  if (!o.report && !PlanBudgets(o, dir / "checkpoints")) return 1;
  det::bench::BenchCluster cluster(dir, 2, o.prestart_pool);
  std::vector<std::optional<Outcome>> random;
  std::vector<std::pair<std::string, std::vector<std::optional<Outcome>>>> searches;
  for (const AshaVariant& v : o.asha_variants) searches.push_back({v.name, {}});
  for (int64_t seed : o.seeds) {
    if (!o.report) std::printf("\n== seed %lld\n", static_cast<long long>(seed));
    std::optional<Outcome> r = results.Find(o.Key(true), seed, "random");
    if (!r && !o.report) {
      const std::string path = dir / absl::StrCat("random-", seed, ".yaml");
      WriteFile(path, Config(o, seed, "random", dir / "checkpoints", o.max_trials));
      r = Run(cluster.api(), o.task, path, std::nullopt);
      results.Add(o.Key(true), seed, "random", *r);
      PrintOutcome(o, "random", *r, false);
    } else if (r && !o.report) {
      PrintOutcome(o, "random", *r, true);
    }
    random.push_back(r);
    for (size_t k = 0; k < o.asha_variants.size(); ++k) {
      const AshaVariant& v = o.asha_variants[k];
      std::optional<Outcome> s = results.Find(key, seed, v.name);
      if (!s && !o.report && r) {
        const std::string path = dir / absl::StrCat("search-", v.name, "-", seed, ".yaml");
        WriteFile(path, Config(o, seed, v.searcher, dir / "checkpoints", v.trials, v));
        s = Run(cluster.api(), o.task, path, o.full ? std::nullopt : std::optional<double>(r->best));
        results.Add(key, seed, v.name, *s);
        PrintOutcome(o, v.name, *s, false);
      } else if (s && !o.report) {
        PrintOutcome(o, v.name, *s, true);
      }
      searches[k].second.push_back(s);
    }
  }
  det::bench::PrintSummary(o.task.metric, o.task.smaller_is_better, o.tolerance.value_or(o.task.tolerance), o.full,
                           o.seeds, random, searches);
  return 0;
}
