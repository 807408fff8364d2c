// What a trial does around validations, from its config: Determined's
// perform_initial_validation and checkpoint_policy. Pure functions of the
// config and the trial's numbers; thread-safe. The master sequences cluster
// trials with them (master/core/trial_calls.cc), the runtime local ones
// (trial_runtime/runtime/trial_controller.cc).
#ifndef DET_COMMON_VALIDATION_POLICY_H_
#define DET_COMMON_VALIDATION_POLICY_H_

#include <cstdint>
#include <optional>

#include "common/experiment_config.h"

namespace det {

// Whether `value` beats `best` (nullopt: anything does): smaller when
// smaller_is_better, else larger.
bool IsBetterMetric(bool smaller_is_better, double value, std::optional<double> best);

// Whether a trial that has trained `batches` batches and has `validated`
// (any searcher-metric validation reported) owes its initial validation:
// perform_initial_validation is set, nothing is trained yet and no
// validation happened, so it validates at total_batches 0 before training.
bool InitialValidationDue(const ExperimentConfig& config, int64_t batches, bool validated);

// Whether checkpoint_policy asks for a checkpoint right after a validation
// whose searcher metric is `metric` (nullopt: not reported) when the
// experiment's best before it was `experiment_best` (nullopt: none yet):
//   all:  after every validation;
//   best: after a validation better than every earlier one of the
//         experiment (Determined's rule; the first one counts as best);
//   none: never (checkpoints are still taken at the end, at a pause or a
//         preemption, and every min_checkpoint_period).
bool CheckpointAfterValidation(CheckpointPolicy policy, bool smaller_is_better, std::optional<double> metric,
                               std::optional<double> experiment_best);
// The same with the config's checkpoint_policy and searcher.smaller_is_better.
bool CheckpointAfterValidation(const ExperimentConfig& config, std::optional<double> metric,
                               std::optional<double> experiment_best);

}  // namespace det

#endif  // DET_COMMON_VALIDATION_POLICY_H_
