#include "trial_runtime/runtime/warm_start.h"

#include <torch/serialize.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "trial_runtime/runtime/checkpoint.h"
#include "trial_runtime/sdk/module_load.h"

namespace det::runtime {

absl::Status LoadModelWeights(const std::string& dir, TrialContext& context) {
  auto meta = ReadCheckpointMetadata(dir);
  if (!meta.ok()) return meta.status();
  const auto& models = context.models();
  const size_t saved = meta->value("num_models", size_t{0});
  if (saved != models.size()) {
    return absl::FailedPreconditionError(absl::StrCat("warm-start checkpoint '", dir, "' holds ", saved,
                                                      " model(s); the trial wrapped ", models.size()));
  }
  const std::filesystem::path d(dir);
  try {
    for (size_t i = 0; i < models.size(); ++i) {
      torch::serialize::InputArchive archive;
      const std::string file = (d / absl::StrCat("model_", i, ".pt")).string();
      archive.load_from(file, context.device());
      internal::LoadModuleExactly(archive, *models[i], file);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("loading warm-start weights from '", dir, "': ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading warm-start weights from '", dir, "': ", e.what()));
  }
  return absl::OkStatus();
}

OptimizerOptionsSnapshot OptimizerOptionsSnapshot::Capture(TrialContext& context) {
  OptimizerOptionsSnapshot s;
  for (const auto& opt : context.optimizers()) {
    std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> groups;
    for (auto& g : opt->param_groups()) groups.push_back(g.options().clone());
    s.options_.push_back(std::move(groups));
  }
  return s;
}

void OptimizerOptionsSnapshot::Apply(TrialContext& context) const {
  const auto& opts = context.optimizers();
  for (size_t i = 0; i < opts.size() && i < options_.size(); ++i) {
    auto& groups = opts[i]->param_groups();
    for (size_t g = 0; g < groups.size() && g < options_[i].size(); ++g) {
      groups[g].set_options(options_[i][g]->clone());
    }
  }
}

}  // namespace det::runtime
