// Helpers shared by the ASHA tests (asha_test.cc, asha_second_chance_test.cc):
// configs, a searcher made from one, and a driver that runs a searcher to its
// end with validations completing in a seeded random order.
#ifndef DET_MASTER_SEARCH_ASHA_TEST_UTIL_H_
#define DET_MASTER_SEARCH_ASHA_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "master/search/searcher.h"

namespace det {
namespace master {
namespace asha_test {

using Ops = std::vector<std::string>;

inline constexpr uint32_t kSeed = 99;

inline ExperimentConfig AshaConfig(SearcherName name, int64_t max_trials, int64_t concurrency, double divisor) {
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
inline ExperimentConfig Halving(int64_t rungs, int64_t max_trials, int64_t concurrency, double divisor = 2) {
  ExperimentConfig config = AshaConfig(SearcherName::kAsyncHalving, max_trials, concurrency, divisor);
  config.searcher.num_rungs = rungs;
  return config;
}

// The 16/4/5/937 adaptive_asha of the preview example.
inline ExperimentConfig Adaptive(AshaMode mode, int64_t max_trials = 16, int64_t concurrency = 0) {
  ExperimentConfig config = AshaConfig(SearcherName::kAdaptiveAsha, max_trials, concurrency, 4);
  config.searcher.max_rungs = 5;
  config.searcher.mode = mode;
  config.searcher.max_length = Length{Length::Unit::kBatches, 937};
  return config;
}

inline Ops Strings(const std::vector<SearcherOp>& ops) {
  Ops out;
  for (const SearcherOp& op : ops) out.push_back(ToString(op));
  return out;
}

inline std::string VA(RequestId id, int64_t length) { return ToString(ValidateAfterOp{id, length}); }
inline std::string Close(RequestId id) { return ToString(CloseTrialOp{id}); }

inline Ops Cat(std::vector<Ops> parts) {
  Ops out;
  for (Ops& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

inline Searcher Make(const ExperimentConfig& config, int64_t max_length = 100) {
  absl::StatusOr<Searcher> s = Searcher::Create(config, max_length);
  EXPECT_TRUE(s.ok()) << s.status();
  return std::move(*s);
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

}  // namespace asha_test
}  // namespace master
}  // namespace det

#endif  // DET_MASTER_SEARCH_ASHA_TEST_UTIL_H_
