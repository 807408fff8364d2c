// The event simulation of bench/search_peers: both sides keep to the slots
// and the budget, events come in time order, and the det-cpp Searcher and
// Optuna (Debian's python3-optuna, required: these tests fail without it)
// train the same way.
#include "bench/search_peers_sim.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "bench/search_tasks.h"

namespace det {
namespace bench {
namespace {

std::unique_ptr<SearchTask> Lr() {
  auto t = MakeSimulatedTask("lr");
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

ExperimentConfig RandomSearch(const SearchTask& task, int slots) {
  ExperimentConfig c = task.BaseConfig();
  c.reproducibility.experiment_seed = 7;
  c.searcher.name = SearcherName::kRandom;
  c.searcher.max_trials = 64;
  c.searcher.max_concurrent_trials = slots;
  return c;
}

// Events in time order, none past the budget; the first validations come
// when each of the `slots` running trials has trained one period, so the
// first event is at slots x period batches and there are `slots` of them.
void ExpectSlotsAndBudget(const SearchRun& run, const SimOptions& o) {
  ASSERT_GE(run.events.size(), static_cast<size_t>(o.slots));
  EXPECT_TRUE(std::is_sorted(run.events.begin(), run.events.end(),
                             [](const ValidationEvent& x, const ValidationEvent& y) { return x.batches < y.batches; }));
  EXPECT_LE(run.total, o.budget);
  EXPECT_LE(run.events.back().batches, o.budget);
  for (int i = 0; i < o.slots; ++i) EXPECT_EQ(run.events[static_cast<size_t>(i)].batches, o.slots * o.period) << i;
  if (run.events.size() > static_cast<size_t>(o.slots)) {
    EXPECT_GT(run.events[static_cast<size_t>(o.slots)].batches, o.slots * o.period);
  }
}

TEST(SearchPeersSim, DetRandomSearchKeepsToTheSlotsAndSpendsExactlyTheBudget) {
  auto task = Lr();
  for (int slots : {1, 2, 4}) {
    SimOptions o;
    o.slots = slots;
    auto run = RunDetSearch(*task, RandomSearch(*task, slots), o);
    ASSERT_TRUE(run.ok()) << run.status();
    ExpectSlotsAndBudget(*run, o);
    EXPECT_EQ(run->trials, 64);
    EXPECT_EQ(run->total, 64 * kTaskMaxLength);  // 64 trials x 256 batches: the budget
    // Every trial validates every 16 batches: 16 validations each.
    EXPECT_EQ(run->events.size(), 64u * 16u);
  }
}

TEST(SearchPeersSim, TheBudgetCutsASearchThatWouldTrainMore) {
  auto task = Lr();
  SimOptions o;
  o.budget = 1000;  // less than 64 x 256
  auto run = RunDetSearch(*task, RandomSearch(*task, 4), o);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_LE(run->total, 1000);
  EXPECT_GT(run->total, 1000 - 4 * 16);
}

TEST(SearchPeersSim, OptunaKeepsToTheSameSlotsAndBudget) {
  auto task = Lr();
  OptunaOptions opt;
  opt.script = DET_SOURCE_DIR "/bench/search_peers_optuna.py";
  opt.sampler = "random";
  opt.max_trials = 64;
  SimOptions o;
  auto run = RunOptunaSearch(*task, opt, 7, o);
  ASSERT_TRUE(run.ok()) << run.status() << " (Debian's python3-optuna is required: deploy/install-deps.sh)";
  ExpectSlotsAndBudget(*run, o);
  EXPECT_EQ(run->trials, 64);
  EXPECT_EQ(run->total, 64 * kTaskMaxLength);
  EXPECT_EQ(run->events.size(), 64u * 16u);
  // A pruner stops trials early: more trials in the same budget.
  opt.sampler = "tpe";
  opt.pruner = "sha";
  opt.max_trials = 0;
  run = RunOptunaSearch(*task, opt, 7, o);
  ASSERT_TRUE(run.ok()) << run.status();
  ExpectSlotsAndBudget(*run, o);
  EXPECT_GT(run->trials, 64);
  EXPECT_LE(run->total, o.budget);
}

}  // namespace
}  // namespace bench
}  // namespace det
