// bench/search_efficiency: adaptive ASHA next to random search on the
// Fashion-MNIST example with the same budget (hyperparameter space,
// max_trials x max_length batches, concurrency), through a real det-master and
// two det-agents on loopback. For each seed it prints, for each search, the
// best validation accuracy and the total batches trained (over all trials, in
// the order things happened) until the experiment first reached the best
// accuracy random search found; the ratio ASHA / random is the figure of merit
// (goal: at most 1/3). Where random's best falls in its sequence of trials is
// luck (its best of 64 trials is as likely to be the 3rd as the 60th), so one
// seed says little: the bench runs several and prints the ratio of the summed
// batches (the expected cost) next to each seed's ratio.
//
//   search_efficiency [--seeds 1,2,3,4,5,6] [--max-trials 64] [--max-length 256]
//                     [--max-rungs 3] [--lr-min -4] [--lr-max 0]
//                     [--train-limit 16384] [--validation-limit 2000]
//                     [--tolerance 0.005]
//                     [--asha-variants promotion,aggressive]  (also stop_once, conservative)
//                     (--searchers is the same flag; it also takes asha_tpe (adaptive_asha standard
//                     with sampler: tpe), tpe, pbt (population 64, perturb_period 32) and a _d3
//                     suffix on the ASHA ones: divisor 3)
//                     [--full]
//
// --lr-min/--lr-max: log10 bounds of Adam's learning rate. Each ASHA variant
// runs next to the same random search: `promotion` (Determined's default:
// standard mode, a promoted trial resumes from its checkpoint), `stop_once`
// (standard mode, the stopping variant), `aggressive` and `conservative` (the
// promotion variant in those modes: one bracket, or max_rungs brackets). Each
// gets as many trials as its brackets fit in the same budget. An ASHA search is
// killed as soon as it has reached random search's best (all the figure needs);
// --full runs it to the end to also print its final best and total batches.
//
// The budget is reduced (a quarter of the training set per trial, 2000
// validation images) so that a seed takes about 13 minutes on two cores;
// --max-length 937 --train-limit 0 --validation-limit 0 is the full example.
// The simulated 1000-trial / 64-slot run is bench/search_sim.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/experiment_config.h"
#include "det/api/v1/api.grpc.pb.h"
#include "master/search/preview.h"
#include "tests/test_util.h"

namespace {
using det::testing::PollUntil;
using det::testing::ReadFile;
using det::testing::Subprocess;
using det::testing::TempDir;
using det::testing::WriteFile;
namespace v1 = det::api::v1;

const std::string kBin = DET_BIN_DIR;
const std::string kTrial = std::string(DET_TRIALS_DIR) + "/fashion_mnist_trial.so";

// An adaptive_asha configuration: its mode and whether it stops (stop_once)
// rather than promotes.
struct AshaVariant {
  std::string name;
  std::string searcher = "adaptive_asha";  // or tpe, pbt
  std::string mode = "standard";
  bool stop_once = false;
  int divisor = 4;
  std::string extra;  // more searcher lines (sampler: tpe, ...)
  // As many trials as fit the budget, and the batches the preview plans.
  int trials = 0;
  int64_t planned = 0;
};

std::optional<AshaVariant> ParseVariant(const std::string& name) {
  AshaVariant v;
  v.name = name;
  std::string base = name;
  if (base.size() > 3 && base.compare(base.size() - 3, 3, "_d3") == 0) {  // divisor 3
    v.divisor = 3;
    base.resize(base.size() - 3);
  }
  if (base == "stop_once") v.stop_once = true;
  else if (base == "aggressive" || base == "conservative") v.mode = base;
  else if (base == "asha_tpe") v.extra = "  sampler: tpe\n";
  else if (base == "tpe" || base == "pbt") v.searcher = base;
  else if (base != "promotion") return std::nullopt;
  return v;
}

struct Options {
  int max_trials = 64;
  int asha_trials = 0;  // 0: as many as fit in random search's batch budget
  int max_length = 256;
  int train_limit = 16384;
  int validation_limit = 2000;
  double tolerance = 0.005;
  // log10 bounds of the learning rate (Adam).
  double lr_min = -4.0;
  double lr_max = 0.0;
  std::vector<AshaVariant> asha_variants;
  // reproducibility.experiment_seed of both experiments, one run of each
  // search per seed.
  std::vector<int64_t> seeds = {1, 2, 3, 4, 5, 6};
  // adaptive_asha's max_rungs: with max_length 256, Determined's default of
  // 5 would make the first rung 1 batch; 3 makes it 16.
  int max_rungs = 3;
  bool full = false;
};

std::string Config(const Options& o, int64_t seed, const std::string& searcher, const std::string& checkpoints,
                   int max_trials, const AshaVariant& variant = {}) {
  std::string s = absl::StrCat(R"(name: search-efficiency-)", searcher, R"(
hyperparameters:
  global_batch_size: 64
  learning_rate:
    type: log
    minval: )", o.lr_min, R"(
    maxval: )", o.lr_max, R"(
    base: 10
  n_filters1:
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
searcher:
  name: )", searcher, R"(
  metric: accuracy
  smaller_is_better: false
  max_length:
    batches: )", o.max_length, R"(
  max_trials: )", max_trials, R"(
  max_concurrent_trials: 2
)");
  if (searcher == "adaptive_asha") {
    absl::StrAppend(&s, "  mode: ", variant.mode, "\n  divisor: ", variant.divisor, "\n  max_rungs: ", o.max_rungs,
                    "\n", variant.extra);
    if (variant.stop_once) s += "  stop_once: true\n";
  }
  // pbt: the same budget as random search (population max_trials x max_length).
  if (searcher == "pbt") absl::StrAppend(&s, "  population_size: ", max_trials, "\n  perturb_period: 32\n");
  absl::StrAppend(&s, R"(records_per_epoch: 60000
scheduling_unit: 16
reproducibility:
  experiment_seed: )", seed, R"(
# Two agents with one slot each share this machine's cores: one thread each.
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoints, R"(
data:
  source_dir: /usr/share/datasets/fashion-mnist
  train_limit: )", o.train_limit, R"(
  validation_limit: )", o.validation_limit, R"(
  workers: 0
)");
  return s;
}

int64_t Ms(const google::protobuf::Timestamp& t) { return t.seconds() * 1000 + t.nanos() / 1000000; }

struct Outcome {
  double best = 0;
  int64_t total_batches = 0;
  double seconds = 0;
  // Killed once it reached the target (not run to the end).
  bool stopped_early = false;
  // (time, cumulative batches trained by then, accuracy) per validation.
  struct Point {
    int64_t time_ms;
    int64_t batches;
    double accuracy;
  };
  std::vector<Point> points;
  // Batches trained until accuracy >= target; -1 if never.
  int64_t BatchesToReach(double target) const {
    for (const auto& p : points) {
      if (p.accuracy >= target) return p.batches;
    }
    return -1;
  }
};

// The token every API call carries (from Login as `determined`).
std::string g_token;
void Authorize(grpc::ClientContext* ctx) { ctx->AddMetadata("authorization", "Bearer " + g_token); }

// Runs one experiment to the end, or, with stop_at, until its best validation
// accuracy reaches stop_at (then kills it).
Outcome Run(v1::Determined::Stub& api, const std::string& config_path, std::optional<double> stop_at) {
  std::ifstream so(kTrial, std::ios::binary);
  std::stringstream bytes;
  bytes << so.rdbuf();
  v1::CreateExperimentRequest create;
  create.set_config_yaml(ReadFile(config_path));
  create.set_trial_so(bytes.str());
  create.set_activate(true);
  v1::CreateExperimentResponse created;
  {
    grpc::ClientContext ctx;
    Authorize(&ctx);
    auto s = api.CreateExperiment(&ctx, create, &created);
    if (!s.ok()) {
      std::fprintf(stderr, "CreateExperiment: %s\n", s.error_message().c_str());
      std::exit(1);
    }
  }
  const int64_t id = created.experiment().id();
  auto t0 = std::chrono::steady_clock::now();
  bool killed = false;
  bool done = PollUntil(
      [&] {
        grpc::ClientContext ctx;
        Authorize(&ctx);
        v1::GetExperimentRequest r;
        r.set_experiment_id(id);
        v1::GetExperimentResponse e;
        if (!api.GetExperiment(&ctx, r, &e).ok()) return false;
        auto st = e.experiment().state();
        if (st == v1::STATE_COMPLETED || st == v1::STATE_ERROR || st == v1::STATE_CANCELED) return true;
        if (stop_at && !killed && e.experiment().has_best_validation_metric() &&
            e.experiment().best_validation_metric() >= *stop_at) {
          grpc::ClientContext kctx;
          Authorize(&kctx);
          v1::KillExperimentRequest kill;
          kill.set_experiment_id(id);
          v1::KillExperimentResponse killed_resp;
          auto ks = api.KillExperiment(&kctx, kill, &killed_resp);
          if (!ks.ok()) std::fprintf(stderr, "KillExperiment %d: %s\n", id, ks.error_message().c_str());
          killed = ks.ok();
        }
        return false;
      },
      std::chrono::hours(2));
  if (!done) {
    std::fprintf(stderr, "experiment %d did not finish\n", id);
    std::exit(1);
  }
  Outcome out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.stopped_early = killed;

  grpc::ClientContext ctx;

  Authorize(&ctx);
  v1::GetExperimentTrialsRequest tr;
  tr.set_experiment_id(id);
  tr.set_limit(1000);
  v1::GetExperimentTrialsResponse trials;
  if (!api.GetExperimentTrials(&ctx, tr, &trials).ok()) std::exit(1);
  // Events: a training report moves its trial's batch count; a validation
  // is a point on the (batches trained so far, accuracy) curve.
  struct Event {
    int64_t time_ms;
    int32_t trial;
    int64_t batches;
    bool validation;
    double accuracy;
  };
  std::vector<Event> events;
  for (const auto& t : trials.trials()) {
    grpc::ClientContext mctx;
    Authorize(&mctx);
    v1::GetTrialMetricsRequest mr;
    mr.set_trial_id(t.id());
    v1::GetTrialMetricsResponse metrics;
    if (!api.GetTrialMetrics(&mctx, mr, &metrics).ok()) std::exit(1);
    for (const auto& m : metrics.metrics()) {
      bool val = m.group() == "validation";
      auto it = m.metrics().find("accuracy");
      events.push_back({Ms(m.end_time()), t.id(), m.total_batches(), val,
                        val && it != m.metrics().end() ? it->second : 0.0});
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.time_ms < b.time_ms; });
  std::map<int32_t, int64_t> trained;
  int64_t sum = 0;
  for (const auto& e : events) {
    int64_t& b = trained[e.trial];
    if (e.batches > b) {
      sum += e.batches - b;
      b = e.batches;
    }
    if (e.validation) {
      out.points.push_back({e.time_ms, sum, e.accuracy});
      out.best = std::max(out.best, e.accuracy);
    }
  }
  out.total_batches = sum;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool variants_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--full") {
      o.full = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", a.c_str());
      return 2;
    }
    const char* v = argv[++i];
    if (a == "--max-trials") o.max_trials = std::atoi(v);
    else if (a == "--asha-trials") o.asha_trials = std::atoi(v);
    else if (a == "--max-length") o.max_length = std::atoi(v);
    else if (a == "--train-limit") o.train_limit = std::atoi(v);
    else if (a == "--validation-limit") o.validation_limit = std::atoi(v);
    else if (a == "--tolerance") o.tolerance = std::atof(v);
    else if (a == "--lr-min") o.lr_min = std::atof(v);
    else if (a == "--lr-max") o.lr_max = std::atof(v);
    else if (a == "--max-rungs") o.max_rungs = std::atoi(v);
    else if (a == "--seeds" || a == "--seed") {
      o.seeds.clear();
      std::stringstream list(v);
      for (std::string seed; std::getline(list, seed, ',');) {
        char* rest = nullptr;
        long long n = std::strtoll(seed.c_str(), &rest, 10);
        if (seed.empty() || *rest != '\0') {
          std::fprintf(stderr, "%s: '%s' is not an integer seed\n", a.c_str(), seed.c_str());
          return 2;
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
                       "--asha-variants: unknown variant '%s' (promotion, stop_once, aggressive, conservative, "
                       "asha_tpe, tpe, pbt, and _d3 after an ASHA one)\n",
                       name.c_str());
          return 2;
        }
        o.asha_variants.push_back(*variant);
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (o.asha_variants.empty() && !variants_given) {
    o.asha_variants = {*ParseVariant("promotion"), *ParseVariant("aggressive")};
  }
  if (o.seeds.empty() || o.asha_variants.empty()) {
    std::fprintf(stderr, "--seeds and --asha-variants need at least one value\n");
    return 2;
  }
  TempDir dir;
  Subprocess master({kBin + "/det-master", "--data-dir", dir / "master", "--grpc-port", "0", "--http-port", "0",
                     "--ports-file", dir / "ports.json", "--log-level", "warn", "--checkpoint-storage-root",
                     dir / "checkpoints"},
                    dir / "master.out", dir / "master.err");
  if (!PollUntil([&] { return !ReadFile(dir / "ports.json").empty(); }, std::chrono::seconds(30))) return 1;
  auto ports = nlohmann::json::parse(ReadFile(dir / "ports.json"));
  std::string address = absl::StrCat("127.0.0.1:", ports["grpc"].get<int>());
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{kBin + "/det-agent", "--master", address, "--id", absl::StrCat("agent-", i),
                                 "--work-dir", dir / absl::StrCat("agent-", i), "--log-level", "warn"},
        dir / absl::StrCat("agent-", i, ".out"), dir / absl::StrCat("agent-", i, ".err")));
  }
  auto api = v1::Determined::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  PollUntil(
      [&] {
        grpc::ClientContext ctx;
        v1::LoginRequest login;
        login.set_username("determined");
        v1::LoginResponse resp;
        if (!api->Login(&ctx, login, &resp).ok()) return false;
        g_token = resp.token();
        return true;
      },
      std::chrono::seconds(30));
  PollUntil(
      [&] {
        grpc::ClientContext ctx;
        Authorize(&ctx);
        v1::GetAgentsResponse resp;
        if (!api->GetAgents(&ctx, v1::GetAgentsRequest(), &resp).ok()) return false;
        int n = 0;
        for (const auto& a : resp.agents()) n += a.connected() ? 1 : 0;
        return n == 2;
      },
      std::chrono::seconds(30));

  std::printf("search_efficiency: Fashion-MNIST, %d trials, max_length %d batches, 2 slots, train_limit %d, "
              "validation_limit %d, learning rate 1e%g..1e%g, seeds %s\n",
              o.max_trials, o.max_length, o.train_limit, o.validation_limit, o.lr_min, o.lr_max,
              absl::StrJoin(o.seeds, ",").c_str());
  std::fflush(stdout);
  // The same budget: ASHA gets as many trials as fit in the batches random
  // search plans (max_trials x max_length), by the searcher's own preview.
  const int64_t budget = static_cast<int64_t>(o.max_trials) * o.max_length;
  for (AshaVariant& variant : o.asha_variants) {
    if (variant.searcher != "adaptive_asha") {  // tpe, pbt: random search's trials (population)
      variant.trials = o.max_trials;
      variant.planned = budget;
      std::printf("budget: %lld batches; %s: %d trials x %d batches\n", static_cast<long long>(budget),
                  variant.name.c_str(), variant.trials, o.max_length);
      continue;
    }
    for (int m = o.max_trials; o.asha_trials == 0 || m <= o.asha_trials; ++m) {
      auto config = det::ParseExperimentConfig(
          Config(o, o.seeds[0], "adaptive_asha", dir / "checkpoints", m, variant), "asha.yaml");
      if (!config.ok()) {
        std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
        return 1;
      }
      auto preview = det::master::PreviewSearch(*config, o.max_length, 0);
      if (!preview.ok()) return 1;
      if (o.asha_trials == 0 && preview->total_batches > budget) break;
      variant.trials = m;
      variant.planned = preview->total_batches;
      if (m >= 4096) break;
    }
    std::printf("budget: %lld batches; random: %d trials x %d batches; adaptive_asha (%s): %d trials (%s mode, "
                "divisor %d, max_rungs %d%s), %lld batches planned\n",
                static_cast<long long>(budget), o.max_trials, o.max_length, variant.name.c_str(), variant.trials,
                variant.mode.c_str(), variant.divisor, o.max_rungs, variant.stop_once ? ", stop_once" : "",
                static_cast<long long>(variant.planned));
  }
  std::fflush(stdout);

  // Per tolerance (0, then o.tolerance) and variant: batches to reach the
  // target, summed over seeds; `lower_bound` when some ASHA run never did.
  struct Sum {
    int64_t random = 0, asha = 0;
    bool lower_bound = false;
    std::vector<double> ratios;
  };
  std::map<std::pair<int, std::string>, Sum> sums;
  const std::vector<double> tolerances = {0.0, o.tolerance};
  for (int64_t seed : o.seeds) {
    std::printf("\n== seed %lld\n", static_cast<long long>(seed));
    const std::string random_path = dir / absl::StrCat("random-", seed, ".yaml");
    WriteFile(random_path, Config(o, seed, "random", dir / "checkpoints", o.max_trials));
    Outcome random = Run(*api, random_path, std::nullopt);
    const int64_t random_to_best = random.BatchesToReach(random.best);
    std::printf("random:        best accuracy %.4f (after %lld batches), %lld batches in all, %.0f s\n",
                random.best, static_cast<long long>(random_to_best), static_cast<long long>(random.total_batches),
                random.seconds);
    std::fflush(stdout);
    std::vector<std::pair<std::string, Outcome>> ashas;
    for (const AshaVariant& v : o.asha_variants) {
      const std::string& variant = v.name;
      const std::string path = dir / absl::StrCat("asha-", variant, "-", seed, ".yaml");
      WriteFile(path, Config(o, seed, v.searcher, dir / "checkpoints", v.trials, v));
      Outcome asha = Run(*api, path, o.full ? std::nullopt : std::optional<double>(random.best));
      if (asha.stopped_early) {
        std::printf("[%s]: reached %.4f, killed there, %lld batches, %.0f s\n", variant.c_str(),
                    asha.best, static_cast<long long>(asha.total_batches), asha.seconds);
      } else {
        std::printf("[%s]: best accuracy %.4f, %lld batches in all, %.0f s\n", variant.c_str(),
                    asha.best, static_cast<long long>(asha.total_batches), asha.seconds);
      }
      std::fflush(stdout);
      ashas.emplace_back(variant, asha);
    }
    for (size_t k = 0; k < tolerances.size(); ++k) {
      const double tol = tolerances[k];
      const double target = random.best - tol;
      const int64_t r = random.BatchesToReach(target);
      std::printf("batches trained to reach accuracy %.4f (random's best%s): random %lld\n", target,
                  tol > 0 ? absl::StrCat(" - ", tol).c_str() : "", static_cast<long long>(r));
      for (const auto& [variant, asha] : ashas) {
        const int64_t a = asha.BatchesToReach(target);
        Sum& sum = sums[{static_cast<int>(k), variant}];
        sum.random += r;
        sum.asha += a < 0 ? asha.total_batches : a;
        sum.lower_bound |= a < 0;
        std::printf("  [%s] %s", variant.c_str(), a < 0 ? "never" : std::to_string(a).c_str());
        if (a >= 0) {
          sum.ratios.push_back(static_cast<double>(a) / r);
          std::printf("; ratio asha / random %.3f (goal <= 0.333)", sum.ratios.back());
        }
        std::printf("\n");
      }
    }
    if (o.full) {
      for (const auto& [variant, asha] : ashas) {
        std::printf("total batches ratio asha (%s) / random: %.3f\n", variant.c_str(),
                    static_cast<double>(asha.total_batches) / random.total_batches);
      }
    }
    std::fflush(stdout);
  }

  std::printf("\n== %zu seed(s): batches to reach random's best, summed over seeds\n", o.seeds.size());
  for (const auto& [key, sum] : sums) {
    const double tol = tolerances[key.first];
    std::vector<std::string> each;
    for (double r : sum.ratios) each.push_back(absl::StrFormat("%.3f", r));
    std::printf("%s%s: random %lld, [%s] %s%lld; ratio %s%.3f (goal <= 0.333); per seed %s\n",
                tol > 0 ? "within " : "exact", tol > 0 ? absl::StrCat(tol).c_str() : "",
                static_cast<long long>(sum.random), key.second.c_str(), sum.lower_bound ? ">= " : "",
                static_cast<long long>(sum.asha), sum.lower_bound ? ">= " : "",
                static_cast<double>(sum.asha) / std::max<int64_t>(1, sum.random), absl::StrJoin(each, " ").c_str());
  }
  for (auto& a : agents) a->Signal(SIGTERM);
  for (auto& a : agents) a->Wait(std::chrono::seconds(10));
  master.Signal(SIGTERM);
  master.Wait(std::chrono::seconds(10));
  return 0;
}
