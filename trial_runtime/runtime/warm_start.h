// Warm starts (config searcher.source_checkpoint_uuid / source_trial_id):
// a new trial begins from another checkpoint's model weights only.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_WARM_START_H_
#define DET_TRIAL_RUNTIME_RUNTIME_WARM_START_H_

#include <string>

#include "absl/status/status.h"
#include "trial_runtime/runtime/trial_loader.h"

namespace det::runtime {

// Loads the wrapped models' state (model_<i>.pt) of checkpoint `dir` into
// `context`; optimizers, LR schedulers, RNGs, callbacks and batch counters
// are left as the trial built them (the trial starts at batch 0). Requires
// the trial's models to be wrapped. Errors: NotFound / InvalidArgument for a
// missing or malformed metadata.json, FailedPrecondition when the number of
// models differs, Internal when LibTorch cannot load a file (e.g. another
// architecture); each names `dir`. Not thread-safe with training.
absl::Status LoadModelWeights(const std::string& dir, TrialContext& context);

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_WARM_START_H_
