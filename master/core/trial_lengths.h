// An experiment's training lengths as the master runs them: the searcher's
// unit (searcher.max_length, or time_metric + max_time), and each trial's
// conversion of that unit to batches with ITS OWN hyperparameters'
// global_batch_size (a searched batch size gives each trial its own batch
// counts), and the trial's validation/checkpoint periods likewise.
//
//   exp.searcher_length = ExperimentSearcherLength(config, stored_snapshot);
//   InitTrialLengths(exp, trial);               // when a trial is created/loaded
//   SetSearcherTarget(exp, trial, op.length);   // a ValidateAfter(length in units)
//   if (SearcherTargetReached(exp, trial, batches)) ... validate
//
// Pure functions over the runtime structs (core_state.h); the caller holds
// MasterCore's lock.
#ifndef DET_MASTER_CORE_TRIAL_LENGTHS_H_
#define DET_MASTER_CORE_TRIAL_LENGTHS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "common/batch_lengths.h"
#include "common/experiment_config.h"
#include "master/core/core_state.h"
#include "nlohmann/json.hpp"

namespace det::master {

// The key of the searcher snapshot that records the unit it counts in.
inline constexpr char kSnapshotLengthUnit[] = "length_unit";

// The searcher length an experiment runs with. `stored_snapshot`: its stored
// searcher snapshot (null for a new experiment). A snapshot written by an
// older master (no "length_unit") of a config in records or epochs keeps its
// batch plan: the searcher goes on in batches, with max = that config's
// searcher.max_length converted with the first sample's global_batch_size
// (as those masters did); its trials then train the same batches as before.
// Configs in batches are the same numbers either way.
SearcherLength ExperimentSearcherLength(const ExperimentConfig& config, const nlohmann::json& stored_snapshot);

// exp.searcher's Snapshot() with kSnapshotLengthUnit = exp.searcher_length.unit.
nlohmann::json SearcherSnapshot(const ExperimentRuntime& exp);

// Sets trial.lengths from its hparams (TrialBatchLengths). Errors as
// TrialBatchLengths (the first sample was checked at creation, so only an
// odd sample fails).
absl::Status InitTrialLengths(const ExperimentRuntime& exp, TrialRuntime& trial);

// Sets trial.searcher_target = `units` (the searcher's unit) and
// trial.target_batches = its batches for this trial (0 for a training
// metric). Errors as SearcherUnitsToBatches; the trial is unchanged then.
absl::Status SetSearcherTarget(const ExperimentRuntime& exp, TrialRuntime& trial, int64_t units);

// Whether a trial at `batches` has reached its pending searcher target:
// batches >= target_batches, or for a training metric its last reported
// value >= the target. False when no target is pending.
bool SearcherTargetReached(const ExperimentRuntime& exp, const TrialRuntime& trial, int64_t batches);

}  // namespace det::master

#endif  // DET_MASTER_CORE_TRIAL_LENGTHS_H_
