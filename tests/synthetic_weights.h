// Reads the weights of a checkpoint of the synthetic example
// (examples/synthetic/synthetic_trial.cc) in end-to-end tests.
#ifndef DET_TESTS_SYNTHETIC_WEIGHTS_H_
#define DET_TESTS_SYNTHETIC_WEIGHTS_H_

#include <cstdint>
#include <map>
#include <string>

#include <torch/torch.h>

namespace det::testing {

// The synthetic example's model: `features` inputs, hidden_size `hidden`,
// two outputs. Dropout has no weights, so its rate does not matter here.
struct SyntheticMlpImpl : torch::nn::Module {
  SyntheticMlpImpl(int64_t features, int64_t hidden)
      : fc1(register_module("fc1", torch::nn::Linear(features, hidden))),
        drop(register_module("drop", torch::nn::Dropout(0.0))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 2))) {}
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(SyntheticMlp);

// The parameters (name to tensor) in `checkpoint_dir`/model_0.pt of a
// synthetic trial of `features` inputs and hidden_size `hidden`.
inline std::map<std::string, torch::Tensor> LoadSyntheticWeights(const std::string& checkpoint_dir,
                                                                 int64_t features = 16, int64_t hidden = 16) {
  SyntheticMlp model(features, hidden);
  torch::serialize::InputArchive archive;
  archive.load_from(checkpoint_dir + "/model_0.pt");
  model->load(archive);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

}  // namespace det::testing

#endif  // DET_TESTS_SYNTHETIC_WEIGHTS_H_
