#include "master/search/asha.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/search/preview.h"
#include "master/search/searcher.h"

namespace det::master {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Ops = std::vector<std::string>;

constexpr uint32_t kSeed = 99;

ExperimentConfig AshaConfig(SearcherName name, int64_t max_trials, int64_t concurrency, double divisor) {
  ExperimentConfig config;
  config.hyperparameters = {
      {"global_batch_size", Hyperparameter::Const(32)},
      {"lr", Hyperparameter::Log(-4, -1)},
      {"units", Hyperparameter::Int(8, 64)},
  };
  config.searcher.name = name;
  config.searcher.metric = "loss";
  config.searcher.max_length = Length{Length::Unit::kBatches, 100};
  config.searcher.max_trials = max_trials;
  config.searcher.max_concurrent_trials = concurrency;
  config.searcher.divisor = divisor;
  config.reproducibility.experiment_seed = kSeed;
  return config;
}

// async_halving with `rungs` rungs.
ExperimentConfig Halving(int64_t rungs, int64_t max_trials, int64_t concurrency, double divisor = 2) {
  ExperimentConfig config = AshaConfig(SearcherName::kAsyncHalving, max_trials, concurrency, divisor);
  config.searcher.num_rungs = rungs;
  return config;
}

// The 16/4/5/937 adaptive_asha of the preview example.
ExperimentConfig Adaptive(AshaMode mode, int64_t max_trials = 16, int64_t concurrency = 0) {
  ExperimentConfig config = AshaConfig(SearcherName::kAdaptiveAsha, max_trials, concurrency, 4);
  config.searcher.max_rungs = 5;
  config.searcher.mode = mode;
  config.searcher.max_length = Length{Length::Unit::kBatches, 937};
  return config;
}

Ops Strings(const std::vector<SearcherOp>& ops) {
  Ops out;
  for (const SearcherOp& op : ops) out.push_back(ToString(op));
  return out;
}

// Creates as the searcher draws them: hparams then seed, from one rng seeded
// like the searcher's.
class Expect {
 public:
  explicit Expect(const ExperimentConfig& config) : config_(config), rng_(kSeed) {}
  // The next trial's Create (request id `id`) and its first ValidateAfter.
  Ops Create(RequestId id, int64_t length) {
    CreateTrialOp c{id, SampleHParams(config_.hyperparameters, rng_), 0};
    c.trial_seed = static_cast<uint32_t>(rng_() & 0xffffffffu);
    return {ToString(c), ToString(ValidateAfterOp{id, length})};
  }

 private:
  ExperimentConfig config_;
  std::mt19937_64 rng_;
};

std::string VA(RequestId id, int64_t length) { return ToString(ValidateAfterOp{id, length}); }
std::string Close(RequestId id) { return ToString(CloseTrialOp{id}); }

Ops Cat(std::vector<Ops> parts) {
  Ops out;
  for (Ops& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Searcher Make(const ExperimentConfig& config, int64_t max_length = 100) {
  absl::StatusOr<Searcher> s = Searcher::Create(config, max_length);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
}

// ---------------------------------------------------------------------------
// Layout

TEST(AshaLayoutTest, RungCountsUseExactLogs) {
  EXPECT_EQ(AshaRungsFor(4, 16), 3);  // log4(16) == 2 exactly
  EXPECT_EQ(AshaRungsFor(4, 15), 2);
  EXPECT_EQ(AshaRungsFor(4, 4), 2);
  EXPECT_EQ(AshaRungsFor(4, 3), 1);
  EXPECT_EQ(AshaRungsFor(4, 1), 1);
  EXPECT_EQ(AshaRungsFor(2, 1024), 11);
  EXPECT_EQ(AshaRungsFor(3, 243), 6);
  EXPECT_EQ(AshaMaxRungs(5, 4, 937, 16), 3);
  EXPECT_EQ(AshaMaxRungs(5, 4, 937, 1000), 5);
  EXPECT_EQ(AshaMaxRungs(5, 4, 10, 1000), 2);
  EXPECT_EQ(AshaMaxRungs(2, 4, 937, 1000), 2);
}

TEST(AshaLayoutTest, FloorDivPowIsExactForEveryDivisor) {
  EXPECT_EQ(AshaFloorDivPow(937, 4, 1), 234);
  EXPECT_EQ(AshaFloorDivPow(937, 4, 2), 58);
  EXPECT_EQ(AshaFloorDivPow(937, 4, 0), 937);
  EXPECT_EQ(AshaFloorDivPow(10, 2.5, 1), 4);  // exactly 4, not 3
  EXPECT_EQ(AshaFloorDivPow(100, 2.5, 2), 16);
  EXPECT_EQ(AshaFloorDivPow(5, 1e300, 3), 0);  // divisor^e overflows
}

TEST(AshaLayoutTest, ModeBrackets) {
  EXPECT_THAT(AshaModeBrackets(AshaMode::kAggressive, 3), ElementsAre(3));
  EXPECT_THAT(AshaModeBrackets(AshaMode::kStandard, 1), ElementsAre(1));
  EXPECT_THAT(AshaModeBrackets(AshaMode::kStandard, 2), ElementsAre(2, 1));
  EXPECT_THAT(AshaModeBrackets(AshaMode::kStandard, 3), ElementsAre(3, 2));
  EXPECT_THAT(AshaModeBrackets(AshaMode::kStandard, 4), ElementsAre(4, 3, 2));
  EXPECT_THAT(AshaModeBrackets(AshaMode::kStandard, 5), ElementsAre(5, 4, 3));
  EXPECT_THAT(AshaModeBrackets(AshaMode::kConservative, 3), ElementsAre(3, 2, 1));
}

TEST(AshaLayoutTest, RungLengths) {
  EXPECT_THAT(AshaRungLengths(3, 4, 937), ElementsAre(58, 234, 937));
  EXPECT_THAT(AshaRungLengths(2, 4, 937), ElementsAre(234, 937));
  EXPECT_THAT(AshaRungLengths(1, 4, 937), ElementsAre(937));
  EXPECT_THAT(AshaRungLengths(5, 4, 100), ElementsAre(1, 1, 6, 25, 100));  // at least 1
  EXPECT_THAT(AshaRungLengths(3, 4, 16), ElementsAre(1, 4, 16));
  EXPECT_THAT(AshaRungLengths(3, 2.5, 100), ElementsAre(16, 40, 100));
}

TEST(AshaLayoutTest, BracketTrialSplit) {
  EXPECT_THAT(AshaBracketTrials(16, 4, {3}), ElementsAre(16));
  EXPECT_THAT(AshaBracketTrials(16, 4, {3, 2}), ElementsAre(12, 4));  // 11.6, 4.4 + remainder 1 to the first
  EXPECT_THAT(AshaBracketTrials(16, 4, {3, 2, 1}), ElementsAre(12, 3, 1));  // 10.2, 3.8, 1.9 + 2 to the first
  EXPECT_THAT(AshaBracketTrials(1000, 4, {5, 4, 3}), ElementsAre(707, 220, 73));
  EXPECT_THAT(AshaBracketTrials(2, 4, {3, 2, 1}), ElementsAre(1, 1, 0));  // fewer trials than brackets
  EXPECT_THAT(AshaBracketTrials(3, 100, {3, 2, 1}), ElementsAre(1, 1, 1));  // every bracket >= 1, sum kept
}

TEST(AshaLayoutTest, BracketConcurrencySplit) {
  EXPECT_THAT(AshaBracketConcurrency(0, 4, {12, 4}), ElementsAre(4, 4));  // max(last bracket, divisor)
  EXPECT_THAT(AshaBracketConcurrency(0, 4, {707, 220, 73}), ElementsAre(73, 73, 73));
  EXPECT_THAT(AshaBracketConcurrency(0, 4, {16}), ElementsAre(16));
  EXPECT_THAT(AshaBracketConcurrency(5, 4, {12, 4}), ElementsAre(3, 2));
  EXPECT_THAT(AshaBracketConcurrency(64, 4, {707, 220, 73}), ElementsAre(22, 21, 21));
  EXPECT_THAT(AshaBracketConcurrency(1, 4, {12, 4}), ElementsAre(1, 1));  // at least 1 each
  EXPECT_THAT(AshaBracketConcurrency(100, 4, {12, 4}), ElementsAre(12, 4));  // capped to the trials
}

TEST(AshaLayoutTest, LayoutForEachMode) {
  absl::StatusOr<AshaLayout> aggressive = AshaLayoutFor(Adaptive(AshaMode::kAggressive), 937);
  ASSERT_TRUE(aggressive.ok()) << aggressive.status();
  EXPECT_THAT(aggressive->brackets, ElementsAre(AshaBracket{3, {58, 234, 937}, 16, 16}));

  absl::StatusOr<AshaLayout> standard = AshaLayoutFor(Adaptive(AshaMode::kStandard), 937);
  ASSERT_TRUE(standard.ok());
  EXPECT_THAT(standard->brackets,
              ElementsAre(AshaBracket{3, {58, 234, 937}, 12, 4}, AshaBracket{2, {234, 937}, 4, 4}));

  absl::StatusOr<AshaLayout> conservative = AshaLayoutFor(Adaptive(AshaMode::kConservative, 16, 6), 937);
  ASSERT_TRUE(conservative.ok());
  EXPECT_THAT(conservative->brackets,
              ElementsAre(AshaBracket{3, {58, 234, 937}, 12, 2}, AshaBracket{2, {234, 937}, 3, 2},
                          AshaBracket{1, {937}, 1, 1}));

  ExperimentConfig explicit_rungs = Adaptive(AshaMode::kAggressive);
  explicit_rungs.searcher.bracket_rungs = {1, 3};  // sorted, most rungs first
  absl::StatusOr<AshaLayout> given = AshaLayoutFor(explicit_rungs, 937);
  ASSERT_TRUE(given.ok());
  ASSERT_EQ(given->brackets.size(), 2u);
  EXPECT_EQ(given->brackets[0].num_rungs, 3);
  EXPECT_EQ(given->brackets[1].num_rungs, 1);
}

TEST(AshaLayoutTest, AsyncHalvingLayoutAndDefaultConcurrency) {
  absl::StatusOr<AshaLayout> l = AshaLayoutFor(Halving(3, 20, 0, 4), 100);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(l->brackets, ElementsAre(AshaBracket{3, {6, 25, 100}, 20, 16}));  // 4^2 = 16 in flight
  EXPECT_EQ(AshaLayoutFor(Halving(4, 20, 0, 4), 100)->brackets[0].max_concurrent_trials, 20);  // 64 capped
  EXPECT_EQ(AshaLayoutFor(Halving(1, 20, 0, 4), 100)->brackets[0].max_concurrent_trials, 1);
  EXPECT_EQ(AshaLayoutFor(Halving(3, 20, 30, 4), 100)->brackets[0].max_concurrent_trials, 20);
}

TEST(AshaLayoutTest, Errors) {
  EXPECT_EQ(AshaLayoutFor(Halving(3, 0, 0), 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AshaLayoutFor(Halving(3, 4, -1), 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AshaLayoutFor(Halving(0, 4, 0), 100).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AshaLayoutFor(Halving(3, 4, 0), 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AshaLayoutFor(Halving(3, 4, 0, 1), 100).status().code(), absl::StatusCode::kInvalidArgument);
  ExperimentConfig bad_rungs = Adaptive(AshaMode::kStandard);
  bad_rungs.searcher.bracket_rungs = {0};
  EXPECT_EQ(AshaLayoutFor(bad_rungs, 937).status().code(), absl::StatusCode::kInvalidArgument);
  ExperimentConfig random = AshaConfig(SearcherName::kRandom, 4, 0, 4);
  EXPECT_EQ(AshaLayoutFor(random, 100).status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status st = NewSearchMethod(Adaptive(AshaMode::kStandard, 0), 937).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("max_trials"));
}

// ---------------------------------------------------------------------------
// Promotion variant, scripted

// 3 rungs of 25, 50, 100 batches, divisor 2, 4 trials, 2 at a time.
TEST(AsyncHalvingTest, PromotionsClosesAndShutdown) {
  ExperimentConfig config = Halving(3, 4, 2);
  Searcher s = Make(config);
  Expect e(config);
  Ops c1 = e.Create(1, 25), c2 = e.Create(2, 25), c3 = e.Create(3, 25), c4 = e.Create(4, 25);

  EXPECT_EQ(Strings(s.InitialOperations()), Cat({c1, c2}));
  EXPECT_TRUE(s.TrialCreated(1).empty());
  EXPECT_TRUE(s.TrialCreated(2).empty());
  EXPECT_TRUE(s.ValidationCompleted(1, 0.9, 10).empty());  // before its rung: ignored
  // Rung 0 [1]: floor(1/2) = 0 promoted; 1 waits; a new trial takes its place.
  EXPECT_EQ(Strings(s.ValidationCompleted(1, 0.5, 25)), c3);
  EXPECT_DOUBLE_EQ(s.Progress(), 25.0 / 200);  // plan: 4*25 + 2*25 + 1*50
  EXPECT_TRUE(s.ValidationCompleted(1, 0.1, 25).empty());  // waiting: ignored
  // Rung 0 [2, 1]: the best is 2, promoted.
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.3, 25)), Ops{VA(2, 50)});
  // Rung 0 [2, 3, 1]: still 1 to promote, done: 3 waits, trial 4 is created.
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.4, 25)), c4);
  // Rung 1 [2]: none promoted yet; every trial is created.
  EXPECT_TRUE(s.ValidationCompleted(2, 0.2, 50).empty());
  // Rung 0 [4, 2, 3, 1]: 2 to promote: 4. Rung 0 is complete with nothing
  // training toward it: its waiting trials are closed.
  EXPECT_EQ(Strings(s.ValidationCompleted(4, 0.1, 25)), (Ops{VA(4, 50), Close(3), Close(1)}));
  EXPECT_TRUE(s.TrialClosed(3).empty());
  EXPECT_TRUE(s.TrialClosed(1).empty());
  // Rung 1 [4, 2]: 4 promoted; rung 1 is final: 2 is closed.
  EXPECT_EQ(Strings(s.ValidationCompleted(4, 0.15, 50)), (Ops{VA(4, 100), Close(2)}));
  EXPECT_EQ(Strings(s.ValidationCompleted(4, 0.05, 100)), Ops{Close(4)});  // top rung
  EXPECT_TRUE(s.TrialClosed(2).empty());
  EXPECT_DOUBLE_EQ(s.Progress(), 1);
  EXPECT_EQ(Strings(s.TrialClosed(4)), Ops{"Shutdown"});
  EXPECT_TRUE(s.shutdown());
  EXPECT_EQ(s.ended_trials(), 4);
}

// The waiting trial is promoted when a later result raises floor(n/divisor);
// a later, better result is promoted at once even beyond that number.
TEST(AsyncHalvingTest, PromotesEarlierWaitingTrial) {
  ExperimentConfig config = Halving(2, 4, 1);  // rungs 50, 100
  Searcher s = Make(config);
  Expect e(config);
  Ops c1 = e.Create(1, 50), c2 = e.Create(2, 50), c3 = e.Create(3, 50), c4 = e.Create(4, 50);
  EXPECT_EQ(Strings(s.InitialOperations()), c1);
  EXPECT_EQ(Strings(s.ValidationCompleted(1, 0.1, 50)), c2);
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.5, 50)), Ops{VA(1, 100)});  // 1 resumes, 2 waits
  EXPECT_EQ(Strings(s.ValidationCompleted(1, 0.2, 100)), Cat({{Close(1)}, c3}));
  EXPECT_TRUE(s.TrialClosed(1).empty());
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.05, 50)), Ops{VA(3, 100)});  // best so far: promoted now
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.3, 100)), Cat({{Close(3)}, c4}));
  EXPECT_EQ(Strings(s.ValidationCompleted(4, 0.9, 50)), (Ops{Close(2), Close(4)}));
  EXPECT_TRUE(s.TrialClosed(3).empty());
  EXPECT_TRUE(s.TrialClosed(2).empty());
  EXPECT_EQ(Strings(s.TrialClosed(4)), Ops{"Shutdown"});
}

// Runs the PromotionsClosesAndShutdown script with metrics mapped by `f`.
Ops PromotionScript(bool smaller_is_better, double (*f)(double)) {
  ExperimentConfig config = Halving(3, 4, 2);
  config.searcher.smaller_is_better = smaller_is_better;
  Searcher s = Make(config);
  Ops out = Strings(s.InitialOperations());
  auto add = [&](const std::vector<SearcherOp>& ops) {
    for (const std::string& x : Strings(ops)) out.push_back(x);
  };
  add(s.ValidationCompleted(1, f(0.5), 25));
  add(s.ValidationCompleted(2, f(0.3), 25));
  add(s.ValidationCompleted(3, f(0.4), 25));
  add(s.ValidationCompleted(2, f(0.2), 50));
  add(s.ValidationCompleted(4, f(0.1), 25));
  add(s.TrialClosed(3));
  add(s.TrialClosed(1));
  add(s.ValidationCompleted(4, f(0.15), 50));
  add(s.ValidationCompleted(4, f(0.05), 100));
  add(s.TrialClosed(2));
  add(s.TrialClosed(4));
  return out;
}

TEST(AsyncHalvingTest, LargerIsBetterMirrorsSmallerIsBetter) {
  Ops smaller = PromotionScript(true, [](double m) { return m; });
  Ops larger = PromotionScript(false, [](double m) { return 1 - m; });
  EXPECT_EQ(smaller, larger);
  EXPECT_EQ(smaller.back(), "Shutdown");
  // Same metrics, opposite preference: different decisions.
  EXPECT_NE(PromotionScript(false, [](double m) { return m; }), smaller);
}

TEST(AsyncHalvingTest, ErroredTrialCountsAsWorstResult) {
  ExperimentConfig config = Halving(2, 3, 2);  // rungs 50, 100
  Searcher s = Make(config);
  Expect e(config);
  Ops c1 = e.Create(1, 50), c2 = e.Create(2, 50), c3 = e.Create(3, 50);
  EXPECT_EQ(Strings(s.InitialOperations()), Cat({c1, c2}));
  EXPECT_EQ(Strings(s.TrialExitedEarly(1, ExitedReason::kErrored)), c3);  // counted; room for 3
  EXPECT_TRUE(s.TrialClosed(1).empty());
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.5, 50)), Ops{VA(2, 100)});  // [2, 1(worst)]: 2 promoted
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.4, 50)), Ops{VA(3, 100)});
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.3, 100)), Ops{Close(2)});
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.2, 100)), Ops{Close(3)});
  EXPECT_TRUE(s.TrialClosed(2).empty());
  EXPECT_EQ(Strings(s.TrialClosed(3)), Ops{"Shutdown"});
}

// A waiting trial that errors keeps its result; promoted later, it is recorded
// as the worst result at the next rung instead of training.
TEST(AsyncHalvingTest, PromotedErroredTrialIsWorstAtNextRung) {
  ExperimentConfig config = Halving(3, 2, 1);  // rungs 25, 50, 100
  Searcher s = Make(config);
  Expect e(config);
  Ops c1 = e.Create(1, 25), c2 = e.Create(2, 25);
  EXPECT_EQ(Strings(s.InitialOperations()), c1);
  EXPECT_EQ(Strings(s.ValidationCompleted(1, 0.1, 25)), c2);
  EXPECT_TRUE(s.TrialExitedEarly(1, ExitedReason::kUserCanceled).empty());  // waiting
  // [1, 2]: 1 is promoted but cannot train: worst at rung 1; all created,
  // nothing trains toward rung 0 or 1: 2 is closed.
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.5, 25)), Ops{Close(2)});
  EXPECT_EQ(Strings(s.TrialClosed(2)), Ops{"Shutdown"});
}

TEST(AsyncHalvingTest, NonFiniteMetricRanksWorst) {
  ExperimentConfig config = Halving(2, 2, 2);  // rungs 50, 100
  Searcher s = Make(config);
  s.InitialOperations();
  EXPECT_TRUE(s.ValidationCompleted(1, std::nan(""), 50).empty());
  // [2, 1(NaN)]: 2 is promoted although 0.9 is a poor loss; 1 is closed.
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.9, 50)), (Ops{VA(2, 100), Close(1)}));
  json snap = json::parse(s.Snapshot().dump());  // no NaN in the snapshot
  EXPECT_TRUE(Searcher::Restore(config, 100, snap).ok());
}

TEST(AsyncHalvingTest, AllErroredIsFailure) {
  Searcher s = Make(Halving(2, 2, 2));
  s.InitialOperations();
  EXPECT_TRUE(s.TrialExitedEarly(1, ExitedReason::kErrored).empty());
  EXPECT_EQ(Strings(s.TrialExitedEarly(2, ExitedReason::kErrored)), Ops{"Shutdown(failure)"});
  EXPECT_DOUBLE_EQ(s.Progress(), 1);
}

TEST(AsyncHalvingTest, InvalidHpIsReplacedAndNotCounted) {
  ExperimentConfig config = Halving(2, 2, 1);  // rungs 50, 100
  Searcher s = Make(config);
  Expect e(config);
  Ops c1 = e.Create(1, 50), c2 = e.Create(2, 50), c3 = e.Create(3, 50);
  EXPECT_EQ(Strings(s.InitialOperations()), c1);
  EXPECT_EQ(Strings(s.TrialExitedEarly(1, ExitedReason::kInvalidHp)), c2);
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.5, 50)), c3);
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.6, 50)), (Ops{VA(2, 100), Close(3)}));
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.4, 100)), Ops{Close(2)});
  EXPECT_TRUE(s.TrialClosed(3).empty());
  EXPECT_EQ(Strings(s.TrialClosed(2)), Ops{"Shutdown"});
  EXPECT_EQ(s.trials().size(), 3u);
}

// A promoted trial found invalid later: its results leave every rung and a
// replacement competes for the promotion it held.
TEST(AsyncHalvingTest, InvalidHpAfterPromotion) {
  ExperimentConfig config = Halving(2, 2, 2);
  Searcher s = Make(config);
  Expect e(config);
  Ops c1 = e.Create(1, 50), c2 = e.Create(2, 50), c3 = e.Create(3, 50);
  EXPECT_EQ(Strings(s.InitialOperations()), Cat({c1, c2}));
  EXPECT_TRUE(s.ValidationCompleted(1, 0.1, 50).empty());
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.5, 50)), (Ops{VA(1, 100), Close(2)}));
  EXPECT_EQ(Strings(s.TrialExitedEarly(1, ExitedReason::kInvalidHp)), c3);
  EXPECT_TRUE(s.TrialClosed(2).empty());
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.3, 50)), Ops{VA(3, 100)});
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.2, 100)), Ops{Close(3)});
  EXPECT_EQ(Strings(s.TrialClosed(3)), Ops{"Shutdown"});
}

TEST(AsyncHalvingTest, ClosedWhileTrainingCountsAsCanceled) {
  ExperimentConfig config = Halving(2, 2, 1);
  Searcher s = Make(config);
  Expect e(config);
  Ops c1 = e.Create(1, 50), c2 = e.Create(2, 50);
  EXPECT_EQ(Strings(s.InitialOperations()), c1);
  EXPECT_EQ(Strings(s.TrialClosed(1)), c2);  // not asked to close: as kUserCanceled
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.5, 50)), Ops{VA(2, 100)});
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.5, 100)), Ops{Close(2)});
  EXPECT_EQ(Strings(s.TrialClosed(2)), Ops{"Shutdown"});
}

// ---------------------------------------------------------------------------
// stop_once variant, scripted

TEST(AsyncHalvingStopOnceTest, ContinuesTopFractionStopsTheRest) {
  ExperimentConfig config = Halving(3, 4, 2);  // rungs 25, 50, 100
  config.searcher.stop_once = true;
  Searcher s = Make(config);
  Expect e(config);
  Ops c1 = e.Create(1, 25), c2 = e.Create(2, 25), c3 = e.Create(3, 25), c4 = e.Create(4, 25);
  EXPECT_EQ(Strings(s.InitialOperations()), Cat({c1, c2}));
  // Rung 0 [1]: index 0 < max(1, floor(1/2)) = 1: continues.
  EXPECT_EQ(Strings(s.ValidationCompleted(1, 0.5, 25)), Ops{VA(1, 50)});
  // Rung 0 [1, 2]: index 1 >= max(1, 1): stopped; room for trial 3.
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.6, 25)), Cat({{Close(2)}, c3}));
  // A tie ranks the new result first: [3, 1, 2], index 0: continues.
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.5, 25)), Ops{VA(3, 50)});
  EXPECT_TRUE(s.TrialClosed(2).empty());
  EXPECT_EQ(Strings(s.ValidationCompleted(1, 0.4, 50)), Ops{VA(1, 100)});
  // One validation at 100 is judged at rung 1 (continues) and rung 2 (top).
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.3, 100)), Cat({{Close(3)}, c4}));
  EXPECT_EQ(Strings(s.ValidationCompleted(1, 0.2, 100)), Ops{Close(1)});
  // Rung 0 [3, 1, 2, 4]: index 3 >= 2: stopped.
  EXPECT_EQ(Strings(s.ValidationCompleted(4, 0.7, 25)), Ops{Close(4)});
  EXPECT_TRUE(s.TrialClosed(1).empty());
  EXPECT_TRUE(s.TrialClosed(3).empty());
  EXPECT_EQ(Strings(s.TrialClosed(4)), Ops{"Shutdown"});
}

TEST(AsyncHalvingStopOnceTest, LargerIsBetterAndErrored) {
  ExperimentConfig config = Halving(2, 3, 1);  // rungs 50, 100
  config.searcher.stop_once = true;
  config.searcher.smaller_is_better = false;
  Searcher s = Make(config);
  Expect e(config);
  Ops c1 = e.Create(1, 50), c2 = e.Create(2, 50), c3 = e.Create(3, 50), c4 = e.Create(4, 50);
  EXPECT_EQ(Strings(s.InitialOperations()), c1);
  EXPECT_EQ(Strings(s.TrialExitedEarly(1, ExitedReason::kErrored)), c2);  // worst at rung 0
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.1, 50)), Ops{VA(2, 100)});  // [2, 1(worst)]: index 0
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.1, 100)), Cat({{Close(2)}, c3}));
  // [2 (0.1), 3 (0.05), 1]: accuracy 0.05 is worse: index 1 >= max(1, 1).
  EXPECT_EQ(Strings(s.ValidationCompleted(3, 0.05, 50)), Ops{Close(3)});
  EXPECT_TRUE(s.TrialClosed(2).empty());
  EXPECT_EQ(Strings(s.TrialExitedEarly(3, ExitedReason::kInvalidHp)), c4);  // replaced even when closing
  EXPECT_EQ(Strings(s.ValidationCompleted(4, 0.9, 50)), Ops{VA(4, 100)});  // [4, 2, 1]: index 0
  EXPECT_EQ(Strings(s.ValidationCompleted(4, 0.9, 100)), Ops{Close(4)});
  EXPECT_EQ(Strings(s.TrialClosed(4)), Ops{"Shutdown"});
}

// ---------------------------------------------------------------------------
// adaptive_asha

// bracket_order: parallel, Determined's: each bracket its share of
// max_concurrent_trials, created round robin.
TEST(AdaptiveAshaTest, InitialTrialsRoundRobinOverBrackets) {
  ExperimentConfig config = Adaptive(AshaMode::kStandard, 16, 4);  // 2 + 2 in flight
  config.searcher.options.bracket_order = BracketOrder::kParallel;
  Searcher s = Make(config, 937);
  Expect e(config);
  Ops c1 = e.Create(1, 58), c2 = e.Create(2, 234), c3 = e.Create(3, 58), c4 = e.Create(4, 234);
  Ops c5 = e.Create(5, 234), c6 = e.Create(6, 58);
  EXPECT_EQ(Strings(s.InitialOperations()), Cat({c1, c2, c3, c4}));
  EXPECT_EQ(s.TrialBracket(1), 0);
  EXPECT_EQ(s.TrialBracket(2), 1);
  // A bracket refills its own share.
  EXPECT_EQ(Strings(s.ValidationCompleted(2, 0.5, 234)), c5);
  EXPECT_EQ(s.TrialBracket(5), 1);
  EXPECT_EQ(Strings(s.ValidationCompleted(1, 0.5, 58)), c6);
  EXPECT_EQ(s.TrialBracket(6), 0);
}

// Drives a searcher to its end: validations complete in an order drawn from
// `rng` (not FIFO), metrics random, some trials error or are invalid.
struct Driver {
  std::mt19937_64 rng{7};
  std::vector<RequestId> training;     // have an outstanding ValidateAfter
  std::map<RequestId, int64_t> target;  // its length
  std::vector<RequestId> closing;
  bool errors = false;
  Ops log;

  void Absorb(const std::vector<SearcherOp>& ops) {
    for (const SearcherOp& op : ops) {
      log.push_back(ToString(op));
      if (auto* v = std::get_if<ValidateAfterOp>(&op)) {
        training.push_back(v->request_id);
        target[v->request_id] = v->length;
      } else if (auto* c = std::get_if<CloseTrialOp>(&op)) {
        closing.push_back(c->request_id);
      }
    }
  }
  // One event; false when there is nothing left to do.
  bool Step(Searcher& s) {
    if (training.empty() && closing.empty()) return false;
    uint64_t r = rng();
    if (!closing.empty() && (training.empty() || r % 3 == 0)) {
      RequestId id = closing[static_cast<size_t>(r % closing.size())];
      closing.erase(std::find(closing.begin(), closing.end(), id));
      Absorb(s.TrialClosed(id));
      return true;
    }
    size_t i = static_cast<size_t>((r >> 8) % training.size());
    RequestId id = training[i];
    training.erase(training.begin() + static_cast<std::ptrdiff_t>(i));
    if (errors && (r >> 20) % 29 == 0) {
      Absorb(s.TrialExitedEarly(id, ExitedReason::kErrored));
    } else if (errors && (r >> 20) % 31 == 0) {
      Absorb(s.TrialExitedEarly(id, ExitedReason::kInvalidHp));
    } else {
      double metric = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      Absorb(s.ValidationCompleted(id, metric, target[id]));
    }
    return true;
  }
};

void CheckRunsToShutdown(const ExperimentConfig& config, bool errors) {
  SCOPED_TRACE(ExperimentConfigToJson(config)["searcher"].dump());
  absl::StatusOr<AshaLayout> layout = AshaLayoutFor(config, 937);
  ASSERT_TRUE(layout.ok());
  Searcher s = Make(config, 937);
  Driver d;
  d.errors = errors;
  d.Absorb(s.InitialOperations());
  double last_progress = 0;
  for (int steps = 0; d.Step(s); ++steps) {
    ASSERT_LT(steps, 100000);
    // Concurrency per bracket, or of all when they share the slots.
    std::vector<int64_t> in_flight(layout->brackets.size(), 0);
    for (RequestId id : d.training) ++in_flight[static_cast<size_t>(s.TrialBracket(id))];
    if (layout->shared_concurrency > 0) {
      ASSERT_LE(static_cast<int64_t>(d.training.size()), layout->shared_concurrency);
    } else {
      for (size_t b = 0; b < in_flight.size(); ++b) {
        ASSERT_LE(in_flight[b], layout->brackets[b].max_concurrent_trials) << "bracket " << b;
      }
    }
    EXPECT_GE(s.Progress(), last_progress);
    last_progress = s.Progress();
  }
  EXPECT_TRUE(s.shutdown());
  EXPECT_EQ(d.log.back().rfind("Shutdown", 0), 0u);
  EXPECT_EQ(s.ended_trials(), static_cast<int64_t>(s.trials().size()));
  EXPECT_DOUBLE_EQ(s.Progress(), 1);
  // Every bracket created its trials (plus invalid-hp replacements).
  std::vector<int64_t> created(layout->brackets.size(), 0);
  for (const auto& [id, state] : s.trials()) ++created[static_cast<size_t>(s.TrialBracket(id))];
  for (size_t b = 0; b < created.size(); ++b) EXPECT_GE(created[b], layout->brackets[b].max_trials);
  if (!errors) {
    for (size_t b = 0; b < created.size(); ++b) EXPECT_EQ(created[b], layout->brackets[b].max_trials);
  }
}

TEST(AdaptiveAshaTest, EveryModeAndVariantRunsToShutdownWithinConcurrency) {
  for (AshaMode mode : {AshaMode::kAggressive, AshaMode::kStandard, AshaMode::kConservative}) {
    for (bool stop_once : {false, true}) {
      for (bool smaller : {true, false}) {
        for (int64_t concurrency : {0, 1, 5, 64}) {
          for (bool errors : {false, true}) {
            for (BracketOrder order : {BracketOrder::kAggressiveFirst, BracketOrder::kParallel}) {
              ExperimentConfig config = Adaptive(mode, 100, concurrency);
              config.searcher.stop_once = stop_once;
              config.searcher.smaller_is_better = smaller;
              config.searcher.options.bracket_order = order;
              CheckRunsToShutdown(config, errors);
            }
          }
        }
      }
    }
  }
}

// bracket_order: aggressive_first (the default), Hyperband's order: the
// brackets share max_concurrent_trials, and a bracket starts trials only once
// every bracket with more rungs has created all of its own; so the first
// trials are the aggressive bracket's, as in mode: aggressive.
TEST(AdaptiveAshaTest, AggressiveFirstFillsEachBracketBeforeTheNext) {
  for (AshaMode mode : {AshaMode::kStandard, AshaMode::kConservative}) {
    ExperimentConfig config = Adaptive(mode, 64, 4);
    SCOPED_TRACE(ExperimentConfigToJson(config)["searcher"].dump());
    absl::StatusOr<AshaLayout> layout = AshaLayoutFor(config, 937);
    ASSERT_TRUE(layout.ok());
    ASSERT_GE(layout->brackets.size(), 2u);
    ASSERT_EQ(layout->shared_concurrency, 4);
    Searcher s = Make(config, 937);
    Expect e(config);
    const int64_t first_rung = layout->brackets[0].rung_lengths[0];
    EXPECT_EQ(Strings(s.InitialOperations()), Cat({e.Create(1, first_rung), e.Create(2, first_rung),
                                                   e.Create(3, first_rung), e.Create(4, first_rung)}));
    Driver d;
    for (RequestId id = 1; id <= 4; ++id) {
      d.training.push_back(id);
      d.target[id] = first_rung;
    }
    for (int steps = 0; d.Step(s); ++steps) {
      ASSERT_LT(steps, 100000);
      ASSERT_LE(d.training.size(), 4u);
    }
    EXPECT_TRUE(s.shutdown());
    // Request ids are in creation order: their brackets never go back.
    int64_t last_bracket = 0;
    std::vector<int64_t> created(layout->brackets.size(), 0);
    for (const auto& [id, state] : s.trials()) {
      const int64_t b = s.TrialBracket(id);
      EXPECT_GE(b, last_bracket) << "trial " << id;
      last_bracket = b;
      ++created[static_cast<size_t>(b)];
    }
    for (size_t b = 0; b < created.size(); ++b) EXPECT_EQ(created[b], layout->brackets[b].max_trials);
  }
  // Without a limit (max_concurrent_trials 0) each bracket keeps its own.
  absl::StatusOr<AshaLayout> unlimited = AshaLayoutFor(Adaptive(AshaMode::kStandard, 64, 0), 937);
  ASSERT_TRUE(unlimited.ok());
  EXPECT_EQ(unlimited->shared_concurrency, 0);
}

// bracket_order is parsed, echoed and checked; a bad value names the field.
TEST(AdaptiveAshaTest, BracketOrderIsParsedEchoedAndChecked) {
  const std::string base =
      "name: x\nhyperparameters:\n  lr: {type: double, minval: 0, maxval: 1}\nsearcher:\n  name: adaptive_asha\n"
      "  metric: loss\n  max_length: {batches: 256}\n  max_trials: 64\n  max_concurrent_trials: 2\n";
  auto config = ParseExperimentConfig(base, "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["bracket_order"], "aggressive_first");
  absl::StatusOr<AshaLayout> layout = AshaLayoutFor(*config, 256);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->shared_concurrency, 2);
  config = ParseExperimentConfig(base + "  bracket_order: parallel\n", "c.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->searcher.options.bracket_order, BracketOrder::kParallel);
  EXPECT_EQ(ExperimentConfigToJson(*config)["searcher"]["bracket_order"], "parallel");
  layout = AshaLayoutFor(*config, 256);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->shared_concurrency, 0);
  config = ParseExperimentConfig(base + "  bracket_order: sideways\n", "c.yaml");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("searcher.bracket_order"));
}

TEST(AdaptiveAshaTest, SnapshotRestoreMidSearchGivesIdenticalOps) {
  for (bool stop_once : {false, true}) {
    ExperimentConfig config = Adaptive(AshaMode::kConservative, 60, 7);
    config.searcher.stop_once = stop_once;
    Searcher a = Make(config, 937);
    Driver d;
    d.errors = true;
    d.Absorb(a.InitialOperations());
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(d.Step(a));
    json snap = json::parse(a.Snapshot().dump());  // through text, as stored
    absl::StatusOr<Searcher> b = Searcher::Restore(config, 937, snap);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->Snapshot(), a.Snapshot());
    EXPECT_EQ(b->Progress(), a.Progress());
    Driver da = d, db = d;
    da.log.clear();
    db.log.clear();
    while (da.Step(a)) {
    }
    while (db.Step(*b)) {
    }
    EXPECT_EQ(da.log, db.log);
    ASSERT_FALSE(da.log.empty());
    EXPECT_EQ(da.log.back().rfind("Shutdown", 0), 0u);
  }
}

TEST(AdaptiveAshaTest, RestoreRejectsMismatchedSnapshots) {
  Searcher a = Make(Adaptive(AshaMode::kStandard), 937);
  a.InitialOperations();
  json snap = a.Snapshot();
  absl::Status other_mode = Searcher::Restore(Adaptive(AshaMode::kAggressive), 937, snap).status();
  EXPECT_EQ(other_mode.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Searcher::Restore(Adaptive(AshaMode::kStandard), 500, snap).status().code(),
            absl::StatusCode::kInvalidArgument);  // other rung lengths
  absl::Status random = Searcher::Restore(AshaConfig(SearcherName::kRandom, 16, 0, 4), 937, snap).status();
  EXPECT_EQ(random.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(random.message()), HasSubstr("'adaptive_asha'"));
  json broken = snap;
  broken["method"]["trials"][0][1] = 9;  // no such bracket
  EXPECT_EQ(Searcher::Restore(Adaptive(AshaMode::kStandard), 937, broken).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Searcher::Restore(Adaptive(AshaMode::kStandard), 937, snap).ok());
}

// ---------------------------------------------------------------------------
// Preview

TEST(PreviewTest, AdaptiveAshaSixteenTrials) {
  ExperimentConfig config = Adaptive(AshaMode::kStandard);
  absl::StatusOr<SearchPreview> p = PreviewSearch(config, 937, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->brackets.size(), 2u);
  const PreviewBracket& b0 = p->brackets[0];
  const PreviewBracket& b1 = p->brackets[1];
  EXPECT_EQ(b0.num_trials, 12);
  ASSERT_EQ(b0.rungs.size(), 3u);
  EXPECT_EQ(b0.rungs[0].batches_per_trial, 58);
  EXPECT_EQ(b0.rungs[1].batches_per_trial, 234);
  EXPECT_EQ(b0.rungs[2].batches_per_trial, 937);
  EXPECT_EQ(b0.rungs[0].num_trials, 12);
  EXPECT_GE(b0.rungs[1].num_trials, 3);  // floor(12/4), more when a late result is best
  EXPECT_EQ(b1.num_trials, 4);
  ASSERT_EQ(b1.rungs.size(), 2u);
  EXPECT_EQ(b1.rungs[0].batches_per_trial, 234);
  EXPECT_EQ(b1.rungs[1].batches_per_trial, 937);
  EXPECT_EQ(b1.rungs[0].num_trials, 4);
  EXPECT_GE(b1.rungs[1].num_trials, 1);
  ASSERT_EQ(p->trials.size(), 16u);
  int64_t total = 0;
  for (size_t i = 0; i < p->trials.size(); ++i) {
    const PreviewTrial& t = p->trials[i];
    EXPECT_EQ(t.request_id, static_cast<RequestId>(i + 1));
    EXPECT_TRUE(std::is_sorted(t.validation_points.begin(), t.validation_points.end()));
    EXPECT_EQ(t.total_batches, t.validation_points.back());
    EXPECT_EQ(t.stopped_early, t.total_batches < 937);
    EXPECT_TRUE(t.hparams.contains("lr"));
    total += t.total_batches;
  }
  EXPECT_EQ(p->total_batches, total);
  // Deterministic.
  absl::StatusOr<SearchPreview> again = PreviewSearch(config, 937, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(FormatPreview(*again), FormatPreview(*p));
  std::string text = FormatPreview(*p);
  EXPECT_THAT(text, HasSubstr("Bracket 1: 3 rungs, 12 trials\n"));
  EXPECT_THAT(text, HasSubstr("Bracket 2: 2 rungs, 4 trials\n"));
  EXPECT_THAT(text, HasSubstr("Total: 16 trials"));
}

TEST(PreviewTest, FormatIsStable) {
  ExperimentConfig config = Adaptive(AshaMode::kStandard);
  absl::StatusOr<SearchPreview> p = PreviewSearch(config, 937, 0);
  ASSERT_TRUE(p.ok());
  // Bracket 1's rung 1 holds 3 trials: floor(3/4) = 0 reach its top rung
  // (Determined's behaviour for so few trials). 9*58 + 3*234 + 3*234 + 937.
  EXPECT_EQ(FormatPreview(*p),
            "Searcher: adaptive_asha, max_length 937 batches\n"
            "Bracket 1: 3 rungs, 12 trials\n"
            "  Rung  Trials  Batches per trial\n"
            "     0      12                 58\n"
            "     1       3                234\n"
            "     2       0                937\n"
            "Bracket 2: 2 rungs, 4 trials\n"
            "  Rung  Trials  Batches per trial\n"
            "     0       4                234\n"
            "     1       1                937\n"
            "Total: 16 trials (15 stopped early), 2863 batches\n");
}

TEST(PreviewTest, RandomIsOneRung) {
  ExperimentConfig config = AshaConfig(SearcherName::kRandom, 3, 0, 4);
  absl::StatusOr<SearchPreview> p = PreviewSearch(config, 100, 5);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->brackets.size(), 1u);
  ASSERT_EQ(p->brackets[0].rungs.size(), 1u);
  EXPECT_EQ(p->brackets[0].rungs[0].num_trials, 3);
  EXPECT_EQ(p->brackets[0].rungs[0].batches_per_trial, 100);
  EXPECT_EQ(p->total_batches, 300);
  for (const PreviewTrial& t : p->trials) {
    EXPECT_THAT(t.validation_points, ElementsAre(100));
    EXPECT_FALSE(t.stopped_early);
  }
  EXPECT_EQ(FormatPreview(*p),
            "Searcher: random, max_length 100 batches\n"
            "Bracket 1: 1 rung, 3 trials\n"
            "  Rung  Trials  Batches per trial\n"
            "     0       3                100\n"
            "Total: 3 trials (0 stopped early), 300 batches\n");
}

TEST(PreviewTest, StopOnceAndErrors) {
  ExperimentConfig config = Adaptive(AshaMode::kConservative, 40);
  config.searcher.stop_once = true;
  absl::StatusOr<SearchPreview> p = PreviewSearch(config, 937, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->trials.size(), 40u);
  EXPECT_EQ(PreviewSearch(config, 0, 3).status().code(), absl::StatusCode::kInvalidArgument);
}

// Progress moves with the trials (issue 45: an experiment showed 0% while
// its trials were 60% through their first rung): a trial training toward
// rung k counts what it trained beyond rung k - 1, at most that rung's
// increment; a waiting trial counts only what its validations credited.
TEST(AsyncHalvingTest, ProgressCountsWhatTrialsTrainedTowardTheirRung) {
  ExperimentConfig config = Halving(3, 4, 2);  // rungs 25, 50, 100; plan 200
  Searcher s = Make(config);
  s.InitialOperations();
  s.TrialCreated(1);
  s.TrialCreated(2);
  EXPECT_EQ(s.Progress(), 0);
  EXPECT_DOUBLE_EQ(s.ProgressWithTraining({{1, 15}, {2, 15}}), 30.0 / 200);  // 60% of rung 0 each
  EXPECT_DOUBLE_EQ(s.ProgressWithTraining({{1, 40}}), 25.0 / 200);           // at most the rung
  EXPECT_DOUBLE_EQ(s.ProgressWithTraining({{7, 40}}), 0);                   // unknown trial
  s.ValidationCompleted(1, 0.5, 25);  // credited 25; 1 waits
  EXPECT_DOUBLE_EQ(s.ProgressWithTraining({{1, 25}, {2, 10}}), 35.0 / 200);
  s.ValidationCompleted(2, 0.3, 25);  // credited 25; 2 promoted toward 50
  EXPECT_DOUBLE_EQ(s.ProgressWithTraining({{2, 35}}), (50.0 + 10) / 200);
  EXPECT_DOUBLE_EQ(s.Progress(), 50.0 / 200);
}

}  // namespace
}  // namespace det::master
