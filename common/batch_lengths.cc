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
  const SearcherLength searcher = SearcherLengthOf(config.searcher);
  // A training metric has no length in batches: 0 (the runtime stops on the metric).
  lengths.max_length = searcher.length_unit ? Length{*searcher.length_unit, searcher.max} : Length{};
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
  return TrialBatchLengths(config, FirstHParams(config.hyperparameters, 0), unknown_epoch_hint);
}

SearcherLength SearcherLengthOf(const SearcherConfig& searcher) {
  SearcherLength out;
  if (searcher.time_metric.has_value() && searcher.max_time.has_value()) {
    out.unit = *searcher.time_metric;
    absl::StatusOr<Length::Unit> unit = ParseLengthUnit(out.unit);
    out.length_unit = unit.ok() ? std::optional<Length::Unit>(*unit) : std::nullopt;
    out.max = *searcher.max_time;
    return out;
  }
  out.unit = std::string(UnitName(searcher.max_length.unit));
  out.length_unit = searcher.max_length.unit;
  out.max = searcher.max_length.value;
  return out;
}

SearcherLength ClusterSearcherLength(const ExperimentConfig& config) {
  SearcherLength out = SearcherLengthOf(config.searcher);
  if (out.length_unit == Length::Unit::kEpochs && config.records_per_epoch <= 0) out.length_unit.reset();
  return out;
}

std::string FormatSearcherLength(const SearcherLength& length, int64_t value) {
  if (length.length_unit) return ToString(Length{*length.length_unit, value});
  if (absl::StatusOr<Length::Unit> unit = ParseLengthUnit(length.unit); unit.ok()) {
    return ToString(Length{*unit, value});
  }
  return absl::StrCat(value, " ", length.unit);
}

absl::StatusOr<BatchLengths> TrialBatchLengths(const ExperimentConfig& config, const nlohmann::json& hparams,
                                               absl::string_view unknown_epoch_hint) {
  BatchLengths out;
  if (hparams.is_object() && hparams.contains("global_batch_size")) {
    DET_ASSIGN_OR_RETURN(out.global_batch_size, GlobalBatchSize(hparams));
  }
  out.batches_per_epoch = EpochLengthInBatches(out.global_batch_size, config.records_per_epoch, 0);
  const SearcherLength searcher = ClusterSearcherLength(config);
  const char* field = config.searcher.time_metric ? "searcher.max_time" : "searcher.max_length";
  // The searcher length's errors are InvalidArgument with the hint; the
  // periods keep ToBatches' codes.
  auto convert = [&](const Length& length, const char* name, bool hint) -> absl::StatusOr<int64_t> {
    if (length.unit != Length::Unit::kBatches && out.global_batch_size <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot convert '", name, "' (", ToString(length),
                                                     ") to batches: hyperparameters.global_batch_size is not set"));
    }
    absl::StatusOr<int64_t> batches = ToBatches(length, out.global_batch_size, out.batches_per_epoch, name);
    if (!batches.ok() && hint && out.batches_per_epoch == 0 && length.unit == Length::Unit::kEpochs) {
      return absl::InvalidArgumentError(absl::StrCat(batches.status().message(), unknown_epoch_hint));
    }
    return batches;
  };
  if (searcher.length_unit) {
    DET_ASSIGN_OR_RETURN(out.max_length, convert(Length{*searcher.length_unit, searcher.max}, field, true));
  }
  if (config.min_validation_period) {
    DET_ASSIGN_OR_RETURN(out.validation_period, convert(*config.min_validation_period, "min_validation_period", false));
  }
  if (config.min_checkpoint_period) {
    DET_ASSIGN_OR_RETURN(out.checkpoint_period, convert(*config.min_checkpoint_period, "min_checkpoint_period", false));
  }
  return out;
}

absl::StatusOr<int64_t> SearcherUnitsToBatches(const SearcherLength& length, int64_t units, const BatchLengths& trial) {
  if (!length.length_unit) {
    return absl::FailedPreconditionError(
        absl::StrCat("a length in '", length.unit, "' (a training metric) has no batch count"));
  }
  return ToBatches(Length{*length.length_unit, units}, trial.global_batch_size, trial.batches_per_epoch,
                   "searcher length");
}

}  // namespace det
