// bench/search_sim: a discrete-event simulation of a hyperparameter search on
// a simulated cluster. 1000 trials of adaptive_asha (standard mode, divisor
// 4, max_rungs 5, max_length 1024 batches) on 64 slots (8 agents x 8), and
// random search with the same number of trials and the same concurrency, side
// by side. The real Searcher decides what to train and the real fair-share
// Schedule() places trials on free slots; a batch takes 1 time unit, so a
// trial asked to validate at L having trained T batches holds one slot for
// L - T units. A trial waiting for promotion holds no slot.
//
// Synthetic learning curves: trial i (hparams lr, units) reaches
// acc(len) = a_i * (1 - exp(-len / tau_i)) + N(0, 0.01) where a higher lr
// learns faster (tau_i from 400 batches at lr 1e-4 to 40 at lr 0.1) but a
// too high or too low lr lowers the plateau a_i (best near lr 0.005), and
// more units raise it a little.
//
// Prints per search: the time until the search shut down, slot utilisation
// (busy slot-time / (64 * that time); goal: slots kept busy), trials created,
// batches trained, the best accuracy of a trial trained to max_length; then
// the ratios ASHA / random.
//
//   search_sim [--trials N] [--slots S] [--seed X] [--timeline]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/experiment_config.h"
#include "master/search/asha.h"
#include "master/search/scheduler.h"
#include "master/search/searcher.h"

namespace {

using det::master::Assignment;
using det::master::CloseTrialOp;
using det::master::CreateTrialOp;
using det::master::RequestId;
using det::master::SchedAgent;
using det::master::SchedRequest;
using det::master::SchedRunning;
using det::master::Searcher;
using det::master::SearcherOp;
using det::master::ValidateAfterOp;

constexpr int64_t kMaxLength = 1024;
constexpr int kSlotsPerAgent = 8;

double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Box-Muller over Uniform: the same on every platform.
double Normal(std::mt19937_64& rng) {
  double u1 = std::max(Uniform(rng), 1e-300);
  double u2 = Uniform(rng);
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

struct Curve {
  double a = 0;
  double tau = 1;
};

Curve CurveOf(const nlohmann::json& hparams) {
  double log_lr = std::log10(hparams.at("lr").get<double>());  // -4 .. -1
  double units = hparams.at("units").get<double>();             // 16 .. 256
  Curve c;
  c.a = 0.70 + 0.22 * std::exp(-std::pow(log_lr + 2.3, 2) / 0.45) + 0.04 * std::log2(units / 16) / 4;
  c.tau = 40 * std::pow(10.0, (-1 - log_lr) / 3);  // lr 0.1: 40 batches; 0.005: 108; 1e-4: 400
  return c;
}

struct SimTrial {
  Curve curve;
  int64_t trained = 0;
  int64_t target = 0;
  bool pending = false;  // wants a slot
  bool running = false;
  int64_t submit_order = 0;
  int64_t finish = 0;
  std::string agent;
  int slot = -1;
};

struct Result {
  std::string name;
  int64_t makespan = 0;
  double utilisation = 0;
  int64_t trials = 0;
  int64_t batches = 0;
  double best = 0;  // best accuracy at max_length
  double progress = 0;
  int64_t last_create = 0;         // time of the last trial creation
  double creation_utilisation = 0;  // slot utilisation until then
  bool ok = true;
};

// `timeline`: also prints slots in use every 100 time units to stderr.
Result Simulate(const det::ExperimentConfig& config, int slots, uint64_t sim_seed, bool timeline) {
  Result r;
  r.name = std::string(det::SearcherNameToString(config.searcher.name));
  absl::StatusOr<Searcher> created = Searcher::Create(config, kMaxLength);
  if (!created.ok()) {
    std::fprintf(stderr, "search_sim: %s\n", created.status().ToString().c_str());
    r.ok = false;
    return r;
  }
  Searcher& s = *created;
  std::mt19937_64 rng(sim_seed);
  std::map<RequestId, SimTrial> trials;
  int agents = (slots + kSlotsPerAgent - 1) / kSlotsPerAgent;
  std::vector<std::vector<bool>> busy(static_cast<size_t>(agents));
  for (int a = 0; a < agents; ++a) {
    busy[static_cast<size_t>(a)].assign(static_cast<size_t>(std::min(kSlotsPerAgent, slots - a * kSlotsPerAgent)),
                                        false);
  }
  int64_t submit = 0;
  int64_t now = 0;
  double busy_time = 0;
  double busy_at_last_create = 0;
  r.best = -1;

  std::deque<SearcherOp> queue;
  auto push = [&queue](std::vector<SearcherOp> ops) {
    for (SearcherOp& op : ops) queue.push_back(std::move(op));
  };
  auto drain = [&]() {
    while (!queue.empty()) {
      SearcherOp op = std::move(queue.front());
      queue.pop_front();
      if (auto* c = std::get_if<CreateTrialOp>(&op)) {
        trials[c->request_id].curve = CurveOf(c->hparams);
        ++r.trials;
        r.last_create = now;
        busy_at_last_create = busy_time;
        push(s.TrialCreated(c->request_id));
      } else if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
        SimTrial& t = trials[v->request_id];
        t.target = v->length;
        t.pending = true;
        t.submit_order = submit++;
      } else if (auto* c = std::get_if<CloseTrialOp>(&op)) {
        trials[c->request_id].pending = false;
        push(s.TrialClosed(c->request_id));
      }
    }
  };

  push(s.InitialOperations());
  drain();
  while (!s.shutdown()) {
    // Place pending trials on free slots.
    std::vector<SchedAgent> sched_agents;
    for (int a = 0; a < agents; ++a) {
      SchedAgent ag;
      ag.id = absl::StrCat("agent-", a);
      ag.resource_pool = "default";
      ag.total_slots = static_cast<int>(busy[static_cast<size_t>(a)].size());
      for (int i = 0; i < ag.total_slots; ++i) {
        if (!busy[static_cast<size_t>(a)][static_cast<size_t>(i)]) ag.free_slots.push_back(i);
      }
      sched_agents.push_back(std::move(ag));
    }
    std::vector<SchedRequest> pending;
    std::vector<SchedRunning> running;
    for (const auto& [id, t] : trials) {
      if (t.pending) {
        SchedRequest q;
        q.allocation_id = absl::StrCat(id);
        q.group_id = 1;
        q.resource_pool = "default";
        q.slots = 1;
        q.submit_order = t.submit_order;
        pending.push_back(std::move(q));
      } else if (t.running) {
        running.push_back(SchedRunning{absl::StrCat(id), 1, "default", 1});
      }
    }
    std::vector<Assignment> assignments = det::master::Schedule(sched_agents, pending, running);
    size_t queued = pending.size() - assignments.size();
    for (const Assignment& as : assignments) {
      SimTrial& t = trials[std::stoll(as.allocation_id)];
      t.pending = false;
      t.running = true;
      t.agent = as.placements.at(0).agent_id;
      t.slot = as.placements.at(0).slots.at(0);
      busy[static_cast<size_t>(std::stoi(t.agent.substr(6)))][static_cast<size_t>(t.slot)] = true;
      t.finish = now + std::max<int64_t>(0, t.target - t.trained);
    }
    // Advance to the next validation.
    int64_t next = -1;
    int64_t in_use = 0;
    for (const auto& [id, t] : trials) {
      if (t.running) {
        ++in_use;
        if (next < 0 || t.finish < next) next = t.finish;
      }
    }
    if (next < 0) {
      std::fprintf(stderr, "search_sim: %s stalled at t=%lld\n", r.name.c_str(), static_cast<long long>(now));
      r.ok = false;
      break;
    }
    busy_time += static_cast<double>(in_use) * static_cast<double>(next - now);
    for (int64_t tick = (now + 99) / 100 * 100; timeline && tick < next; tick += 100) {
      std::fprintf(stderr, "%s t=%lld slots_in_use=%lld queued=%zu trials_created=%lld\n", r.name.c_str(),
                   static_cast<long long>(tick), static_cast<long long>(in_use), queued,
                   static_cast<long long>(r.trials));
    }
    now = next;
    std::vector<RequestId> done;
    for (const auto& [id, t] : trials) {
      if (t.running && t.finish == now) done.push_back(id);
    }
    for (RequestId id : done) {
      SimTrial& t = trials[id];
      t.running = false;
      busy[static_cast<size_t>(std::stoi(t.agent.substr(6)))][static_cast<size_t>(t.slot)] = false;
      r.batches += t.target - t.trained;
      t.trained = t.target;
      double acc = t.curve.a * (1 - std::exp(-static_cast<double>(t.trained) / t.curve.tau)) + 0.01 * Normal(rng);
      if (t.trained >= kMaxLength) r.best = std::max(r.best, acc);
      push(s.ValidationCompleted(id, acc, t.trained));
      drain();
    }
  }
  r.makespan = now;
  r.utilisation = now > 0 ? busy_time / (static_cast<double>(slots) * static_cast<double>(now)) : 0;
  r.progress = s.Progress();
  r.creation_utilisation = r.last_create > 0 ? busy_at_last_create / (static_cast<double>(slots) *
                                                                      static_cast<double>(r.last_create))
                                             : 0;
  return r;
}

det::ExperimentConfig Config(det::SearcherName name, int64_t trials, int64_t concurrency) {
  det::ExperimentConfig config;
  config.hyperparameters = {
      {"global_batch_size", det::Hyperparameter::Const(64)},
      {"lr", det::Hyperparameter::Log(-4, -1)},
      {"units", det::Hyperparameter::Int(16, 256)},
  };
  config.searcher.name = name;
  config.searcher.metric = "accuracy";
  config.searcher.smaller_is_better = false;
  config.searcher.max_length = det::Length{det::Length::Unit::kBatches, kMaxLength};
  config.searcher.max_trials = trials;
  config.searcher.max_concurrent_trials = concurrency;
  config.searcher.divisor = 4;
  config.searcher.max_rungs = 5;
  config.searcher.mode = det::AshaMode::kStandard;
  config.reproducibility.experiment_seed = 7;
  return config;
}

void Print(const Result& r) {
  std::printf(
      "  %-29s time %6lld  slot utilisation %5.1f%% (%5.1f%% until the last trial was created at t=%lld)  trials "
      "%5lld  batches %8lld  best acc@%lld %.4f\n",
      r.name.c_str(), static_cast<long long>(r.makespan), 100 * r.utilisation, 100 * r.creation_utilisation,
      static_cast<long long>(r.last_create), static_cast<long long>(r.trials), static_cast<long long>(r.batches),
      static_cast<long long>(kMaxLength), r.best);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t trials = 1000;
  int slots = 64;
  uint64_t seed = 1;
  bool timeline = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--timeline") == 0) timeline = true;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--trials") == 0) trials = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--slots") == 0) slots = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--seed") == 0) seed = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (trials < 1 || slots < 1) {
    std::fprintf(stderr, "usage: search_sim [--trials N>=1] [--slots S>=1] [--seed X]\n");
    return 2;
  }

  det::ExperimentConfig asha = Config(det::SearcherName::kAdaptiveAsha, trials, slots);
  absl::StatusOr<det::master::AshaLayout> layout = det::master::AshaLayoutFor(asha, kMaxLength);
  if (!layout.ok()) {
    std::fprintf(stderr, "search_sim: %s\n", layout.status().ToString().c_str());
    return 1;
  }
  std::printf("search_sim: %lld trials on %d slots, max_length %lld batches (1 batch = 1 time unit), seed %llu\n",
              static_cast<long long>(trials), slots, static_cast<long long>(kMaxLength),
              static_cast<unsigned long long>(seed));
  std::printf("adaptive_asha standard, divisor 4, max_concurrent_trials %d; brackets:", slots);
  for (const det::master::AshaBracket& b : layout->brackets) {
    std::printf(" [%lld rungs, %lld trials, %lld in flight]", static_cast<long long>(b.num_rungs),
                static_cast<long long>(b.max_trials), static_cast<long long>(b.max_concurrent_trials));
  }
  std::printf("\n");

  Result a = Simulate(asha, slots, seed, timeline);
  a.name = absl::StrCat("adaptive_asha (concurrency ", slots, ")");
  det::ExperimentConfig asha_default = Config(det::SearcherName::kAdaptiveAsha, trials, 0);
  Result d = Simulate(asha_default, slots, seed, timeline);
  d.name = "adaptive_asha (default conc.)";
  Result rnd = Simulate(Config(det::SearcherName::kRandom, trials, slots), slots, seed, false);
  rnd.name = absl::StrCat("random (concurrency ", slots, ")");
  Print(a);
  Print(d);
  Print(rnd);
  if (rnd.makespan > 0 && rnd.batches > 0) {
    std::printf("ratio asha/random: time %.3fx  batches %.3fx  utilisation %.3fx  best acc %+.4f\n",
                static_cast<double>(a.makespan) / static_cast<double>(rnd.makespan),
                static_cast<double>(a.batches) / static_cast<double>(rnd.batches), a.utilisation / rnd.utilisation,
                a.best - rnd.best);
  }
  return a.ok && d.ok && rnd.ok ? 0 : 1;
}
