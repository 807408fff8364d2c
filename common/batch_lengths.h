// A training plan's lengths in batches: searcher.max_length,
// min_validation_period and min_checkpoint_period converted with the global
// batch size and the epoch length. The one place the master (experiment
// creation and recovery, search previews) and the trial runtime do this.
//
//   DET_ASSIGN_OR_RETURN(BatchLengths lengths, ResolveBatchLengths(config, kHint));
//   Searcher::Create(config, lengths.max_length);
#ifndef DET_COMMON_BATCH_LENGTHS_H_
#define DET_COMMON_BATCH_LENGTHS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/experiment_config.h"
#include "common/length.h"
#include "nlohmann/json.hpp"

namespace det {

// The lengths as a config writes them (any unit).
struct TrainingLengths {
  Length max_length{Length::Unit::kBatches, 0};  // searcher.max_length
  std::optional<Length> min_validation_period;
  std::optional<Length> min_checkpoint_period;
  int64_t records_per_epoch = 0;  // 0: the epoch length comes from elsewhere
};

// The lengths in batches.
struct BatchLengths {
  int64_t global_batch_size = 0;
  int64_t batches_per_epoch = 0;  // 0: no epoch length is known
  int64_t max_length = 0;         // searcher.max_length
  int64_t validation_period = 0;  // min_validation_period; 0: none
  int64_t checkpoint_period = 0;  // min_checkpoint_period; 0: none
};

// The lengths of `config` (records_per_epoch included).
TrainingLengths TrainingLengthsOf(const ExperimentConfig& config);

// Converts `lengths` to batches. The epoch length is
// EpochLengthInBatches(global_batch_size, lengths.records_per_epoch,
// fallback_batches_per_epoch) (the trial runtime passes its training data
// loader's length; pass 0 when unknown). Each length converts with ToBatches
// naming its field ("searcher.max_length", "min_validation_period",
// "min_checkpoint_period"), and its error is returned as is: InvalidArgument
// for a negative value, records with global_batch_size <= 0 or an overflow;
// FailedPrecondition for epochs when no epoch length is known. Absent periods
// are 0. Pure and thread-safe.
absl::StatusOr<BatchLengths> ResolveBatchLengths(const TrainingLengths& lengths, int64_t global_batch_size,
                                                 int64_t fallback_batches_per_epoch);

// The lengths of an experiment config as the master sees them, before any
// data loader exists: TrialBatchLengths of FirstHParams(config.hyperparameters,
// 0) (the first sample; used to validate a config, since every trial converts
// with its own hparams). Errors: GlobalBatchSize's InvalidArgument when the
// hyperparameter is present but not a positive integer; a searcher length
// that cannot be converted is InvalidArgument (whatever
// ToBatches said), its message followed by `unknown_epoch_hint` when no epoch
// length is known (e.g. "; set records_per_epoch to use epochs"); the periods'
// errors as in the overload above. Pure and thread-safe.
absl::StatusOr<BatchLengths> ResolveBatchLengths(const ExperimentConfig& config,
                                                 absl::string_view unknown_epoch_hint = "");

// The unit the searcher counts in and its full length: searcher.max_length
// ({epochs: 32} -> epochs, 32) or searcher.time_metric + max_time (batches,
// records, epochs, or the name of a metric the trial reports in its training
// metrics, cumulatively, e.g. tokens). Searchers, ASHA rungs, previews and
// ValidationCompleted lengths are all in this unit.
struct SearcherLength {
  std::string unit = "batches";  // "batches", "records", "epochs" or a metric name
  // Set for batches/records/epochs; unset for a training metric (time_metric).
  std::optional<Length::Unit> length_unit = Length::Unit::kBatches;
  int64_t max = 0;  // max_length / max_time, >= 1 for a parsed config
  bool is_metric() const { return !length_unit.has_value(); }
};

// The searcher length of a parsed config: time_metric + max_time when set,
// otherwise max_length. Pure.
SearcherLength SearcherLengthOf(const SearcherConfig& searcher);

// The searcher length as a cluster trial runs it: SearcherLengthOf(config.
// searcher), except that a length in epochs without records_per_epoch (the
// master cannot convert it to batches) is counted by the trial runtime over
// its own training data loader, as a training metric named "epochs" is:
// is_metric() is then true and unit is "epochs". Pure.
SearcherLength ClusterSearcherLength(const ExperimentConfig& config);

// "2 epochs", "1 batch", "1000 tokens": `value` in the unit of `length`.
std::string FormatSearcherLength(const SearcherLength& length, int64_t value);

// The lengths of ONE trial in batches, with that trial's own hparams: its
// global_batch_size (0 when the hparams have none, fine for lengths in
// batches or a training metric), batches_per_epoch from records_per_epoch,
// max_length = the searcher length in batches (0 when ClusterSearcherLength
// is_metric(): a training metric, or epochs the runtime counts), and
// the periods. Errors as ResolveBatchLengths(lengths, ...) above, except that
// an unknown epoch length (no records_per_epoch) is InvalidArgument followed
// by `unknown_epoch_hint`, and a length in records or epochs without
// hyperparameters.global_batch_size says that field is not set. Pure.
absl::StatusOr<BatchLengths> TrialBatchLengths(const ExperimentConfig& config, const nlohmann::json& hparams,
                                               absl::string_view unknown_epoch_hint = "");

// `units` of the searcher's unit in batches for a trial whose lengths are
// `trial` (from TrialBatchLengths): batches as is, records ceil(units / gbs),
// epochs units * batches_per_epoch. FailedPrecondition for a training
// metric (no batch count is known in advance); ToBatches' errors otherwise.
absl::StatusOr<int64_t> SearcherUnitsToBatches(const SearcherLength& length, int64_t units, const BatchLengths& trial);

}  // namespace det

#endif  // DET_COMMON_BATCH_LENGTHS_H_
