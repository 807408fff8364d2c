// The event simulation of bench/search_peers: one for both sides, so that
// det-cpp's searchers and Optuna's train the same trials (the task oracle,
// bench/search_tasks.h) with the same budget accounting and concurrency.
//
// `slots` simulated workers; every running trial trains one batch per time
// unit. Every trial validates every `period` batches and at the end of each
// searcher operation; each validation is an event (batches the whole search
// has trained so far, value). The search ends when the searcher ends it or
// the budget is spent (running trials are cut when the whole search reaches
// `budget` batches; a remainder smaller than the running trials is not
// trained).
//
// det-cpp: the real det::master::Searcher decides; only the validation at the
// end of its ValidateAfter operation is reported to it. Optuna: a
// bench/search_peers_optuna.py subprocess is asked for trials (ask/tell) and
// told every validation (report + should_prune); an unpruned trial runs to
// kTaskMaxLength.
//
// Thread-safe: each call is independent (the task is only read).
#ifndef DET_BENCH_SEARCH_PEERS_SIM_H_
#define DET_BENCH_SEARCH_PEERS_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/search_peers_stats.h"
#include "bench/search_tasks.h"
#include "common/experiment_config.h"

namespace det {
namespace bench {

struct SimOptions {
  int slots = 4;
  int64_t budget = 64 * kTaskMaxLength;  // batches, random search's 64 x 256
  int64_t period = 16;                   // every trial validates every `period` batches
};

struct SearchRun {
  std::vector<ValidationEvent> events;  // in time order
  int64_t total = 0;                    // batches trained
  int64_t trials = 0;                   // trials started
};

// det-cpp's searcher of `config` (whose hyperparameters are task.BaseConfig()'s)
// on `task`. Errors: those of Searcher::Create; Internal when the task
// refuses a searcher's hparams or a validation (a bug of the bench).
absl::StatusOr<SearchRun> RunDetSearch(const SearchTask& task, const ExperimentConfig& config,
                                       const SimOptions& options);

struct OptunaOptions {
  std::string python = "/usr/bin/python3";
  std::string script;          // bench/search_peers_optuna.py
  std::string sampler = "tpe";  // random | tpe
  std::string pruner = "none";  // none | hyperband | sha
  int64_t max_trials = 0;       // 0: as many as the budget takes
};

// Optuna on `task`, seeded with `seed`; trial n gets the trial seed
// OptunaTrialSeed(seed, n). Errors: FailedPrecondition when the interpreter
// cannot start or optuna is missing (the message names python3-optuna and
// deploy/install-deps.sh); Internal for a protocol error or a reply the
// server did not send within 300 s.
absl::StatusOr<SearchRun> RunOptunaSearch(const SearchTask& task, const OptunaOptions& optuna, uint32_t seed,
                                          const SimOptions& options);
uint32_t OptunaTrialSeed(uint32_t search_seed, int64_t trial_number);

}  // namespace bench
}  // namespace det

#endif  // DET_BENCH_SEARCH_PEERS_SIM_H_
