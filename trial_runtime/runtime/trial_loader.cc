#include "common/elf_symbols.h"
#include "trial_runtime/runtime/trial_loader.h"

#include "common/abi_check.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstdlib>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

// The master checks uploads for the same name (common/elf_symbols.h).
static_assert(std::string_view(DET_TRIAL_ENTRY_SYMBOL) == std::string_view(det::kTrialEntrySymbol));

namespace det::runtime {
namespace {

constexpr size_t kErrLen = 8192;

// The payload that marks a status as IsTrialSetupError.
constexpr char kSetupErrorPayload[] = "type.det-cpp.dev/det.runtime.TrialSetupError";

absl::Status MarkSetupError(absl::Status status) {
  status.SetPayload(kSetupErrorPayload, absl::Cord("1"));
  return status;
}

#ifdef _GLIBCXX_USE_CXX11_ABI
constexpr int kCxx11Abi = _GLIBCXX_USE_CXX11_ABI;
#else
constexpr int kCxx11Abi = -1;
#endif

// How errors name the trial library: the file name the user uploaded
// (DET_TRIAL_SO_NAME, which det-agent sets from the master's StartAllocation)
// rather than the agent's cache path; the path itself otherwise.
std::string LibraryLabel(const std::string& path) {
  const char* name = std::getenv("DET_TRIAL_SO_NAME");
  return name != nullptr && *name != '\0' ? std::string(name).substr(0, 255) : path;
}

// dlerror()'s text with the cache path replaced by `label`, and for an
// undefined symbol, that symbol demangled and its likely cause.
std::string DlopenError(const char* e, const std::string& open_path, const std::string& label) {
  std::string text = absl::StrReplaceAll(e ? e : "unknown dlopen error", {{open_path, label}});
  constexpr std::string_view kUndefined = "undefined symbol: ";
  const size_t at = text.find(kUndefined);
  if (at == std::string::npos) return text;
  const size_t start = at + kUndefined.size();
  const std::string mangled = text.substr(start, text.find_first_of(" ,(", start) - start);
  const std::string demangled = Demangle(mangled);
  if (demangled != mangled) absl::StrAppend(&text, " (", demangled, ")");
  if (!AbiSymbolNamespace(mangled).empty()) absl::StrAppend(&text, ": likely ", LikelyAbiCause(mangled));
  return text;
}

}  // namespace

bool IsTrialSetupError(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kSetupErrorPayload).has_value();
}

absl::StatusOr<const DetTrialPlugin*> LoadTrialLibrary(const std::string& path) {
  const std::string label = LibraryLabel(path);
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::NotFoundError(absl::StrCat("trial library '", label, "' does not exist"));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat("trial library '", label, "' is not a file"));
  // A path without '/' would be searched in the library path; anchor it.
  std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  void* handle = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("cannot load trial library '", label,
                                                   "' as a shared library: ", DlopenError(dlerror(), open_path, label)));
  }
  // Never dlclose: objects and threads of the trial may outlive any scope.
  dlerror();
  void* sym = dlsym(handle, DET_TRIAL_ENTRY_SYMBOL);
  if (sym == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trial library '", label, "' has no entry symbol '", DET_TRIAL_ENTRY_SYMBOL,
        "'; add DET_REGISTER_TRIAL(YourTrial) to one of its source files"));
  }
  auto entry = reinterpret_cast<DetTrialPluginEntryFn>(sym);
  const DetTrialPlugin* plugin = entry();
  if (plugin == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("trial library '", label, "': entry returned null"));
  }
  if (plugin->abi_version != kTrialAbiVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "trial library '", label, "' was built for trial ABI version ", plugin->abi_version,
        ", but this det-trial supports ABI version ", kTrialAbiVersion,
        "; rebuild the trial against this det-cpp SDK"));
  }
  if (plugin->struct_size < sizeof(DetTrialPlugin)) {
    return absl::FailedPreconditionError(absl::StrCat("trial library '", label, "': plugin table has ",
                                                      plugin->struct_size, " bytes, expected ",
                                                      sizeof(DetTrialPlugin)));
  }
  if (std::string(plugin->torch_version) != TORCH_VERSION) {
    return absl::FailedPreconditionError(absl::StrCat("trial library '", label, "' was built against LibTorch ",
                                                      plugin->torch_version, " (", plugin->compiler,
                                                      "), this det-trial uses LibTorch ", TORCH_VERSION));
  }
  if (plugin->cxx11_abi != kCxx11Abi) {
    return absl::FailedPreconditionError(absl::StrCat("trial library '", label, "' uses _GLIBCXX_USE_CXX11_ABI=",
                                                      plugin->cxx11_abi, ", this det-trial uses ", kCxx11Abi));
  }
  return plugin;
}

absl::StatusOr<std::unique_ptr<TrialHandle>> TrialHandle::Create(const DetTrialPlugin* plugin,
                                                                 TrialContext* context) {
  char err[kErrLen] = {0};
  void* trial = nullptr;
  if (plugin->create(context, &trial, err, sizeof(err)) != 0 || trial == nullptr) {
    return MarkSetupError(
        absl::InternalError(absl::StrCat("trial ", plugin->trial_class, " failed in its constructor: ", err)));
  }
  return std::unique_ptr<TrialHandle>(new TrialHandle(plugin, trial));
}

TrialHandle::~TrialHandle() { plugin_->destroy(trial_); }

absl::Status TrialHandle::Error(const std::string& method, const char* err) const {
  return absl::InternalError(absl::StrCat("trial ", trial_class_, " failed in ", method, ": ", err));
}

absl::StatusOr<std::unique_ptr<DataLoader>> TrialHandle::BuildTrainingDataLoader() {
  char err[kErrLen] = {0};
  void* out = nullptr;
  if (plugin_->build_training_data_loader(trial_, &out, err, sizeof(err)) != 0) {
    return MarkSetupError(Error("build_training_data_loader", err));
  }
  return std::unique_ptr<DataLoader>(static_cast<DataLoader*>(out));
}

absl::StatusOr<std::unique_ptr<DataLoader>> TrialHandle::BuildValidationDataLoader() {
  char err[kErrLen] = {0};
  void* out = nullptr;
  if (plugin_->build_validation_data_loader(trial_, &out, err, sizeof(err)) != 0) {
    return MarkSetupError(Error("build_validation_data_loader", err));
  }
  return std::unique_ptr<DataLoader>(static_cast<DataLoader*>(out));
}

absl::StatusOr<MetricsMap> TrialHandle::TrainBatch(Batch& batch, int64_t epoch_idx, int64_t batch_idx) {
  char err[kErrLen] = {0};
  MetricsMap out;
  if (plugin_->train_batch(trial_, &batch, epoch_idx, batch_idx, &out, err, sizeof(err)) != 0) {
    return Error(absl::StrCat("train_batch (epoch ", epoch_idx, ", batch ", batch_idx, ")"), err);
  }
  return out;
}

absl::StatusOr<MetricsMap> TrialHandle::EvaluateBatch(Batch& batch, int64_t batch_idx) {
  char err[kErrLen] = {0};
  MetricsMap out;
  if (plugin_->evaluate_batch(trial_, &batch, batch_idx, &out, err, sizeof(err)) != 0) {
    return Error(absl::StrCat("evaluate_batch (batch ", batch_idx, ")"), err);
  }
  return out;
}

absl::StatusOr<std::optional<MetricsMap>> TrialHandle::EvaluateFullDataset(DataLoader& loader) {
  char err[kErrLen] = {0};
  MetricsMap out;
  int has = 0;
  if (plugin_->evaluate_full_dataset(trial_, &loader, &has, &out, err, sizeof(err)) != 0) {
    return Error("evaluate_full_dataset", err);
  }
  if (!has) return std::optional<MetricsMap>();
  return std::optional<MetricsMap>(std::move(out));
}

absl::StatusOr<Reducer> TrialHandle::EvaluationReducer(const std::string& metric) {
  char err[kErrLen] = {0};
  int r = 0;
  if (plugin_->evaluation_reducer(trial_, metric.c_str(), &r, err, sizeof(err)) != 0) {
    return Error("evaluation_reducer", err);
  }
  if (r < static_cast<int>(Reducer::kAvg) || r > static_cast<int>(Reducer::kAvgPerBatch)) {
    return absl::InvalidArgumentError(absl::StrCat("trial ", trial_class_, ": evaluation_reducer('", metric,
                                                   "') returned unknown reducer ", r));
  }
  return static_cast<Reducer>(r);
}

absl::StatusOr<CallbackMap> TrialHandle::BuildCallbacks() {
  char err[kErrLen] = {0};
  CallbackMap out;
  if (plugin_->build_callbacks(trial_, &out, err, sizeof(err)) != 0) return Error("build_callbacks", err);
  return out;
}

}  // namespace det::runtime
