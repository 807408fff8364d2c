#include "master/search/searcher.h"

#include <random>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace master {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr uint32_t kSeed = 1234;
constexpr int64_t kMaxLength = 100;

ExperimentConfig MakeConfig(SearcherName name, int64_t max_trials = 0, int64_t concurrency = 0) {
  ExperimentConfig config;
  config.hyperparameters = {
      {"global_batch_size", Hyperparameter::Const(32)},
      {"lr", Hyperparameter::Double(0.1, 0.2, 2)},
      {"units", Hyperparameter::Int(1, 4, 2)},
  };
  config.searcher.name = name;
  config.searcher.metric = "loss";
  config.searcher.max_length = Length{Length::Unit::kBatches, kMaxLength};
  config.searcher.max_trials = max_trials;
  config.searcher.max_concurrent_trials = concurrency;
  config.reproducibility.experiment_seed = kSeed;
  return config;
}

std::vector<std::string> Strings(const std::vector<SearcherOp>& ops) {
  std::vector<std::string> out;
  for (const SearcherOp& op : ops) out.push_back(ToString(op));
  return out;
}

// The ops a fresh trial creation yields, drawn from `rng` as the searcher does.
std::vector<std::string> ExpectedCreate(const ExperimentConfig& config, std::mt19937_64& rng, RequestId id) {
  CreateTrialOp c{id, SampleHParams(config.hyperparameters, rng), 0};
  c.trial_seed = static_cast<uint32_t>(rng() & 0xffffffffu);
  return {ToString(c), ToString(ValidateAfterOp{id, kMaxLength})};
}

std::vector<std::string> Concat(std::vector<std::vector<std::string>> parts) {
  std::vector<std::string> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Searcher MakeSearcher(const ExperimentConfig& config) {
  absl::StatusOr<Searcher> s = Searcher::Create(config, kMaxLength);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

TEST(SearcherTest, Single) {
  ExperimentConfig config = MakeConfig(SearcherName::kSingle);
  Searcher s = MakeSearcher(config);
  std::mt19937_64 rng(kSeed);
  EXPECT_EQ(Strings(s.InitialOperations()), ExpectedCreate(config, rng, 1));
  EXPECT_TRUE(s.InitialOperations().empty());
  EXPECT_TRUE(s.TrialCreated(1).empty());
  EXPECT_TRUE(s.ValidationCompleted(1, 0.5, 50).empty());  // not at max_length yet
  EXPECT_EQ(Strings(s.ValidationCompleted(1, 0.4, kMaxLength)), std::vector<std::string>{"Close(1)"});
  EXPECT_EQ(s.Progress(), 0);
  EXPECT_EQ(Strings(s.TrialClosed(1)), std::vector<std::string>{"Shutdown"});
  EXPECT_EQ(s.Progress(), 1);
  EXPECT_TRUE(s.shutdown());
  EXPECT_TRUE(s.TrialClosed(1).empty());  // ended: ignored
  EXPECT_TRUE(s.TrialClosed(7).empty());  // unknown: ignored
}

TEST(SearcherTest, RandomFourTrialsConcurrencyTwo) {
  ExperimentConfig config = MakeConfig(SearcherName::kRandom, 4, 2);
  Searcher s = MakeSearcher(config);
  std::mt19937_64 rng(kSeed);
  auto t1 = ExpectedCreate(config, rng, 1);
  auto t2 = ExpectedCreate(config, rng, 2);
  auto t3 = ExpectedCreate(config, rng, 3);
  auto t4 = ExpectedCreate(config, rng, 4);

  EXPECT_EQ(Strings(s.InitialOperations()), Concat({t1, t2}));
  EXPECT_TRUE(s.TrialCreated(1).empty());
  EXPECT_TRUE(s.TrialCreated(2).empty());
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.3, kMaxLength)), std::vector<std::string>{"Close(2)"});
  EXPECT_TRUE(s.ValidationCompleted(2, 0.3, kMaxLength).empty());  // already closing
  EXPECT_EQ(Strings(s.TrialClosed(2)), t3);
  EXPECT_DOUBLE_EQ(s.Progress(), 0.25);
  EXPECT_TRUE(s.TrialCreated(3).empty());
  // An errored trial counts toward max_trials and makes room for the next.
  EXPECT_EQ(Strings(s.TrialExitedEarly(1, ExitedReason::kErrored)), t4);
  EXPECT_TRUE(s.TrialClosed(1).empty());  // after an early exit: ignored
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.2, kMaxLength)), std::vector<std::string>{"Close(3)"});
  EXPECT_EQ(Strings(s.ValidationCompleted(4, 0.1, kMaxLength)), std::vector<std::string>{"Close(4)"});
  EXPECT_TRUE(s.TrialClosed(4).empty());
  EXPECT_DOUBLE_EQ(s.Progress(), 0.75);
  EXPECT_EQ(Strings(s.TrialClosed(3)), std::vector<std::string>{"Shutdown"});
  EXPECT_DOUBLE_EQ(s.Progress(), 1);
  EXPECT_EQ(s.trials().size(), 4u);
  EXPECT_EQ(s.ended_trials(), 4);
}

TEST(SearcherTest, RandomWithoutConcurrencyLimitCreatesAll) {
  ExperimentConfig config = MakeConfig(SearcherName::kRandom, 3, 0);
  Searcher s = MakeSearcher(config);
  EXPECT_EQ(s.InitialOperations().size(), 6u);
}

TEST(SearcherTest, AllErroredShutdownIsFailure) {
  ExperimentConfig config = MakeConfig(SearcherName::kRandom, 2, 0);
  Searcher s = MakeSearcher(config);
  s.InitialOperations();
  EXPECT_TRUE(s.TrialExitedEarly(1, ExitedReason::kErrored).empty());
  EXPECT_EQ(Strings(s.TrialExitedEarly(2, ExitedReason::kErrored)), std::vector<std::string>{"Shutdown(failure)"});
}

TEST(SearcherTest, InvalidHpIsReplaced) {
  ExperimentConfig config = MakeConfig(SearcherName::kRandom, 2, 1);
  Searcher s = MakeSearcher(config);
  std::mt19937_64 rng(kSeed);
  auto t1 = ExpectedCreate(config, rng, 1);
  auto t2 = ExpectedCreate(config, rng, 2);
  auto t3 = ExpectedCreate(config, rng, 3);
  EXPECT_EQ(Strings(s.InitialOperations()), t1);
  EXPECT_EQ(Strings(s.TrialExitedEarly(1, ExitedReason::kInvalidHp)), t2);  // replacement
  EXPECT_EQ(s.Progress(), 0);
  s.ValidationCompleted(2, 1, kMaxLength);
  EXPECT_EQ(Strings(s.TrialClosed(2)), t3);
  EXPECT_DOUBLE_EQ(s.Progress(), 0.5);
  s.ValidationCompleted(3, 1, kMaxLength);
  EXPECT_EQ(Strings(s.TrialClosed(3)), std::vector<std::string>{"Shutdown"});
}

TEST(SearcherTest, GridRunsEveryPointThenShutsDown) {
  ExperimentConfig config = MakeConfig(SearcherName::kGrid, 0, 3);
  absl::StatusOr<std::vector<json>> points = GridHParams(config.hyperparameters);
  ASSERT_TRUE(points.ok());
  ASSERT_EQ(points->size(), 4u);
  Searcher s = MakeSearcher(config);
  std::vector<json> seen;
  std::vector<RequestId> open;
  auto absorb = [&](const std::vector<SearcherOp>& ops) {
    for (const SearcherOp& op : ops) {
      if (auto* c = std::get_if<CreateTrialOp>(&op)) {
        seen.push_back(c->hparams);
        open.push_back(c->request_id);
      }
    }
  };
  absorb(s.InitialOperations());
  EXPECT_EQ(open.size(), 3u);
  std::vector<SearcherOp> last;
  while (!open.empty()) {
    RequestId id = open.front();
    open.erase(open.begin());
    auto close = s.ValidationCompleted(id, 0, kMaxLength);
    ASSERT_EQ(Strings(close), std::vector<std::string>{ToString(CloseTrialOp{id})});
    last = s.TrialClosed(id);
    absorb(last);
  }
  EXPECT_EQ(seen, *points);
  EXPECT_EQ(Strings(last), std::vector<std::string>{"Shutdown"});
  EXPECT_DOUBLE_EQ(s.Progress(), 1);
}

TEST(SearcherTest, GridMaxTrialsCapsAndInvalidHpIsNotReplaced) {
  ExperimentConfig config = MakeConfig(SearcherName::kGrid, 2, 0);
  Searcher s = MakeSearcher(config);
  EXPECT_EQ(s.InitialOperations().size(), 4u);
  EXPECT_TRUE(s.TrialExitedEarly(1, ExitedReason::kInvalidHp).empty());
  s.ValidationCompleted(2, 0, kMaxLength);
  EXPECT_EQ(Strings(s.TrialClosed(2)), std::vector<std::string>{"Shutdown"});
}

TEST(SearcherTest, SnapshotRestoreMidSearchGivesIdenticalOps) {
  ExperimentConfig config = MakeConfig(SearcherName::kRandom, 5, 2);
  Searcher a = MakeSearcher(config);
  a.InitialOperations();
  a.TrialCreated(1);
  a.ValidationCompleted(1, 0.5, kMaxLength);
  a.TrialClosed(1);
  a.ValidationCompleted(2, 0.5, kMaxLength);  // closing
  json snap = json::parse(a.Snapshot().dump());  // through text, as stored
  absl::StatusOr<Searcher> b = Searcher::Restore(config, kMaxLength, snap);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->Snapshot(), a.Snapshot());
  EXPECT_EQ(b->Progress(), a.Progress());

  auto script = [](Searcher& s) {
    std::vector<std::string> out;
    auto add = [&](const std::vector<SearcherOp>& ops) {
      for (auto& x : Strings(ops)) out.push_back(x);
    };
    add(s.TrialClosed(2));
    add(s.TrialExitedEarly(3, ExitedReason::kInvalidHp));
    add(s.ValidationCompleted(4, 0.1, kMaxLength));
    add(s.TrialClosed(4));
    for (RequestId id = 5; id <= 8; ++id) {
      add(s.ValidationCompleted(id, 0.1, kMaxLength));
      add(s.TrialClosed(id));
    }
    return out;
  };
  std::vector<std::string> ops_a = script(a);
  std::vector<std::string> ops_b = script(*b);
  EXPECT_EQ(ops_a, ops_b);
  EXPECT_EQ(ops_a.back(), "Shutdown");
}

TEST(SearcherTest, RestoreRejectsBadSnapshots) {
  ExperimentConfig config = MakeConfig(SearcherName::kRandom, 5, 2);
  Searcher a = MakeSearcher(config);
  json snap = a.Snapshot();
  EXPECT_EQ(Searcher::Restore(config, kMaxLength, json::object()).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExperimentConfig grid = MakeConfig(SearcherName::kGrid);
  absl::Status st = Searcher::Restore(grid, kMaxLength, snap).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("'random'"));
}

TEST(SearcherTest, Errors) {
  EXPECT_EQ(NewSearchMethod(MakeConfig(SearcherName::kRandom, 0), kMaxLength).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewSearchMethod(MakeConfig(SearcherName::kSingle), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(NewSearchMethod(MakeConfig(SearcherName::kAdaptiveAsha, 4), kMaxLength).ok());
  EXPECT_TRUE(NewSearchMethod(MakeConfig(SearcherName::kAsyncHalving, 4), kMaxLength).ok());
  EXPECT_EQ(NewSearchMethod(MakeConfig(SearcherName::kAdaptiveAsha, 0), kMaxLength).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewSearchMethod(MakeConfig(SearcherName::kAsyncHalving, 0), kMaxLength).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExperimentConfig no_count = MakeConfig(SearcherName::kGrid);
  no_count.hyperparameters["lr"] = Hyperparameter::Double(0.1, 0.2);
  EXPECT_EQ(NewSearchMethod(no_count, kMaxLength).status().code(), absl::StatusCode::kInvalidArgument);
}

// Each open trial counts the fraction of max_length it trained; one whose
// final validation asked for its close counts whole (issue 45).
TEST(SearcherTest, ProgressCountsTheFractionOpenTrialsTrained) {
  ExperimentConfig config = MakeConfig(SearcherName::kRandom, 4, 2);
  Searcher s = MakeSearcher(config);
  s.InitialOperations();
  s.TrialCreated(1);
  s.TrialCreated(2);
  const double max = static_cast<double>(kMaxLength);
  EXPECT_EQ(s.Progress(), 0);
  EXPECT_DOUBLE_EQ(s.ProgressWithTraining({{1, 0.6 * max}, {2, 0.2 * max}}), 0.8 / 4);
  EXPECT_DOUBLE_EQ(s.ProgressWithTraining({{1, 2 * max}}), 1.0 / 4);  // at most max_length
  s.ValidationCompleted(2, 0.3, kMaxLength);  // Close(2)
  EXPECT_DOUBLE_EQ(s.ProgressWithTraining({{1, 0.6 * max}}), 1.6 / 4);
  s.TrialClosed(2);
  EXPECT_DOUBLE_EQ(s.ProgressWithTraining({{1, 0.6 * max}}), 1.6 / 4);
  EXPECT_DOUBLE_EQ(s.Progress(), 1.0 / 4);
}

}  // namespace
}  // namespace master
}  // namespace det
