// Previewing a search (Determined's `det preview-search`): runs the Searcher
// of a config against simulated trials and summarizes what it would do.
//
//   absl::StatusOr<SearchPreview> p = PreviewSearch(config, SearcherLengthOf(config.searcher).max, 0);
//   std::cout << FormatPreview(*p);
//
// Pure and deterministic: the searcher draws from the config's experiment
// seed, the simulated metrics from `simulation_seed`. Thread-safe.
#ifndef DET_MASTER_SEARCH_PREVIEW_H_
#define DET_MASTER_SEARCH_PREVIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/batch_lengths.h"
#include "common/experiment_config.h"
#include "master/search/searcher.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {

struct PreviewTrial {
  RequestId request_id = 0;  // creation order, from 1
  nlohmann::json hparams;
  // The length (searcher units) of each validation the searcher asked for,
  // in order (non-decreasing; the last is where the trial stops).
  std::vector<int64_t> validation_points;
  int64_t total_length = 0;    // what the trial trains, in searcher units
  int64_t total_batches = 0;   // the same in batches; 0 when not constant (below)
  bool stopped_early = false;  // stopped before max_length
  // pbt: the trial it was copied from (0: none) and the length it started
  // at (its parent's); total_length counts only what it trains itself.
  RequestId parent = 0;
  int64_t start_length = 0;
  int64_t bracket = 0;         // index into SearchPreview::brackets
};

struct PreviewRung {
  int64_t rung = 0;       // 0-based
  int64_t num_trials = 0;  // trials that validate at this rung
  int64_t length_per_trial = 0;   // what a trial has trained here, in searcher units
  int64_t batches_per_trial = 0;  // the same in batches; 0 when not constant
};

struct PreviewBracket {
  int64_t bracket = 0;     // 0-based; most rungs first
  int64_t num_trials = 0;  // trials of the bracket
  std::vector<PreviewRung> rungs;
};

struct SearchPreview {
  std::string searcher;  // "adaptive_asha", ...
  // The searcher's unit and max (length.max = the max_length given).
  SearcherLength length;
  // Whether every trial converts lengths to the same batches: the unit is
  // batches, records or epochs, global_batch_size is absent or constant (not
  // searched) and the conversion succeeds. Otherwise the *_batches fields are 0.
  bool batches_constant = false;
  int64_t max_length_batches = 0;
  std::vector<PreviewTrial> trials;  // by request_id
  // single, random and grid: one bracket with one rung at max_length.
  // pbt: one bracket whose rungs are the generations (perturb_period, 2x,
  // ..., max_length); a rung counts the trials that validated there.
  std::vector<PreviewBracket> brackets;
  int64_t total_length = 0;   // sum of the trials' total_length
  int64_t total_batches = 0;  // sum of the trials' total_batches
};

// Runs Searcher::Create(config, max_length) (max_length in the searcher's unit,
// SearcherLengthOf(config.searcher)) to its Shutdown against
// simulated trials: operations are carried out in the order returned (FIFO),
// a created trial reports TrialCreated at once, a ValidateAfter trains the
// trial to that length and reports a metric drawn uniformly from [0, 1) with
// an std::mt19937_64 seeded by `simulation_seed` (53 bits per draw, so the
// same everywhere), a Close reports TrialClosed at once. Trial i's rung-k
// count is the number of its validations > k.
// Errors: those of Searcher::Create; Internal if the searcher does not shut
// down (no operation left, or more than 10 million steps).
absl::StatusOr<SearchPreview> PreviewSearch(const ExperimentConfig& config, int64_t max_length,
                                            uint32_t simulation_seed);

// A human table, deterministic (like Determined's preview-search output).
// In batches:
//
//   Searcher: adaptive_asha, max_length 937 batches
//   Bracket 1: 3 rungs, 12 trials
//     Rung  Trials  Batches per trial
//        0      12                 58
//   ...
//   Total: 16 trials (12 stopped early), 12345 batches
//
// In any other unit, lengths in it, with the batches where they are constant:
//
//   Searcher: adaptive_asha, max_length 32 epochs (12512 batches)
//   Bracket 1: 3 rungs, 12 trials
//     Rung  Trials  Length per trial
//        0      12  2 epochs (782 batches)
//
// (time_metric configs say "max_time 1000 tokens").
std::string FormatPreview(const SearchPreview& preview);

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_SEARCH_PREVIEW_H_
