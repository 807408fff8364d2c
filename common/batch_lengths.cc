#include "common/batch_lengths.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/hparams.h"
#include "common/status_macros.h"

namespace det {
namespace {

// Converts the two periods of `lengths` into `out` (whose global batch size
// and epoch length are set).
absl::Status ResolvePeriods(const TrainingLengths& lengths, BatchLengths& out) {
  if (lengths.min_validation_period) {
    DET_ASSIGN_OR_RETURN(out.validation_period, ToBatches(*lengths.min_validation_period, out.global_batch_size,
                                                          out.batches_per_epoch, "min_validation_period"));
  }
  if (lengths.min_checkpoint_period) {
    DET_ASSIGN_OR_RETURN(out.checkpoint_period, ToBatches(*lengths.min_checkpoint_period, out.global_batch_size,
                                                          out.batches_per_epoch, "min_checkpoint_period"));
  }
  return absl::OkStatus();
}

}  // namespace

TrainingLengths TrainingLengthsOf(const ExperimentConfig& config) {
  TrainingLengths lengths;
  lengths.max_length = config.searcher.max_length;
  lengths.min_validation_period = config.min_validation_period;
  lengths.min_checkpoint_period = config.min_checkpoint_period;
  lengths.records_per_epoch = config.records_per_epoch;
  return lengths;
}

absl::StatusOr<BatchLengths> ResolveBatchLengths(const TrainingLengths& lengths, int64_t global_batch_size,
                                                 int64_t fallback_batches_per_epoch) {
  BatchLengths out;
  out.global_batch_size = global_batch_size;
  out.batches_per_epoch =
      EpochLengthInBatches(global_batch_size, lengths.records_per_epoch, fallback_batches_per_epoch);
  DET_ASSIGN_OR_RETURN(out.max_length, ToBatches(lengths.max_length, global_batch_size, out.batches_per_epoch,
                                                 "searcher.max_length"));
  DET_RETURN_IF_ERROR(ResolvePeriods(lengths, out));
  return out;
}

absl::StatusOr<BatchLengths> ResolveBatchLengths(const ExperimentConfig& config,
                                                 absl::string_view unknown_epoch_hint) {
  const TrainingLengths lengths = TrainingLengthsOf(config);
  BatchLengths out;
  DET_ASSIGN_OR_RETURN(out.global_batch_size, GlobalBatchSize(FirstHParams(config.hyperparameters, 0)));
  out.batches_per_epoch = EpochLengthInBatches(out.global_batch_size, lengths.records_per_epoch, 0);
  absl::StatusOr<int64_t> max_length =
      ToBatches(lengths.max_length, out.global_batch_size, out.batches_per_epoch, "searcher.max_length");
  if (!max_length.ok()) {
    const absl::string_view hint = out.batches_per_epoch == 0 ? unknown_epoch_hint : absl::string_view();
    return absl::InvalidArgumentError(absl::StrCat(max_length.status().message(), hint));
  }
  out.max_length = *max_length;
  DET_RETURN_IF_ERROR(ResolvePeriods(lengths, out));
  return out;
}

}  // namespace det
