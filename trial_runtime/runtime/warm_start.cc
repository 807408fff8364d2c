#include "trial_runtime/runtime/warm_start.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/safe_path.h"
#include "common/status_macros.h"
#include "trial_runtime/runtime/checkpoint.h"

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
  try {
    LoadModelFiles(dir, context);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("loading warm-start weights from '", dir, "': ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading warm-start weights from '", dir, "': ", e.what()));
  }
  return absl::OkStatus();
}

absl::Status WarmStart(const std::string& dir, TrialContext& context, bool announce) {
  DET_RETURN_IF_ERROR(LoadModelWeights(dir, context));
  if (announce) {
    std::printf("[det-trial] warm start: model weights from checkpoint %s\n", dir.c_str());
    std::fflush(stdout);
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

absl::StatusOr<std::optional<std::string>> LocalWarmStartDir(const ExperimentConfig& config,
                                                             const std::string& checkpoint_dir) {
  const SearcherConfig& s = config.searcher;
  if (s.source_trial_id) {
    return absl::InvalidArgumentError(absl::StrCat(
        "searcher.source_trial_id: local mode has no master to look up trial ", *s.source_trial_id,
        "'s checkpoint; set searcher.source_checkpoint_uuid to a checkpoint under ", checkpoint_dir,
        " (or --resume DIR to continue a run)"));
  }
  if (!s.source_checkpoint_uuid) return std::nullopt;
  // A uuid, not a path: it cannot leave the checkpoint root.
  DET_RETURN_IF_ERROR(ValidateUuid(*s.source_checkpoint_uuid, "searcher.source_checkpoint_uuid"));
  const std::string dir = (std::filesystem::path(checkpoint_dir) / *s.source_checkpoint_uuid).string();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat("searcher.source_checkpoint_uuid: no checkpoint ",
                                            *s.source_checkpoint_uuid, " in ", checkpoint_dir,
                                            " (local mode warm-starts from a checkpoint of an earlier local run "
                                            "there; --checkpoint-dir or checkpoint_storage choose the directory)"));
  }
  return dir;
}

}  // namespace det::runtime
