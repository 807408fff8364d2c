#include "master/core/trial_lengths.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace det::master {

SearcherLength ExperimentSearcherLength(const ExperimentConfig& config, const nlohmann::json& stored_snapshot) {
  SearcherLength length = ClusterSearcherLength(config);
  const bool legacy = stored_snapshot.is_object() && !stored_snapshot.contains(kSnapshotLengthUnit);
  if (!legacy || length.is_metric() || length.length_unit == Length::Unit::kBatches) return length;
  absl::StatusOr<BatchLengths> old = ResolveBatchLengths(config);
  SearcherLength batches;
  batches.max = old.ok() ? old->max_length : length.max;
  return batches;
}

nlohmann::json SearcherSnapshot(const ExperimentRuntime& exp) {
  nlohmann::json snap = exp.searcher->Snapshot();
  snap[kSnapshotLengthUnit] = exp.searcher_length.unit;
  return snap;
}

absl::Status InitTrialLengths(const ExperimentRuntime& exp, TrialRuntime& trial) {
  nlohmann::json hparams = nlohmann::json::parse(trial.row.hparams_json, nullptr, false);
  absl::StatusOr<BatchLengths> lengths = TrialBatchLengths(exp.config, hparams);
  if (!lengths.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("trial ", trial.row.id, ": ", lengths.status().message()));
  }
  trial.lengths = *lengths;
  return absl::OkStatus();
}

absl::Status SetSearcherTarget(const ExperimentRuntime& exp, TrialRuntime& trial, int64_t units) {
  int64_t batches = 0;
  if (!exp.searcher_length.is_metric()) {
    absl::StatusOr<int64_t> converted = SearcherUnitsToBatches(exp.searcher_length, units, trial.lengths);
    if (!converted.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("trial ", trial.row.id, ": ", converted.status().message()));
    }
    batches = *converted;
  }
  trial.searcher_target = units;
  trial.target_batches = batches;
  return absl::OkStatus();
}

bool SearcherTargetReached(const ExperimentRuntime& exp, const TrialRuntime& trial, int64_t batches) {
  if (trial.searcher_target <= 0) return false;
  if (!exp.searcher_length.is_metric()) return batches >= trial.target_batches;
  return trial.time_metric_value.has_value() &&
         *trial.time_metric_value >= static_cast<double>(trial.searcher_target);
}

}  // namespace det::master
