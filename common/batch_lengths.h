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

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/experiment_config.h"
#include "common/length.h"

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
// data loader exists: the global batch size is that of
// FirstHParams(config.hyperparameters, 0) and the epoch length comes from
// records_per_epoch alone. Errors: GlobalBatchSize's InvalidArgument; a
// searcher.max_length that cannot be converted is InvalidArgument (whatever
// ToBatches said), its message followed by `unknown_epoch_hint` when no epoch
// length is known (e.g. "; set records_per_epoch to use epochs"); the periods'
// errors as in the overload above. Pure and thread-safe.
absl::StatusOr<BatchLengths> ResolveBatchLengths(const ExperimentConfig& config,
                                                 absl::string_view unknown_epoch_hint = "");

}  // namespace det

#endif  // DET_COMMON_BATCH_LENGTHS_H_
