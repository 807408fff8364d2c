// bench/search_seeds: every searcher over many seeds on simulated learning
// curves (pure code: the real Searcher decides, a small event simulation
// trains), so that the figure of merit of search_efficiency -- batches
// trained until a search first reaches the best validation random search
// found, as a ratio to random's own -- can be measured on 8+ seeds in
// seconds, and each seed's ratio and their spread printed.
//
// Simulated training (the dynamics, luck and noise: bench/search_tasks.h, the
// task oracle bench/search_peers shares): a trial's model is a quality q (0 at the start); each
// batch moves it toward the plateau a(hparams) by 1/tau(hparams); a
// validation at length L reads q + N(0, 0.003 + 0.03 exp(-L/64)) (early
// validations are noisy). A PBT child copies its parent's q at the
// checkpoint (model and optimizer state) and continues with its own hparams.
// Tasks:
//  - lr (like the Fashion-MNIST example): x = log10(lr) in [-4, 0]; the
//    plateau a = 0.70 + 0.20 exp(-(x+2.5)^2/2) peaks near lr 0.003,
//    tau = 4 * 10^(-(x+1)/2) batches (lr 0.003: 22; 1e-4: 126): a higher
//    lr learns faster, so early rungs favour rates above the best one.
//  - rare: lr, weight decay (log10 in [-6, -1]) and width (int 16..512); only
//    a small corner of the space plateaus high (a = 0.62 + 0.30 g, g a
//    narrow Gaussian bump in the three).
//  - schedule (PBT only): a = 0.95 - 0.04 (x+4), tau = 20 * 10^(-0.8 (x+1)):
//    a low rate plateaus higher but learns slowly, so a decaying rate beats
//    every fixed one; the bench prints PBT's best final quality next to the
//    best fixed rate's (a scan of 400 rates at 256 batches, no noise).
// Budget per seed: 64 x 256 = 16384 batches on 4 slots: random search and
// tpe 64 trials x 256 batches; ASHA variants (max_rungs 3, divisor 4) as
// many trials as their brackets fit in the budget (preview); pbt population
// 64 x 256 batches, perturb_period 32, burn_in_period 128 (the default, half
// of max_length; pbt_b0: 0, Ray's default).
//
//   search_seeds [--seeds 1-12] [--task lr|rare|both] [--tolerance 0.005]
//                [--searchers asha_standard,asha_standard_d3,asha_aggressive,asha_conservative,
//                             asha_best,tpe,asha_tpe,asha_tpe_d3,pbt]
// (ASHA names: asha_ + standard/aggressive/conservative (mode), best
// (rung_metric: best), tpe (sampler: tpe); suffixes _d3 divisor 3, _r2/_r4
// max_rungs 2/4, _par bracket_order: parallel (Determined's), _all
// tpe_brackets: all; on tpe and asha_tpe _rf / _rf0 random_fraction 1/3 / 0,
// _mv / _uv multivariate: true / false (defaults: false under ASHA, true for tpe);
// on asha_tpe _mp / _mp0 model_promotions: true / false (default false);
// on pbt _b0 burn_in_period 0;
// the default is standard mode, divisor 4, max_rungs 3.)
//                [--seed-noise 0] [--slots 4] [--verbose]
// --seed-noise S: trials are deterministic, as real ones are, and each has a
// luck of sd S (an offset of its plateau drawn from its trial seed); with
// --tolerance 0 the goal is random's exact best, as search_efficiency's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/search_efficiency_results.h"
#include "bench/search_tasks.h"
#include "common/experiment_config.h"
#include "master/search/preview.h"
#include "master/search/searcher.h"

namespace {

using det::Hyperparameter;
using det::master::CloseTrialOp;
using det::master::CreateTrialOp;
using det::master::RequestId;
using det::master::Searcher;
using det::master::SearcherOp;
using det::master::ValidateAfterOp;

constexpr int64_t kMaxLength = 256;

using det::bench::Dynamics;
using det::bench::DynamicsOf;
using det::bench::Normal;

det::ExperimentConfig BaseConfig(const std::string& task) {
  det::ExperimentConfig c;
  c.hyperparameters["lr"] = Hyperparameter::Log(-4, 0);
  if (task == "rare") {
    c.hyperparameters["wd"] = Hyperparameter::Log(-6, -1);
    c.hyperparameters["width"] = Hyperparameter::Int(16, 512);
  }
  c.searcher.metric = "accuracy";
  c.searcher.smaller_is_better = false;
  c.searcher.max_length = det::Length{det::Length::Unit::kBatches, kMaxLength};
  c.searcher.max_rungs = 3;
  c.searcher.divisor = 4;
  return c;
}

det::ExperimentConfig SearcherConfigWithTrials(const std::string& task, const std::string& name, uint32_t seed,
                                               int64_t asha_trials);

// ASHA variants get as many trials as their brackets fit in random search's
// budget (64 x 256 batches), by the searcher's own preview (as
// search_efficiency does).
int64_t AshaTrialsForBudget(const std::string& task, const std::string& name) {
  static std::map<std::string, int64_t> cache;
  auto it = cache.find(task + "/" + name);
  if (it != cache.end()) return it->second;
  int64_t lo = 1, hi = 4096;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    auto p = det::master::PreviewSearch(SearcherConfigWithTrials(task, name, 1, mid), kMaxLength, 1);
    if (p.ok() && p->total_length <= 64 * kMaxLength) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  cache[task + "/" + name] = lo;
  return lo;
}

// The config of a named searcher variant.
det::ExperimentConfig SearcherConfig(const std::string& task, const std::string& name, uint32_t seed) {
  bool asha = name.rfind("asha", 0) == 0;
  return SearcherConfigWithTrials(task, name, seed, asha ? AshaTrialsForBudget(task, name) : 0);
}

det::ExperimentConfig SearcherConfigWithTrials(const std::string& task, const std::string& name, uint32_t seed,
                                               int64_t asha_trials) {
  det::ExperimentConfig c = BaseConfig(task);
  c.reproducibility.experiment_seed = seed;
  auto& s = c.searcher;
  s.max_trials = 64;
  if (name == "random") {
    s.name = det::SearcherName::kRandom;
    s.max_concurrent_trials = 4;
  } else if (name.rfind("tpe", 0) == 0) {
    s.name = det::SearcherName::kTpe;
    s.max_concurrent_trials = 4;
  } else if (name.rfind("pbt", 0) == 0) {
    s.name = det::SearcherName::kPbt;
    s.options.pbt.population_size = 64;  // 64 x 256 batches: random's budget
    s.options.pbt.perturb_period = 32;
    // The default burn-in: half of max_length (128); _b0: Ray's 0.
    if (name.find("_b0") != std::string::npos) s.options.pbt.burn_in_period = 0;
  } else {
    s.name = det::SearcherName::kAdaptiveAsha;
    s.max_trials = asha_trials;
    s.max_concurrent_trials = 4;  // the slots: proposals (tpe) learn from what finished
    s.mode = name.find("aggressive") != std::string::npos     ? det::AshaMode::kAggressive
             : name.find("conservative") != std::string::npos ? det::AshaMode::kConservative
                                                               : det::AshaMode::kStandard;
    if (name.find("best") != std::string::npos) s.options.rung_metric = det::RungMetric::kBest;
    if (name.find("tpe") != std::string::npos) s.options.sampler = det::HParamSampler::kTpe;
    // Suffixes: _d3 (divisor 3), _r2 / _r4 (max_rungs 2: a first rung of 64
    // batches, a grace period; 4: 4 batches), _par (bracket_order: parallel).
    if (name.find("_d3") != std::string::npos) s.divisor = 3;
    if (name.find("_par") != std::string::npos) s.options.bracket_order = det::BracketOrder::kParallel;
    if (name.find("_all") != std::string::npos) s.options.tpe_brackets = det::TpeBrackets::kAll;
    if (name.find("_r2") != std::string::npos) s.max_rungs = 2;
    if (name.find("_r4") != std::string::npos) s.max_rungs = 4;
    if (name.find("_mp0") != std::string::npos) s.options.model_promotions = false;
    else if (name.find("_mp") != std::string::npos) s.options.model_promotions = true;
  }
  // On tpe and asha_tpe: _rf / _rf0 (random_fraction 1/3 / 0).
  if (name.find("_rf0") != std::string::npos) s.options.tpe.random_fraction = 0;
  else if (name.find("_rf") != std::string::npos) s.options.tpe.random_fraction = 1.0 / 3;
  if (name.find("_mv") != std::string::npos) s.options.tpe.multivariate = true;   // _mv: joint estimators
  if (name.find("_uv") != std::string::npos) s.options.tpe.multivariate = false;  // _uv: one per hparam
  return c;
}

struct Trial {
  Dynamics d;
  double q = 0;
  double q_validated = 0;  // at its last validation (its checkpoint)
  int64_t trained = 0;
  int64_t trained_validated = 0;
  int64_t target = 0;
  bool pending = false;
  bool running = false;
  int64_t order = 0;
  uint64_t key = 0;  // seed_noise: trial seed and hparams, for the validation noise
};

struct Run {
  std::vector<std::pair<int64_t, double>> events;  // (batches so far, validation) in time order
  int64_t total = 0;
  double best_full = -1;  // best validation at max_length
  double best_quality = -1;  // best noiseless q at max_length
};

// `seed_noise` > 0 makes training deterministic, as real trials are: a
// trial's luck (its initialization and data order), an offset of its plateau
// with that sd, is drawn from its trial seed, and a validation's noise from
// its trial seed, hparams and length; the same trial then gives the same
// results in every search (random search's trials in ASHA's first bracket),
// and a PBT child keeps its parent's luck. 0: the noise is drawn afresh.
Run Simulate(const std::string& task, const det::ExperimentConfig& config, int slots, uint64_t sim_seed,
             double seed_noise) {
  Run run;
  absl::StatusOr<Searcher> created = Searcher::Create(config, kMaxLength);
  if (!created.ok()) {
    std::fprintf(stderr, "search_seeds: %s\n", created.status().ToString().c_str());
    std::exit(1);
  }
  Searcher& s = *created;
  std::mt19937_64 rng(sim_seed);
  std::map<RequestId, Trial> trials;
  std::deque<SearcherOp> queue;
  int64_t order = 0;
  auto push = [&](std::vector<SearcherOp> ops) {
    for (auto& op : ops) queue.push_back(std::move(op));
  };
  auto drain = [&] {
    while (!queue.empty()) {
      SearcherOp op = std::move(queue.front());
      queue.pop_front();
      if (auto* c = std::get_if<CreateTrialOp>(&op)) {
        Trial& t = trials[c->request_id];
        t.d = DynamicsOf(task, c->hparams);
        if (seed_noise > 0) {
          t.d.a += det::bench::TrialLuck(c->trial_seed, seed_noise);
          t.key = det::bench::NoiseKey(c->hparams, c->trial_seed);
        }
        if (c->parent != 0) {
          const Trial& p = trials[c->parent];
          t.q = t.q_validated = p.q_validated;
          t.trained = t.trained_validated = p.trained_validated;
        }
        push(s.TrialCreated(c->request_id));
      } else if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
        Trial& t = trials[v->request_id];
        t.target = v->length;
        t.pending = true;
        t.order = order++;
      } else if (auto* c = std::get_if<CloseTrialOp>(&op)) {
        trials[c->request_id].pending = false;
        push(s.TrialClosed(c->request_id));
      }
    }
  };
  push(s.InitialOperations());
  drain();
  for (int guard = 0; !s.shutdown() && guard < 1000000; ++guard) {
    int running = 0;
    for (auto& [id, t] : trials) running += t.running ? 1 : 0;
    std::vector<std::pair<int64_t, RequestId>> waiting;
    for (auto& [id, t] : trials) {
      if (t.pending && !t.running) waiting.emplace_back(t.order, id);
    }
    std::sort(waiting.begin(), waiting.end());
    for (size_t i = 0; i < waiting.size() && running < slots; ++i, ++running) trials[waiting[i].second].running = true;
    // The running trial closest to its target validates next; the others
    // train as many batches meanwhile.
    int64_t step = -1;
    for (auto& [id, t] : trials) {
      if (t.running) step = step < 0 ? t.target - t.trained : std::min(step, t.target - t.trained);
    }
    if (step < 0) {
      std::fprintf(stderr, "search_seeds: %s stalled\n", det::SearcherNameToString(config.searcher.name).data());
      break;
    }
    std::vector<RequestId> done;
    for (auto& [id, t] : trials) {
      if (!t.running) continue;
      for (int64_t b = 0; b < step; ++b) t.q += (t.d.a - t.q) / t.d.tau;
      t.trained += step;
      run.total += step;
      if (t.trained >= t.target) done.push_back(id);
    }
    for (RequestId id : done) {
      Trial& t = trials[id];
      t.running = false;
      t.pending = false;
      double noise = seed_noise > 0 ? det::bench::ValidationNoise(t.key, t.trained)
                                    : det::bench::ValidationNoiseSd(t.trained) * Normal(rng);
      double acc = t.q + noise;
      t.q_validated = t.q;
      t.trained_validated = t.trained;
      run.events.emplace_back(run.total, acc);
      if (t.trained >= kMaxLength) run.best_full = std::max(run.best_full, acc);
      if (t.trained >= kMaxLength) run.best_quality = std::max(run.best_quality, t.q);
      push(s.ValidationCompleted(id, acc, t.trained));
      drain();
    }
  }
  return run;
}

// Batches trained when `run` first validated at >= goal; -1: never.
int64_t BatchesToReach(const Run& run, double goal) {
  for (const auto& [batches, acc] : run.events) {
    if (acc >= goal) return batches;
  }
  return -1;
}

struct Args {
  std::vector<uint32_t> seeds;
  std::vector<std::string> tasks = {"lr", "rare"};
  std::vector<std::string> searchers = {"asha_standard", "asha_standard_d3", "asha_aggressive", "asha_conservative",
                                        "asha_best",     "tpe",              "asha_tpe",        "asha_tpe_d3",
                                        "pbt"};
  double tolerance = 0.005;
  double seed_noise = 0;
  int slots = 4;
  bool verbose = false;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (uint32_t s = 1; s <= 12; ++s) a.seeds.push_back(s);
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    std::string v = i + 1 < argc ? argv[i + 1] : "";
    if (f == "--seeds") {
      a.seeds.clear();
      for (absl::string_view part : absl::StrSplit(v, ',')) {
        std::vector<std::string> range = absl::StrSplit(part, '-');
        uint32_t lo = 0, hi = 0;
        if (!absl::SimpleAtoi(range[0], &lo)) std::exit(2);
        hi = lo;
        if (range.size() > 1 && !absl::SimpleAtoi(range[1], &hi)) std::exit(2);
        for (uint32_t s = lo; s <= hi && s - lo < 1000; ++s) a.seeds.push_back(s);
      }
      ++i;
    } else if (f == "--task") {
      a.tasks = v == "both" ? std::vector<std::string>{"lr", "rare"} : std::vector<std::string>{v};
      ++i;
    } else if (f == "--searchers") {
      a.searchers = absl::StrSplit(v, ',');
      ++i;
    } else if (f == "--tolerance") {
      a.tolerance = std::atof(v.c_str());
      ++i;
    } else if (f == "--seed-noise") {
      a.seed_noise = std::max(0.0, std::atof(v.c_str()));
      ++i;
    } else if (f == "--slots") {
      a.slots = std::max(1, std::atoi(v.c_str()));
      ++i;
    } else if (f == "--verbose") {
      a.verbose = true;
    } else {
      std::fprintf(stderr, "usage: search_seeds [--seeds 1-12] [--task lr|rare|both] [--searchers a,b] "
                           "[--tolerance 0.005] [--seed-noise 0] [--slots 4] [--verbose]\n");
      std::exit(2);
    }
  }
  return a;
}

void RunTask(const Args& a, const std::string& task) {
  std::printf("task %s: random search 64 x %lld batches on %d slots; goal: random's best - %.3f; seed noise %.3f\n",
              task.c_str(), static_cast<long long>(kMaxLength), a.slots, a.tolerance, a.seed_noise);
  for (const auto& s : a.searchers) {
    if (s.rfind("asha", 0) == 0) {
      std::printf("  %s: %lld trials\n", s.c_str(), static_cast<long long>(AshaTrialsForBudget(task, s)));
    }
  }
  std::map<std::string, std::vector<double>> ratios;
  std::map<std::string, int64_t> sums, nevers;
  int64_t random_sum = 0;
  std::string header = "seed  random_best  random_batches";
  for (const auto& s : a.searchers) header += absl::StrCat("  ", s);
  std::printf("%s\n", header.c_str());
  for (uint32_t seed : a.seeds) {
    Run random = Simulate(task, SearcherConfig(task, "random", seed), a.slots, 1000 + seed, a.seed_noise);
    double goal = random.best_full - a.tolerance;
    int64_t rb = BatchesToReach(random, goal);
    random_sum += rb;
    std::string line = absl::StrFormat("%4u  %11.4f  %14lld", seed, random.best_full, static_cast<long long>(rb));
    for (const auto& name : a.searchers) {
      Run r = Simulate(task, SearcherConfig(task, name, seed), a.slots, 1000 + seed, a.seed_noise);
      int64_t b = BatchesToReach(r, goal);
      if (b < 0) {
        ++nevers[name];
        b = r.total;  // a lower bound: never reached in its whole budget
      }
      sums[name] += b;
      ratios[name].push_back(static_cast<double>(b) / static_cast<double>(rb));
      line += absl::StrFormat("  %s%.3f", BatchesToReach(r, goal) < 0 ? "never>" : "", ratios[name].back());
      if (a.verbose) line += absl::StrFormat("(%lld/%lld)", static_cast<long long>(b), static_cast<long long>(r.total));
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf("summed-batches ratio (sum of batches to reach / random's sum), per-seed spread:\n");
  for (const auto& name : a.searchers) {
    det::bench::PrintSpreadLine(name, sums[name], random_sum, ratios[name], static_cast<int>(nevers[name]), 0, false);
  }
}

// PBT on the schedule task against the best fixed learning rate.
void RunSchedule(const Args& a) {
  double best_fixed = 0, best_x = 0;
  for (int i = 0; i <= 400; ++i) {
    double x = -4 + 4.0 * i / 400;
    Dynamics d = DynamicsOf("schedule", nlohmann::json{{"lr", std::pow(10.0, x)}});
    double q = 0;
    for (int64_t b = 0; b < kMaxLength; ++b) q += (d.a - q) / d.tau;
    if (q > best_fixed) {
      best_fixed = q;
      best_x = x;
    }
  }
  std::printf("task schedule: best fixed lr 10^%.2f reaches %.4f at %lld batches; pbt (64 x %lld, perturb 32):\n",
              best_x, best_fixed, static_cast<long long>(kMaxLength), static_cast<long long>(kMaxLength));
  // Every PBT searcher asked for (pbt, pbt_b0), else pbt.
  std::vector<std::string> pbts;
  for (const auto& name : a.searchers) {
    if (name.rfind("pbt", 0) == 0) pbts.push_back(name);
  }
  if (pbts.empty()) pbts.push_back("pbt");
  for (const auto& name : pbts) {
    int wins = 0;
    std::string line;
    for (uint32_t seed : a.seeds) {
      Run r = Simulate("schedule", SearcherConfig("schedule", name, seed), a.slots, 1000 + seed, a.seed_noise);
      wins += r.best_quality > best_fixed ? 1 : 0;
      line += absl::StrFormat(" %u:%.4f", seed, r.best_quality);
    }
    std::printf("  %s best final quality per seed:%s\n  %s beats the best fixed lr on %d of %zu seeds\n", name.c_str(),
                line.c_str(), name.c_str(), wins, a.seeds.size());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Args a = Parse(argc, argv);
  for (const std::string& task : a.tasks) RunTask(a, task);
  RunSchedule(a);
  return 0;
}
