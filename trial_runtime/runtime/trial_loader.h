// Loading a user's trial.so and calling it through the versioned plugin ABI.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_TRIAL_LOADER_H_
#define DET_TRIAL_RUNTIME_RUNTIME_TRIAL_LOADER_H_

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/trial_abi.h"
#include "det/trial.h"

namespace det::runtime {

// The plugin ABI version this runtime speaks.
using det::kTrialAbiVersion;  // common/trial_abi.h
static_assert(kTrialAbiVersion == DET_TRIAL_ABI_VERSION, "common/trial_abi.h and det/trial.h disagree");

using CallbackMap = std::map<std::string, std::shared_ptr<Callback>>;

// dlopen()s `path` (never closed) and checks its entry: the symbol exists,
// abi_version == kTrialAbiVersion, the struct is complete, and LibTorch
// version and C++ ABI match this runtime's. Errors: NotFound (no file),
// InvalidArgument (not a loadable shared library), FailedPrecondition (no entry
// symbol, ABI or build mismatch). Thread-safe.
absl::StatusOr<const DetTrialPlugin*> LoadTrialLibrary(const std::string& path);

// Whether `status` came from an exception in the trial's constructor
// (TrialHandle::Create) or one of its data loader builders
// (BuildTrainingDataLoader, BuildValidationDataLoader): det-trial exits
// kExitTrialSetupError on it (common/exit_codes.h). The mark is a status
// payload, so it survives being returned through other calls.
bool IsTrialSetupError(const absl::Status& status);

// One trial instance created through a plugin. Every method converts the
// trial's exceptions into a status naming the method; never throws.
// Not thread-safe.
class TrialHandle {
 public:
  // Requires `plugin` from LoadTrialLibrary and a context outliving the handle.
  static absl::StatusOr<std::unique_ptr<TrialHandle>> Create(const DetTrialPlugin* plugin,
                                                              TrialContext* context);
  ~TrialHandle();

  const std::string& trial_class() const { return trial_class_; }
  absl::StatusOr<std::unique_ptr<DataLoader>> BuildTrainingDataLoader();
  absl::StatusOr<std::unique_ptr<DataLoader>> BuildValidationDataLoader();
  absl::StatusOr<MetricsMap> TrainBatch(Batch& batch, int64_t epoch_idx, int64_t batch_idx);
  absl::StatusOr<MetricsMap> EvaluateBatch(Batch& batch, int64_t batch_idx);
  absl::StatusOr<std::optional<MetricsMap>> EvaluateFullDataset(DataLoader& loader);
  absl::StatusOr<Reducer> EvaluationReducer(const std::string& metric);
  absl::StatusOr<CallbackMap> BuildCallbacks();

 private:
  TrialHandle(const DetTrialPlugin* plugin, void* trial)
      : plugin_(plugin), trial_(trial), trial_class_(plugin->trial_class) {}
  absl::Status Error(const std::string& method, const char* err) const;

  const DetTrialPlugin* plugin_;
  void* trial_;
  std::string trial_class_;
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_TRIAL_LOADER_H_
