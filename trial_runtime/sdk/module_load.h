// Loading a model's saved parameters without changing its shape.
//
// LibTorch's Module::load assigns each saved tensor with Tensor::set_, which
// takes the saved tensor's shape: a model built from other hyperparameters
// (a PBT child that explored a width, a fork or warm start with another
// hidden size) would silently train the checkpoint's architecture while its
// hyperparameters say another. LoadModuleExactly refuses that instead.
// Used by the runtime's restores and warm starts and by
// det::load_model_from_checkpoint; not part of the public SDK headers.
#ifndef DET_TRIAL_RUNTIME_SDK_MODULE_LOAD_H_
#define DET_TRIAL_RUNTIME_SDK_MODULE_LOAD_H_

#include <string>

#include <torch/nn/module.h>
#include <torch/serialize/input-archive.h>

namespace det::internal {

// Loads `archive` into `module` (as Module::load), then checks that every
// parameter and buffer kept its shape. Throws std::runtime_error naming
// `what` (the file), the first tensor whose shape differs and both shapes;
// `module` is then unusable (partly loaded). LibTorch's own errors (a
// missing tensor) propagate as c10::Error.
void LoadModuleExactly(torch::serialize::InputArchive& archive, torch::nn::Module& module, const std::string& what);

}  // namespace det::internal

#endif  // DET_TRIAL_RUNTIME_SDK_MODULE_LOAD_H_
