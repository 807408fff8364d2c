// bench/search_table_record: records the tabular Fashion-MNIST search task of
// bench/search_peers: real learning curves of the example CNN over a grid of
// hyperparameters (learning rate 8 values x both convolution widths x hidden
// size x dropout, 2 values each: 128 points), each point trained once per
// trial seed, validated every 16 batches up to 256, through a real det-master
// and two one-slot det-agents on loopback (a grid search per seed). The
// budget is the reduced one of search_efficiency: a 16k-image training subset
// (256 batches of 64, one pass) and 2,000 validation images.
//
//   search_table_record --out bench/results/search_table_fmnist.json
//                       [--seeds 2] [--points 128] [--commit HASH]
//
// --points N keeps the first N grid points in grid order: a quick check of
// the recording only (search_peers loads only a table of the whole grid).
// The table (format in bench/search_tasks.h) names the command, commit, date
// and machine that made it. A trial that does not complete, or misses a
// validation, fails the recording: a table has no holes.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bench/bench_cluster.h"
#include "det/api/v1/api.grpc.pb.h"
#include "tests/test_util.h"

namespace {
namespace v1 = det::api::v1;

constexpr int64_t kMaxLength = 256;
constexpr int64_t kPeriod = 16;

struct Axis {
  std::string name;
  std::vector<double> values;
};

// The grid; the config below must enumerate exactly these values.
std::vector<Axis> Axes() {
  Axis lr{"learning_rate", {}};
  for (int i = 0; i < 8; ++i) lr.values.push_back(std::pow(10.0, -4.0 + 0.5 * i));
  return {lr, {"n_filters1", {8, 32}}, {"n_filters2", {16, 64}}, {"hidden_size", {64, 256}}, {"dropout", {0.0, 0.4}}};
}

std::string Config(int seed, int points, const std::string& checkpoints) {
  return absl::StrCat(R"(name: search-table-fmnist-seed-)", seed, R"(
hyperparameters:
  global_batch_size: 64
  learning_rate: {type: log, minval: -4, maxval: -0.5, base: 10, count: 8}
  n_filters1: {type: categorical, vals: [8, 32]}
  n_filters2: {type: categorical, vals: [16, 64]}
  hidden_size: {type: categorical, vals: [64, 256]}
  dropout: {type: categorical, vals: [0.0, 0.4]}
searcher:
  name: grid
  metric: accuracy
  smaller_is_better: false
  max_length: {batches: )", kMaxLength, R"(}
  max_trials: )", points, R"(
  max_concurrent_trials: 2
min_validation_period: {batches: )", kPeriod, R"(}
checkpoint_policy: none
scheduling_unit: 16
reproducibility:
  experiment_seed: )", seed, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoints, R"(
  save_experiment_best: 0
  save_trial_best: 0
  save_trial_latest: 1
records_per_epoch: 60000
data:
  source_dir: /usr/share/datasets/fashion-mnist
  train_limit: 16384
  validation_limit: 2000
  workers: 0
)");
}

// The index of `v` in `axis` (values compared to 1e-9 relative); -1 if none.
int IndexOf(const Axis& axis, double v) {
  for (size_t i = 0; i < axis.values.size(); ++i) {
    if (std::fabs(axis.values[i] - v) <= 1e-9 * std::max(1.0, std::fabs(v))) return static_cast<int>(i);
  }
  return -1;
}

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "search_table_record: %s\n", why.c_str());
  std::exit(1);
}

// The rows of one finished grid experiment: one per trial, its grid point and
// its accuracy at 16, 32, ..., 256 batches.
nlohmann::json Collect(v1::Determined::Stub& api, int64_t id, int seed_index, const std::vector<Axis>& axes) {
  const v1::GetExperimentTrialsResponse trials = det::bench::ExperimentTrials(api, id);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& t : trials.trials()) {
    if (t.state() != v1::STATE_COMPLETED) Fail(absl::StrCat("trial ", t.id(), " did not complete"));
    nlohmann::json point = nlohmann::json::array();
    for (const Axis& axis : axes) {
      auto it = t.hparams().fields().find(axis.name);
      int i = it == t.hparams().fields().end() ? -1 : IndexOf(axis, it->second.number_value());
      if (i < 0) Fail(absl::StrCat("trial ", t.id(), ": hparam ", axis.name, " is not on the grid"));
      point.push_back(i);
    }
    const v1::GetTrialMetricsResponse metrics = det::bench::TrialMetrics(api, t.id());
    std::map<int64_t, double> at;
    for (const auto& m : metrics.metrics()) {
      auto it = m.metrics().find("accuracy");
      if (m.group() == "validation" && it != m.metrics().end()) at[m.total_batches()] = it->second;
    }
    nlohmann::json values = nlohmann::json::array();
    for (int64_t l = kPeriod; l <= kMaxLength; l += kPeriod) {
      auto it = at.find(l);
      if (it == at.end()) Fail(absl::StrCat("trial ", t.id(), " has no validation at ", l, " batches"));
      values.push_back(std::round(it->second * 1e5) / 1e5);
    }
    rows.push_back({{"point", point}, {"seed", seed_index}, {"values", values}, {"trial_seed", t.seed()}});
  }
  return rows;
}

std::string Now() {
  char buf[32];
  std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, commit = "unknown";
  int seeds = 2, points = 128;
  std::string command = "search_table_record";
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i], v = i + 1 < argc ? argv[i + 1] : "";
    command += " " + f;
    bool ok = i + 1 < argc;
    if (f == "--out") out = v;
    else if (f == "--commit") commit = v;
    else if (f == "--seeds") ok = ok && absl::SimpleAtoi(v, &seeds) && seeds >= 1 && seeds <= 8;
    else if (f == "--points") ok = ok && absl::SimpleAtoi(v, &points) && points >= 1 && points <= 128;
    else ok = false;
    if (!ok || out.size() > 4096) {
      std::fprintf(stderr, "usage: search_table_record --out FILE [--seeds 1..8] [--points 1..128] [--commit HASH]\n");
      return 2;
    }
    command += " " + v;
    ++i;
  }
  if (out.empty()) Fail("--out FILE is required");
  const std::vector<Axis> axes = Axes();
  det::testing::TempDir dir;
  det::bench::BenchCluster cluster(dir, 2, 0);
  nlohmann::json rows = nlohmann::json::array();
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < seeds; ++s) {
    const int64_t id = det::bench::CreateExperiment(cluster.api(), std::string(DET_TRIALS_DIR) + "/fashion_mnist_trial.so",
                                                    Config(s + 1, points, dir / "checkpoints"));
    v1::Experiment e = det::bench::WaitForEnd(cluster.api(), id, std::chrono::hours(3));
    if (e.state() != v1::STATE_COMPLETED) Fail(absl::StrCat("experiment ", id, " ended ", v1::State_Name(e.state())));
    for (auto& r : Collect(cluster.api(), id, s, axes)) rows.push_back(std::move(r));
    std::printf("seed %d: %zu rows, %.0f s so far\n", s, rows.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  nlohmann::json table = {{"task", "fmnist"},
                          {"metric", "accuracy"},
                          {"smaller_is_better", false},
                          {"made_by",
                           {{"command", command},
                            {"commit", commit},
                            {"date", Now()},
                            {"machine", absl::StrCat(host, ", ", sysconf(_SC_NPROCESSORS_ONLN), " cores")},
                            {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()},
                            {"budget", "256 batches of 64 from a 16,384-image training subset; 2,000 validation "
                                       "images; one thread per trial, 2 one-slot agents"}}},
                          {"seeds", seeds},
                          {"rows", rows}};
  nlohmann::json lengths = nlohmann::json::array();
  for (int64_t l = kPeriod; l <= kMaxLength; l += kPeriod) lengths.push_back(l);
  table["lengths"] = lengths;
  nlohmann::json ax = nlohmann::json::array();
  for (const Axis& a : axes) ax.push_back({{"name", a.name}, {"values", a.values}});
  table["axes"] = ax;
  std::string text = table.dump();
  det::testing::WriteFile(out, text + "\n");
  std::printf("wrote %s: %zu rows, %zu bytes\n", out.c_str(), rows.size(), text.size());
  return 0;
}
