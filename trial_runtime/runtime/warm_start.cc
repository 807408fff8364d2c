#include "trial_runtime/runtime/warm_start.h"

#include <torch/serialize.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
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
  const std::filesystem::path d(dir);
  try {
    for (size_t i = 0; i < models.size(); ++i) {
      torch::serialize::InputArchive archive;
      archive.load_from((d / absl::StrCat("model_", i, ".pt")).string(), context.device());
      models[i]->load(archive);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("loading warm-start weights from '", dir, "': ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading warm-start weights from '", dir, "': ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace det::runtime
