// Inference from a checkpoint with no master and no TrialContext: read a
// checkpoint directory that det-trial wrote (in checkpoint storage, or
// downloaded with `det-cli checkpoint download UUID -o DIR`) and load a
// model's weights into a module of the same architecture.
//
//   nlohmann::json meta = det::load_checkpoint_metadata(dir);
//   Cnn model(meta["hparams"]["n_filters1"].get<int64_t>(), ...);
//   det::load_model_from_checkpoint(dir, *model);
//   model->eval();
//
// The layout (trial_runtime/runtime/checkpoint.h): metadata.json (format
// version, hparams, num_models, ...) and model_<i>.pt, the i-th module the
// trial passed to wrap_model, in LibTorch's serialization.
#ifndef DET_INFERENCE_H_
#define DET_INFERENCE_H_

#include <string>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>
#include <torch/types.h>

namespace det {

// The checkpoint format this SDK reads (metadata.json "format_version").
inline constexpr int kCheckpointFormatVersionRead = 1;

// dir/metadata.json as JSON. Throws std::runtime_error naming the file when
// it is missing, not a JSON object, or of another format_version.
nlohmann::json load_checkpoint_metadata(const std::string& dir);

// Loads model `index` (dir/model_<index>.pt) into `module`, whose
// parameters and buffers must match the checkpoint's by name and shape,
// placing them on `device`. Throws std::runtime_error naming the file and
// LibTorch's reason otherwise (also for an index past metadata's
// num_models).
void load_model_from_checkpoint(const std::string& dir, torch::nn::Module& module, size_t index = 0,
                                const torch::Device& device = torch::kCPU);

}  // namespace det

#endif  // DET_INFERENCE_H_
