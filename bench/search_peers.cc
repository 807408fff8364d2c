// bench/search_peers: det-cpp's searchers and Optuna 3.1's side by side on
// fixed-target tasks, the way HPO benchmarks measure search.
//
// Per task, a FIXED target (a property of the task: the 98th percentile of
// final validation quality over 10,000 random configurations, or over the
// whole table of a tabular task). Every searcher, on every seed, runs in the
// same event simulation (bench/search_peers_sim.h: the same task oracle,
// bench/search_tasks.h, the same budget of 16,384 batches and the same
// simulated workers); the bench records the batches until the search first
// validates at or above the target ("time to target"; a miss counts the whole
// budget and is reported as a miss) and the anytime curve's best at 1/4, 1/2
// and 1x of the budget, and prints per task: median and mean time to target
// with percentile-bootstrap 90% intervals over seeds, the seeds reaching the
// target and the median bests, then the goals, each met or not.
//
//   search_peers [--tasks lr,rare,fmnist] [--seeds 1-32] [--check-seeds 33-64]
//                [--searchers random,adaptive_asha,tpe,asha_tpe,pbt,optuna_random,
//                             optuna_tpe,optuna_tpe_hyperband,optuna_tpe_sha]
//                [--slots 4] [--table bench/results/search_table_fmnist.json]
//                [--results FILE] [--jobs N] [--python /usr/bin/python3]
//                [--optuna-script bench/search_peers_optuna.py]
// A det-cpp name may carry suffixes, each one change from its base's
// configuration (SplitDetName below): _par, _af, _cons, _aggr, _d3, _best, _all,
// _mv, _uv, _rf0, _b0, _g10; e.g. adaptive_asha_par, asha_tpe_all_par.
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/ascii.h"
#include "bench/search_peers_sim.h"
#include "bench/search_peers_stats.h"
#include "bench/search_tasks.h"
#include "master/search/preview.h"

#ifndef DET_SOURCE_DIR
#define DET_SOURCE_DIR "."
#endif

namespace det {
namespace bench {
namespace {

const std::vector<std::string> kDetSearchers = {"random", "adaptive_asha", "tpe", "asha_tpe", "pbt"};
const std::vector<std::string> kOptunaSearchers = {"optuna_random", "optuna_tpe", "optuna_tpe_hyperband",
                                                   "optuna_tpe_sha"};
constexpr int64_t kMaxSeeds = 1000;

bool IsOptuna(const std::string& name) { return name.rfind("optuna_", 0) == 0; }
bool SplitDetName(const std::string& name, std::string* base, std::vector<std::string>* suffixes);

struct Args {
  std::vector<std::string> tasks = {"lr", "rare", "fmnist"};
  std::vector<uint32_t> seeds, check_seeds;
  std::string seeds_text = "1-32", check_text = "33-64";
  std::vector<std::string> searchers;
  int slots = 4;
  std::string table = "bench/results/search_table_fmnist.json";
  std::string results;
  int jobs = 1;
  std::string python = "/usr/bin/python3";
  std::string script = DET_SOURCE_DIR "/bench/search_peers_optuna.py";
};

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(stderr,
               "search_peers: %s\nusage: search_peers [--tasks lr,rare,fmnist] [--seeds 1-32] "
               "[--check-seeds 33-64|none] [--searchers %s,%s; det-cpp names take suffixes _par, _af, _cons, _aggr, _d3, "
               "_best, _all, _mv, _uv, _rf0, _b0, _g10] [--slots 4] [--table FILE] [--results FILE] "
               "[--jobs N] [--python /usr/bin/python3] [--optuna-script FILE]\n",
               error.c_str(), absl::StrJoin(kDetSearchers, ",").c_str(), absl::StrJoin(kOptunaSearchers, ",").c_str());
  std::exit(2);
}

// "1-32" or "1,3,5-7": at most kMaxSeeds seeds.
std::vector<uint32_t> ParseSeeds(const std::string& flag, const std::string& v) {
  std::vector<uint32_t> seeds;
  if (v == "none") return seeds;
  for (absl::string_view part : absl::StrSplit(v, ',')) {
    std::vector<std::string> range = absl::StrSplit(part, '-');
    uint32_t lo = 0, hi = 0;
    if (range.size() > 2 || !absl::SimpleAtoi(range[0], &lo) ||
        (range.size() == 2 && !absl::SimpleAtoi(range[1], &hi)) || (range.size() == 2 && hi < lo)) {
      Usage(absl::StrCat(flag, " '", v, "': expected seeds like 1-32 or 1,3,5-7"));
    }
    if (range.size() == 1) hi = lo;
    for (uint64_t s = lo; s <= hi; ++s) {
      if (static_cast<int64_t>(seeds.size()) >= kMaxSeeds) Usage(absl::StrCat(flag, ": at most ", kMaxSeeds, " seeds"));
      seeds.push_back(static_cast<uint32_t>(s));
    }
  }
  if (seeds.empty()) Usage(absl::StrCat(flag, " '", v, "': no seeds"));
  return seeds;
}

int ParseInt(const std::string& flag, const std::string& v, int lo, int hi) {
  int x = 0;
  if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
    Usage(absl::StrCat(flag, " '", v, "': expected an integer in [", lo, ", ", hi, "]"));
  }
  return x;
}

Args Parse(int argc, char** argv) {
  Args a;
  for (const auto& s : kDetSearchers) a.searchers.push_back(s);
  for (const auto& s : kOptunaSearchers) a.searchers.push_back(s);
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (i + 1 >= argc) Usage(absl::StrCat("flag ", f, " needs a value"));
    std::string v = argv[++i];
    if (v.size() > 4096) Usage(absl::StrCat(f, ": a value longer than 4096 characters"));
    if (f == "--tasks") {
      a.tasks = absl::StrSplit(v, ',');
      for (const auto& t : a.tasks) {
        if (t != "lr" && t != "rare" && t != "fmnist") Usage(absl::StrCat("--tasks: unknown task '", t, "' (lr, rare, fmnist)"));
      }
    } else if (f == "--seeds") {
      a.seeds_text = v;
    } else if (f == "--check-seeds") {
      a.check_text = v;
    } else if (f == "--searchers") {
      a.searchers = absl::StrSplit(v, ',');
      for (const auto& s : a.searchers) {
        if (std::count(a.searchers.begin(), a.searchers.end(), s) > 1) {
          Usage(absl::StrCat("--searchers: '", s, "' is named twice"));
        }
        std::string base;
        std::vector<std::string> suffixes;
        bool known = (!IsOptuna(s) && SplitDetName(s, &base, &suffixes)) ||
                     std::find(kOptunaSearchers.begin(), kOptunaSearchers.end(), s) != kOptunaSearchers.end();
        if (!known) Usage(absl::StrCat("--searchers: unknown searcher '", s, "'"));
      }
    } else if (f == "--slots") {
      a.slots = ParseInt(f, v, 1, 256);
    } else if (f == "--jobs") {
      a.jobs = ParseInt(f, v, 1, 64);
    } else if (f == "--table") {
      a.table = v;
    } else if (f == "--results") {
      a.results = v;
    } else if (f == "--python") {
      a.python = v;
    } else if (f == "--optuna-script") {
      a.script = v;
    } else {
      Usage(absl::StrCat("unknown flag ", f));
    }
  }
  a.seeds = ParseSeeds("--seeds", a.seeds_text);
  a.check_seeds = ParseSeeds("--check-seeds", a.check_text);
  for (uint32_t s : a.check_seeds) {
    if (std::find(a.seeds.begin(), a.seeds.end(), s) != a.seeds.end()) {
      Usage(absl::StrCat("--check-seeds: seed ", s, " is also in --seeds (the check set must be disjoint)"));
    }
  }
  return a;
}

// A det-cpp searcher name: a base (random, adaptive_asha, tpe, asha_tpe, pbt)
// and optional suffixes, each one change from the base's configuration:
// _par / _af (bracket_order: parallel / aggressive_first), _cons / _aggr (mode conservative /
// aggressive), _d3 (divisor 3), _best (rung_metric: best), _all (tpe_brackets:
// all), _mv / _uv (multivariate true / false), _rf0 (random_fraction 0),
// _b0 (pbt burn_in_period 0), _g10 (TPE gamma 0.10). Splits `name` into its base and suffixes;
// false for an unknown base or suffix.
bool SplitDetName(const std::string& name, std::string* base, std::vector<std::string>* suffixes) {
  static const std::vector<std::string> kSuffixes = {"_par", "_af", "_cons", "_aggr", "_d3", "_best", "_g10",
                                                     "_all", "_mv",   "_uv",   "_rf0", "_b0"};
  std::string rest = name;
  suffixes->clear();
  for (bool more = true; more;) {
    more = false;
    for (const auto& x : kSuffixes) {
      if (rest.size() > x.size() && rest.compare(rest.size() - x.size(), x.size(), x) == 0) {
        suffixes->insert(suffixes->begin(), x);
        rest.resize(rest.size() - x.size());
        more = true;
      }
    }
  }
  *base = rest;
  return std::find(kDetSearchers.begin(), kDetSearchers.end(), rest) != kDetSearchers.end();
}

void ApplySuffix(const std::string& x, det::SearcherConfig& s) {
  if (x == "_par") s.options.bracket_order = det::BracketOrder::kParallel;
  if (x == "_af") s.options.bracket_order = det::BracketOrder::kAggressiveFirst;
  if (x == "_cons") s.mode = AshaMode::kConservative;
  if (x == "_aggr") s.mode = AshaMode::kAggressive;
  if (x == "_d3") s.divisor = 3;
  if (x == "_best") s.options.rung_metric = det::RungMetric::kBest;
  if (x == "_all") s.options.tpe_brackets = det::TpeBrackets::kAll;
  if (x == "_mv") s.options.tpe.multivariate = true;
  if (x == "_uv") s.options.tpe.multivariate = false;
  if (x == "_rf0") s.options.tpe.random_fraction = 0;
  if (x == "_b0") s.options.pbt.burn_in_period = 0;
  if (x == "_g10") s.options.tpe.gamma = 0.10;
}

// Whether `name` is a det-cpp adaptive_asha searcher (asha_tpe included).
bool IsAsha(const std::string& name) {
  std::string base;
  std::vector<std::string> suffixes;
  return !IsOptuna(name) && SplitDetName(name, &base, &suffixes) && (base == "adaptive_asha" || base == "asha_tpe");
}

// det-cpp's config of `name` on `task`; asha_trials: for the ASHA variants.
ExperimentConfig DetConfig(const SearchTask& task, const std::string& name, uint32_t seed, int slots,
                           int64_t asha_trials) {
  ExperimentConfig c = task.BaseConfig();
  c.reproducibility.experiment_seed = seed;
  auto& s = c.searcher;
  s.max_trials = 64;
  s.max_concurrent_trials = slots;
  s.max_rungs = 3;  // rungs at 16, 64, 256 batches: the lengths a table holds
  s.divisor = 4;
  std::string base;
  std::vector<std::string> suffixes;
  SplitDetName(name, &base, &suffixes);
  if (base == "random") {
    s.name = SearcherName::kRandom;
  } else if (base == "tpe") {
    s.name = SearcherName::kTpe;
  } else if (base == "pbt") {
    s.name = SearcherName::kPbt;
    s.max_concurrent_trials = 0;
    s.options.pbt.population_size = 64;
    s.options.pbt.perturb_period = 32;
  } else {
    s.name = SearcherName::kAdaptiveAsha;
    s.mode = AshaMode::kStandard;
    s.max_trials = asha_trials;
    if (base == "asha_tpe") s.options.sampler = HParamSampler::kTpe;
  }
  for (const auto& x : suffixes) ApplySuffix(x, s);
  return c;
}

// As many trials as the ASHA variant's brackets fit in `budget` (its preview).
int64_t AshaTrialsForBudget(const SearchTask& task, const std::string& name, int slots, int64_t budget) {
  int64_t lo = 1, hi = 4096;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    auto p = master::PreviewSearch(DetConfig(task, name, 1, slots, mid), kTaskMaxLength, 1);
    if (p.ok() && p->total_length <= budget) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

std::string DescribeBase(const std::string& name, int64_t asha_trials);

std::string Describe(const std::string& name, int64_t asha_trials) {
  if (IsOptuna(name)) return DescribeBase(name, asha_trials);
  std::string base;
  std::vector<std::string> suffixes;
  SplitDetName(name, &base, &suffixes);
  std::string d = DescribeBase(base, asha_trials);
  if (!suffixes.empty()) absl::StrAppend(&d, "; with ", absl::StrJoin(suffixes, ", "));
  return d;
}

std::string DescribeBase(const std::string& name, int64_t asha_trials) {
  if (name == "random") return "random: 64 trials";
  if (name == "tpe") return "tpe: 64 trials, det-cpp's defaults";
  if (name == "pbt") return "pbt: population 64, perturb_period 32, default burn-in";
  if (name == "adaptive_asha" || name == "asha_tpe") {
    return absl::StrCat(name == "asha_tpe" ? "adaptive_asha + sampler: tpe" : "adaptive_asha",
                        ": mode standard, divisor 4, max_rungs 3, ", asha_trials, " trials (fit the budget)");
  }
  if (name == "optuna_random") return "RandomSampler(seed): 64 trials";
  if (name == "optuna_tpe") return "TPESampler(seed), Optuna's defaults: 64 trials";
  if (name == "optuna_tpe_hyperband") {
    return "TPESampler + HyperbandPruner(min_resource=16, max_resource=256, reduction_factor=4): trials until the "
           "budget";
  }
  return "TPESampler + SuccessiveHalvingPruner(min_resource=16, reduction_factor=4): trials until the budget";
}

OptunaOptions OptunaFor(const Args& a, const std::string& name) {
  OptunaOptions o;
  o.python = a.python;
  o.script = a.script;
  o.sampler = name == "optuna_random" ? "random" : "tpe";
  o.pruner = name == "optuna_tpe_hyperband" ? "hyperband" : name == "optuna_tpe_sha" ? "sha" : "none";
  o.max_trials = o.pruner == "none" ? 64 : 0;
  return o;
}

// One search to run and what it gave.
struct Job {
  size_t task = 0;
  std::string searcher;
  int set = 0;  // 0: --seeds, 1: --check-seeds
  uint32_t seed = 0;
  SeedOutcome outcome;
  int64_t trials = 0;
  double seconds = 0;
};

struct TaskRun {
  std::unique_ptr<SearchTask> task;
  std::map<std::string, int64_t> asha_trials;
};

absl::Status RunJob(const Args& a, const TaskRun& t, const SimOptions& sim, Job& job) {
  timespec t0{}, t1{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  absl::StatusOr<SearchRun> run;
  if (IsOptuna(job.searcher)) {
    run = RunOptunaSearch(*t.task, OptunaFor(a, job.searcher), job.seed, sim);
  } else {
    auto it = t.asha_trials.find(job.searcher);
    run = RunDetSearch(*t.task, DetConfig(*t.task, job.searcher, job.seed, a.slots,
                                          it == t.asha_trials.end() ? 0 : it->second),
                       sim);
  }
  if (!run.ok()) {
    return absl::Status(run.status().code(), absl::StrCat("task ", t.task->name(), ", ", job.searcher, ", seed ",
                                                          job.seed, ": ", run.status().message()));
  }
  job.outcome = Summarize(run->events, run->total, t.task->Target(), sim.budget);
  job.trials = run->trials;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  job.seconds = static_cast<double>(t1.tv_sec - t0.tv_sec) + 1e-9 * static_cast<double>(t1.tv_nsec - t0.tv_nsec);
  return absl::OkStatus();
}

// Runs every job on `a.jobs` threads; the first error stops the bench.
void RunJobs(const Args& a, const std::vector<TaskRun>& tasks, const SimOptions& sim, std::vector<Job>& jobs) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::string error;
  auto worker = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      absl::Status st = RunJob(a, tasks[jobs[i].task], sim, jobs[i]);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (error.empty()) error = std::string(st.message());
        next = jobs.size();
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < a.jobs; ++i) threads.emplace_back(worker);
  for (auto& th : threads) th.join();
  if (!error.empty()) {
    std::fprintf(stderr, "search_peers: %s\n", error.c_str());
    std::exit(1);
  }
}

// The figures of one searcher on one seed set.
struct Figures {
  std::vector<double> times;
  int reached = 0;
  int n = 0;
  double median = 0, mean = 0;
  Interval median_ci, mean_ci;
  double best[3] = {0, 0, 0};
  double seconds = 0;
};

Figures FiguresOf(const std::vector<const Job*>& jobs) {
  Figures f;
  std::vector<double> best[3];
  for (const Job* j : jobs) {
    f.times.push_back(static_cast<double>(j->outcome.time_to_target));
    f.reached += j->outcome.reached ? 1 : 0;
    for (int k = 0; k < 3; ++k) best[k].push_back(j->outcome.best_at[k]);
    f.seconds += j->seconds;
  }
  f.n = static_cast<int>(jobs.size());
  if (f.n == 0) return f;
  f.median = Median(f.times);
  f.mean = Mean(f.times);
  f.median_ci = BootstrapInterval(f.times, MedianOf);
  f.mean_ci = BootstrapInterval(f.times, MeanOf);
  for (int k = 0; k < 3; ++k) f.best[k] = Median(best[k]);
  f.seconds /= f.n;
  return f;
}

std::string Reach(const Figures& f) {
  std::string s = absl::StrFormat("%d/%d", f.reached, f.n);
  if (f.reached < f.n) absl::StrAppendFormat(&s, " (not reached: %d seeds)", f.n - f.reached);
  return s;
}

std::string MetText(bool met) { return met ? "met" : "not met"; }

bool IsPbt(const std::string& name) {
  std::string base;
  std::vector<std::string> suffixes;
  return !IsOptuna(name) && SplitDetName(name, &base, &suffixes) && base == "pbt";
}

// Goal 2 on one seed set, for det-cpp's and Optuna's best as chosen on the
// first set.
void PrintGoal2(const char* which, const std::string& det, const std::string& opt,
                const std::map<std::string, Figures>& set, int64_t budget) {
  const Figures& d = set.at(det);
  const Figures& o = set.at(opt);
  double ratio = d.median / o.median;
  std::printf("  goal 2 (det-cpp's best median <= Optuna's best, aim 0.8x, reaching on as many seeds), %s: %s %.0f / "
              "%s %.0f = %.3f (aim 0.8: %s), reaching %d vs %d: %s%s\n",
              which, det.c_str(), d.median, opt.c_str(), o.median, ratio, ratio <= 0.8 ? "met" : "not met",
              d.reached, o.reached, MetText(ratio <= 1.0 && d.reached >= o.reached).c_str(),
              o.median >= static_cast<double>(budget) ? " (censored: Optuna's best misses on half the seeds or more)"
                                                      : "");
}

void PrintGoals(const Args& a, const std::map<std::string, Figures>& main_set,
                const std::map<std::string, Figures>& check_set, bool table, int64_t budget) {
  std::printf("goals:\n");
  auto r = main_set.find("random"), asha = main_set.find("adaptive_asha");
  if (r != main_set.end() && asha != main_set.end()) {
    double ratio = asha->second.median / r->second.median;
    bool reach90 = asha->second.reached >= 0.9 * asha->second.n;
    std::printf("  goal 1 (adaptive_asha's median <= 1/3 of random's, reaching on >= 90%% of seeds): %.0f / %.0f = "
                "%.3f, reaching %d/%d: %s\n",
                asha->second.median, r->second.median, ratio, asha->second.reached, asha->second.n,
                MetText(ratio <= 1.0 / 3 && reach90).c_str());
  } else {
    std::printf("  goal 1 (adaptive_asha vs random): not evaluated (run both random and adaptive_asha)\n");
  }
  // Optuna's best: the lowest median (ties: more seeds reaching). det-cpp's
  // best: the lowest median among its searchers that reach the target on at
  // least as many seeds as Optuna's best, else the lowest median. Both are
  // chosen on the first seed set, then judged there and, with
  // --check-seeds, on the second (free of the choice's selection effect).
  // On a table pbt is left out (its children replay other grid points'
  // curves: an approximation).
  const std::string* best_det = nullptr;
  const std::string* best_opt = nullptr;
  auto better = [&](const std::string& name, const std::string* best) {
    const Figures& f = main_set.at(name);
    return best == nullptr || f.median < main_set.at(*best).median ||
           (f.median == main_set.at(*best).median && f.reached > main_set.at(*best).reached);
  };
  for (const auto& [name, f] : main_set) {
    if (IsOptuna(name) && better(name, best_opt)) best_opt = &name;
  }
  for (int pass = 0; pass < 2 && best_det == nullptr; ++pass) {
    for (const auto& [name, f] : main_set) {
      if (IsOptuna(name) || (table && IsPbt(name))) continue;
      if (pass == 0 && best_opt != nullptr && f.reached < main_set.at(*best_opt).reached) continue;
      if (better(name, best_det)) best_det = &name;
    }
  }
  if (best_det != nullptr && best_opt != nullptr) {
    PrintGoal2("seeds", *best_det, *best_opt, main_set, budget);
    if (!check_set.empty()) PrintGoal2("check seeds", *best_det, *best_opt, check_set, budget);
    if (table) std::printf("  (goal 2 leaves pbt out on a table)\n");
  } else {
    std::printf("  goal 2 (det-cpp vs Optuna): not evaluated (run searchers of both sides)\n");
  }
  if (check_set.empty()) {
    std::printf("  goal 3 (reproducibility): not evaluated (no --check-seeds)\n");
    return;
  }
  std::printf("  goal 3 (reproducibility: the median on --check-seeds %s falls in the interval of --seeds %s; "
              "beside it, the 90%% bootstrap interval of the difference of the two medians):\n",
              a.check_text.c_str(), a.seeds_text.c_str());
  int met = 0, agree = 0;
  for (const auto& [name, f] : main_set) {
    const Figures& c = check_set.at(name);
    bool in = c.median >= f.median_ci.lo && c.median <= f.median_ci.hi;
    Interval d = BootstrapDifference(f.times, c.times, MedianOf);
    bool zero_inside = d.lo <= 0 && d.hi >= 0;
    met += in ? 1 : 0;
    agree += zero_inside ? 1 : 0;
    std::printf("    %-22s %.0f in [%.0f, %.0f]: %-8s difference %.0f [%.0f, %.0f]: %s\n", name.c_str(), c.median,
                f.median_ci.lo, f.median_ci.hi, MetText(in).c_str(), c.median - f.median, d.lo, d.hi,
                zero_inside ? "the sets agree" : "the sets differ");
  }
  std::printf("    %d of %zu searchers: %s; %d of %zu agree by the difference\n", met, main_set.size(),
              MetText(met == static_cast<int>(main_set.size())).c_str(), agree, main_set.size());
  std::printf("    (for two seed sets drawn from the same distribution, the second median falls in the first's 90%% "
              "interval only about 75%% of the time: the difference of two medians spreads sqrt(2) times as wide)\n");
}

void PrintTask(const Args& a, const TaskRun& t, size_t index, const SimOptions& sim, const std::vector<Job>& jobs) {
  std::printf("\n== task %s\ntarget %.4f: %s\n", t.task->name().c_str(), t.task->Target(), t.task->TargetHow().c_str());
  std::printf("budget %lld batches per search on %d simulated workers; validations every %lld batches; seeds %s "
              "(%zu)\n",
              static_cast<long long>(sim.budget), a.slots, static_cast<long long>(sim.period), a.seeds_text.c_str(),
              a.seeds.size());
  if (t.task->name() != "lr" && t.task->name() != "rare" &&
      std::any_of(a.searchers.begin(), a.searchers.end(), IsPbt)) {
    std::printf("caveat: pbt on a table: a child replays its own grid point's recorded curve from its parent's "
                "length on (a table cannot change hparams mid-run), so its figures are approximate and goal 2 "
                "leaves it out\n");
  }
  std::map<std::string, Figures> sets[2];
  for (const std::string& name : a.searchers) {
    for (int set = 0; set < 2; ++set) {
      std::vector<const Job*> mine;
      for (const Job& j : jobs) {
        if (j.task == index && j.searcher == name && j.set == set) mine.push_back(&j);
      }
      if (!mine.empty()) sets[set][name] = FiguresOf(mine);
    }
  }
  std::printf("%-22s %-8s %-28s %-30s %-28s %s\n", "searcher", "side", "median to target [90% CI]",
              "mean to target [90% CI]", "seeds reaching", "median best at 1/4, 1/2, 1x budget");
  for (const std::string& name : a.searchers) {
    const Figures& f = sets[0].at(name);
    std::printf("%-22s %-8s %-28s %-30s %-28s %.4f %.4f %.4f\n", name.c_str(), IsOptuna(name) ? "Optuna" : "det-cpp",
                absl::StrFormat("%.0f [%.0f, %.0f]", f.median, f.median_ci.lo, f.median_ci.hi).c_str(),
                absl::StrFormat("%.0f [%.0f, %.0f]", f.mean, f.mean_ci.lo, f.mean_ci.hi).c_str(), Reach(f).c_str(),
                f.best[0], f.best[1], f.best[2]);
  }
  std::printf("searchers (time to target: batches the whole search trained until its first validation >= target; a "
              "miss counts the whole budget):\n");
  for (const std::string& name : a.searchers) {
    auto it = t.asha_trials.find(name);
    std::printf("  %-22s %s (%.2f s a seed)\n", name.c_str(),
                Describe(name, it == t.asha_trials.end() ? 0 : it->second).c_str(), sets[0].at(name).seconds);
  }
  PrintGoals(a, sets[0], sets[1], t.task->name() == "fmnist", sim.budget);
}

void WriteResults(const Args& a, const std::vector<TaskRun>& tasks, const std::vector<Job>& jobs) {
  std::ofstream out(a.results);
  for (const Job& j : jobs) {
    nlohmann::json line = {{"task", tasks[j.task].task->name()},
                           {"searcher", j.searcher},
                           {"side", IsOptuna(j.searcher) ? "Optuna" : "det-cpp"},
                           {"seed_set", j.set == 0 ? "seeds" : "check_seeds"},
                           {"seed", j.seed},
                           {"target", tasks[j.task].task->Target()},
                           {"time_to_target", j.outcome.time_to_target},
                           {"reached", j.outcome.reached},
                           {"total", j.outcome.total},
                           {"trials", j.trials}};
    const char* keys[3] = {"best_quarter", "best_half", "best_full"};
    for (int k = 0; k < 3; ++k) {
      line[keys[k]] = std::isfinite(j.outcome.best_at[k]) ? nlohmann::json(j.outcome.best_at[k]) : nlohmann::json();
    }
    out << line.dump() << "\n";
  }
  if (!out.good()) {
    std::fprintf(stderr, "search_peers: --results '%s': cannot write it\n", a.results.c_str());
    std::exit(1);
  }
}

void PrintHeader(int argc, char** argv, const Args& a) {
  utsname u{};
  uname(&u);
  char date[64];
  time_t now = time(nullptr);
  strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
  std::vector<std::string> args(argv, argv + argc);
  std::printf("search_peers on %s (%ld cores), %s\ncommand: %s\n", u.nodename, sysconf(_SC_NPROCESSORS_ONLN), date,
              absl::StrJoin(args, " ").c_str());
  bool optuna = std::any_of(a.searchers.begin(), a.searchers.end(), IsOptuna);
  if (!optuna) return;
  // The version the figures were measured against (Optuna 3.1 is Debian's).
  std::string version = "unknown";
  if (a.python.find_first_of("'\"\\$`") == std::string::npos) {
    std::string cmd = "'" + a.python + "' -c 'import optuna; print(optuna.__version__)' 2>/dev/null";
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char buf[64] = {};
      if (fgets(buf, sizeof buf, f) != nullptr) version = std::string(absl::StripAsciiWhitespace(buf));
      pclose(f);
    }
  }
  std::printf("Optuna side: %s %s (optuna %s)\n", a.python.c_str(), a.script.c_str(), version.c_str());
}

}  // namespace
}  // namespace bench
}  // namespace det

int main(int argc, char** argv) {
  using namespace det::bench;
  std::signal(SIGPIPE, SIG_IGN);  // a dead Optuna server is an error, not a signal
  Args a = Parse(argc, argv);
  SimOptions sim;
  sim.slots = a.slots;
  std::vector<TaskRun> tasks;
  for (const std::string& name : a.tasks) {
    auto t = name == "fmnist" ? LoadTableTask(a.table) : MakeSimulatedTask(name);
    if (!t.ok()) {
      std::fprintf(stderr, "search_peers: %s%s\n", std::string(t.status().message()).c_str(),
                   name == "fmnist" ? " (--table names the fmnist table)" : "");
      return 1;
    }
    TaskRun run;
    run.task = std::move(*t);
    for (const std::string& s : a.searchers) {
      if (IsAsha(s)) run.asha_trials[s] = AshaTrialsForBudget(*run.task, s, a.slots, sim.budget);
    }
    tasks.push_back(std::move(run));
  }
  std::vector<Job> jobs;
  for (size_t t = 0; t < tasks.size(); ++t) {
    for (const std::string& s : a.searchers) {
      for (int set = 0; set < 2; ++set) {
        for (uint32_t seed : set == 0 ? a.seeds : a.check_seeds) jobs.push_back(Job{t, s, set, seed});
      }
    }
  }
  PrintHeader(argc, argv, a);
  RunJobs(a, tasks, sim, jobs);
  for (size_t t = 0; t < tasks.size(); ++t) PrintTask(a, tasks[t], t, sim, jobs);
  if (!a.results.empty()) WriteResults(a, tasks, jobs);
  return 0;
}
