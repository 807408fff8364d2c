// The facts shown about checkpoints, validations and an experiment's
// progress, computed from what the trials reported: pure functions over
// store rows (no I/O, no locks), so gRPC, REST, det-cli and the dashboard all
// show the same numbers and a unit test can pin each rule.
#ifndef DET_MASTER_CORE_CHECKPOINT_FACTS_H_
#define DET_MASTER_CORE_CHECKPOINT_FACTS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/batch_lengths.h"
#include "master/store/store.h"

namespace det::master {

// Sum of the files' sizes (negative entries count 0; saturates at INT64_MAX).
int64_t CheckpointSizeBytes(const std::map<std::string, int64_t>& resources);

// Epochs at `total_batches` for an epoch of `batches_per_epoch` batches
// (ceil(records_per_epoch / global_batch_size)); 0 when that is unknown
// (<= 0): the caller then shows "unknown".
double EpochsAt(int64_t total_batches, int64_t batches_per_epoch);

// Completes a checkpoint row read from the store with what follows from
// its validation (row.validation_metrics, which the store fills) and its
// trial's lengths: searcher_metric = validation_metrics[`metric`] when the
// row has none (a row stored before its validation was reported);
// total_epochs, when 0, = EpochsAt(total_batches, lengths.batches_per_epoch);
// total_records = total_batches * lengths.global_batch_size (0 if unknown).
void CompleteCheckpointRow(const std::string& metric, const BatchLengths& lengths, CheckpointRow* row);

// Whether searcher-metric value `a` is better than `b` (NaN is never better;
// anything is better than NaN).
bool BetterMetric(bool smaller_is_better, double a, double b);

// The best checkpoint among `rows`: COMPLETED, with a searcher metric that is
// not NaN, best by `smaller_is_better`, ties to the later total_batches, then
// the later report. nullptr when there is none.
const CheckpointRow* BestCheckpoint(const std::vector<CheckpointRow>& rows, bool smaller_is_better);

// The validation with the best value of `metric` among `validations`
// (ties: the earliest batches), or nullptr when none has a non-NaN value.
const MetricRow* BestValidation(const std::vector<MetricRow>& validations, const std::string& metric,
                                bool smaller_is_better);

// One trial's part of an experiment's progress, in the searcher's unit: the
// length of its pending searcher operation (`target_units`, 0: none) in
// this trial's batches (`target_batches`, 0: unknown) and the batches it has
// trained (`total_batches`). Returns the units trained toward that target,
// target_units * total_batches / target_batches, at most target_units; 0
// without a target.
double TrainedUnits(int64_t target_units, int64_t target_batches, int64_t total_batches);

}  // namespace det::master

#endif  // DET_MASTER_CORE_CHECKPOINT_FACTS_H_
