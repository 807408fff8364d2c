// Warm starts (config searcher.source_checkpoint_uuid / source_trial_id):
// a new trial begins from another checkpoint's model weights only.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_WARM_START_H_
#define DET_TRIAL_RUNTIME_RUNTIME_WARM_START_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/experiment_config.h"
#include "trial_runtime/runtime/trial_loader.h"

namespace det::runtime {

// Loads the wrapped models' state (model_<i>.pt) of checkpoint `dir` into
// `context`; optimizers, LR schedulers, RNGs, callbacks and batch counters
// are left as the trial built them (the trial starts at batch 0). Requires
// the trial's models to be wrapped. Errors: NotFound / InvalidArgument for a
// missing or malformed metadata.json, FailedPrecondition when the number of
// models differs, Internal when LibTorch cannot load a file (e.g. another
// architecture) or a parameter's shape differs from the checkpoint's (a
// model built from other hparams; sdk/module_load.h); each names `dir`. Not thread-safe with training.
absl::Status LoadModelWeights(const std::string& dir, TrialContext& context);
// LoadModelWeights, then (when `announce`: the chief) the line
// "[det-trial] warm start: model weights from checkpoint DIR" on stdout.
absl::Status WarmStart(const std::string& dir, TrialContext& context, bool announce);

// Local mode (det-trial --local: no master to resolve a source): the
// directory a warm start loads, nullopt when the config asks for none.
// searcher.source_checkpoint_uuid names a checkpoint of an earlier local run
// under `checkpoint_dir` (the run's checkpoint root, which holds each
// checkpoint as <uuid>/). InvalidArgument naming the field for a malformed
// uuid and for source_trial_id (a trial id means nothing without a master);
// NotFound naming the directory when that checkpoint is not there.
absl::StatusOr<std::optional<std::string>> LocalWarmStartDir(const ExperimentConfig& config,
                                                             const std::string& checkpoint_dir);

// PBT (searcher pbt): a child restores its parent's whole checkpoint but
// trains with its own hparams. Capture() copies the options of every param
// group of the context's optimizers (learning rate, weight decay, ... as the
// trial built them from this trial's hparams); Apply() puts them back after
// a restore overwrote them. Apply requires the same optimizers and groups.
class OptimizerOptionsSnapshot {
 public:
  static OptimizerOptionsSnapshot Capture(TrialContext& context);
  void Apply(TrialContext& context) const;

 private:
  std::vector<std::vector<std::unique_ptr<torch::optim::OptimizerOptions>>> options_;
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_WARM_START_H_
