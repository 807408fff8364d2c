#include "module_load.h"

#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace det::internal {
namespace {

std::string ShapeString(c10::IntArrayRef sizes) {
  std::ostringstream s;
  s << '[';
  for (size_t i = 0; i < sizes.size(); ++i) s << (i ? ", " : "") << sizes[i];
  s << ']';
  return s.str();
}

// Every parameter and buffer of `module` (names as Module::load reads them).
std::vector<std::pair<std::string, torch::Tensor>> Tensors(torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

}  // namespace

void LoadModuleExactly(torch::serialize::InputArchive& archive, torch::nn::Module& module, const std::string& what) {
  // Shapes before the load; nullopt for a tensor not yet defined (the load
  // gives it one, which is not a change).
  std::vector<std::pair<std::string, std::optional<std::vector<int64_t>>>> before;
  for (const auto& [name, t] : Tensors(module)) {
    before.emplace_back(name, t.defined() ? std::optional<std::vector<int64_t>>(t.sizes().vec()) : std::nullopt);
  }
  module.load(archive);
  const auto after = Tensors(module);
  for (size_t i = 0; i < before.size() && i < after.size(); ++i) {
    const torch::Tensor& t = after[i].second;
    if (!before[i].second || !t.defined() || t.sizes().vec() == *before[i].second) continue;
    throw std::runtime_error(what + ": '" + before[i].first + "' has shape " + ShapeString(t.sizes()) +
                             " there, the trial's model has " + ShapeString(*before[i].second) +
                             ": the model was built from hyperparameters that set another shape than the "
                             "checkpoint's trial had (for pbt, explore only hyperparameters that keep the "
                             "model's shape: searcher.explore)");
  }
}

}  // namespace det::internal
