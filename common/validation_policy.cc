#include "common/validation_policy.h"

namespace det {

bool IsBetterMetric(bool smaller_is_better, double value, std::optional<double> best) {
  if (!best.has_value()) return true;
  return smaller_is_better ? value < *best : value > *best;
}

bool InitialValidationDue(const ExperimentConfig& config, int64_t batches, bool validated) {
  return config.perform_initial_validation && batches == 0 && !validated;
}

bool CheckpointAfterValidation(const ExperimentConfig& config, std::optional<double> metric,
                               std::optional<double> experiment_best) {
  return CheckpointAfterValidation(config.checkpoint_policy, config.searcher.smaller_is_better, metric,
                                   experiment_best);
}

bool CheckpointAfterValidation(CheckpointPolicy policy, bool smaller_is_better, std::optional<double> metric,
                               std::optional<double> experiment_best) {
  switch (policy) {
    case CheckpointPolicy::kAll:
      return true;
    case CheckpointPolicy::kNone:
      return false;
    case CheckpointPolicy::kBest:
      return metric.has_value() && IsBetterMetric(smaller_is_better, *metric, experiment_best);
  }
  return false;
}

}  // namespace det
