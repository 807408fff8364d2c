// det::Trial, det::Callback and the versioned plugin entry that
// DET_REGISTER_TRIAL exports from a trial.so.
#ifndef DET_TRIAL_H_
#define DET_TRIAL_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <torch/version.h>

#include "det/batch.h"
#include "det/context.h"
#include "det/data_loader.h"
#include "det/metrics.h"
#include "det/version.h"  // DET_SDK_VERSION

namespace det {

// Lifecycle hooks. Each is called on every rank; default no-ops.
class Callback {
 public:
  virtual ~Callback() = default;
  // Before the first batch; first_batch_idx > 0 when resuming.
  virtual void on_trial_startup(int64_t first_batch_idx) {}
  virtual void on_trial_shutdown() {}
  virtual void on_training_epoch_start(int64_t epoch_idx) {}
  virtual void on_training_epoch_end(int64_t epoch_idx) {}
  virtual void on_validation_start() {}
  virtual void on_validation_end(const MetricsMap& metrics) {}
  // `path` is the checkpoint directory being written/read; a callback may add
  // its own files there.
  virtual void on_checkpoint_save(const std::string& path) {}
  virtual void on_checkpoint_load(const std::string& path) {}
  // State saved in every checkpoint and restored before on_checkpoint_load.
  virtual nlohmann::json state_dict() { return nullptr; }
  virtual void load_state_dict(const nlohmann::json& state) {}
};

// A user's trial. The subclass's constructor takes (det::TrialContext&) and
// builds models and optimizers through the context.
class Trial {
 public:
  virtual ~Trial() = default;
  virtual DataLoader build_training_data_loader() = 0;
  virtual DataLoader build_validation_data_loader() = 0;
  // One optimization step. batch_idx counts batches since the trial started
  // (across epochs and restarts).
  virtual Metrics train_batch(Batch& batch, int64_t epoch_idx, int64_t batch_idx) = 0;
  // Metrics of one validation batch, reduced over batches with
  // evaluation_reducer(). Override this or evaluate_full_dataset.
  virtual Metrics evaluate_batch(Batch& batch, int64_t batch_idx) {
    throw std::logic_error("the trial overrides neither evaluate_batch nor evaluate_full_dataset");
  }
  // Whole-dataset validation; return nullopt (the default) to use
  // evaluate_batch instead.
  virtual std::optional<Metrics> evaluate_full_dataset(DataLoader& loader) { return std::nullopt; }
  virtual Reducer evaluation_reducer(const std::string& metric_name) { return Reducer::kAvg; }
  virtual std::map<std::string, std::shared_ptr<Callback>> build_callbacks() { return {}; }
};

}  // namespace det

// ---------------------------------------------------------------------------
// Plugin ABI. The runtime dlopen()s trial.so, calls det_trial_plugin_entry(),
// and checks abi_version and build info before anything else. Every function
// below is noexcept: it returns 0 on success, or non-zero with a NUL-terminated
// message in err (at most err_len bytes). Pointers typed void* are the C++
// objects named in the comments.
#ifndef DET_TRIAL_ABI_VERSION
#define DET_TRIAL_ABI_VERSION 1
#endif
#define DET_TRIAL_ENTRY_SYMBOL "det_trial_plugin_entry"

extern "C" {
typedef struct DetTrialPlugin {
  uint32_t abi_version;  // must stay the first field in every version
  uint32_t struct_size;
  const char* sdk_version;
  const char* torch_version;
  const char* compiler;
  int32_t cxx11_abi;
  const char* trial_class;
  // context: det::TrialContext*; *trial_out: det::Trial*.
  int (*create)(void* context, void** trial_out, char* err, size_t err_len);
  void (*destroy)(void* trial);
  // *loader_out: a new det::DataLoader the caller deletes.
  int (*build_training_data_loader)(void* trial, void** loader_out, char* err, size_t err_len);
  int (*build_validation_data_loader)(void* trial, void** loader_out, char* err, size_t err_len);
  // batch: det::Batch*; metrics_out: det::MetricsMap*.
  int (*train_batch)(void* trial, void* batch, int64_t epoch_idx, int64_t batch_idx,
                     void* metrics_out, char* err, size_t err_len);
  int (*evaluate_batch)(void* trial, void* batch, int64_t batch_idx, void* metrics_out,
                        char* err, size_t err_len);
  // loader: det::DataLoader*; *has_result = 0 when the trial uses evaluate_batch.
  int (*evaluate_full_dataset)(void* trial, void* loader, int* has_result, void* metrics_out,
                               char* err, size_t err_len);
  // *reducer_out: a det::Reducer value.
  int (*evaluation_reducer)(void* trial, const char* metric_name, int* reducer_out, char* err,
                            size_t err_len);
  // callbacks_out: std::map<std::string, std::shared_ptr<det::Callback>>*.
  int (*build_callbacks)(void* trial, void* callbacks_out, char* err, size_t err_len);
} DetTrialPlugin;

typedef const DetTrialPlugin* (*DetTrialPluginEntryFn)(void);
}

namespace det {
namespace internal {

inline void WriteError(char* err, size_t err_len, const std::string& message) {
  if (err == nullptr || err_len == 0) return;
  size_t n = std::min(message.size(), err_len - 1);
  std::memcpy(err, message.data(), n);
  err[n] = '\0';
}

// Runs f, turning any exception into an error return.
template <typename F>
int Guard(char* err, size_t err_len, F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const c10::Error& e) {
    WriteError(err, err_len, e.what_without_backtrace());
  } catch (const std::exception& e) {
    WriteError(err, err_len, e.what());
  } catch (...) {
    WriteError(err, err_len, "unknown exception (not derived from std::exception)");
  }
  return 1;
}

inline void ConvertMetrics(const Metrics& in, void* out) {
  auto* map = static_cast<MetricsMap*>(out);
  map->clear();
  for (const auto& [name, value] : in) {
    try {
      (*map)[name] = value.to_double();
    } catch (const std::exception& e) {
      throw std::invalid_argument("metric '" + name + "': " + e.what());
    }
  }
}

template <typename T>
struct PluginAdapter {
  static Trial* AsTrial(void* t) { return static_cast<Trial*>(t); }
  static int Create(void* context, void** trial_out, char* err, size_t n) noexcept {
    return Guard(err, n, [&] { *trial_out = static_cast<Trial*>(new T(*static_cast<TrialContext*>(context))); });
  }
  static void Destroy(void* trial) noexcept {
    Guard(nullptr, 0, [&] { delete AsTrial(trial); });
  }
  static int BuildTraining(void* trial, void** out, char* err, size_t n) noexcept {
    return Guard(err, n, [&] { *out = new DataLoader(AsTrial(trial)->build_training_data_loader()); });
  }
  static int BuildValidation(void* trial, void** out, char* err, size_t n) noexcept {
    return Guard(err, n, [&] { *out = new DataLoader(AsTrial(trial)->build_validation_data_loader()); });
  }
  static int TrainBatch(void* trial, void* batch, int64_t epoch_idx, int64_t batch_idx, void* out, char* err,
                        size_t n) noexcept {
    return Guard(err, n, [&] {
      ConvertMetrics(AsTrial(trial)->train_batch(*static_cast<Batch*>(batch), epoch_idx, batch_idx), out);
    });
  }
  static int EvaluateBatch(void* trial, void* batch, int64_t batch_idx, void* out, char* err, size_t n) noexcept {
    return Guard(err, n, [&] {
      ConvertMetrics(AsTrial(trial)->evaluate_batch(*static_cast<Batch*>(batch), batch_idx), out);
    });
  }
  static int EvaluateFull(void* trial, void* loader, int* has_result, void* out, char* err, size_t n) noexcept {
    return Guard(err, n, [&] {
      auto result = AsTrial(trial)->evaluate_full_dataset(*static_cast<DataLoader*>(loader));
      *has_result = result.has_value() ? 1 : 0;
      if (result) ConvertMetrics(*result, out);
    });
  }
  static int EvaluationReducer(void* trial, const char* name, int* out, char* err, size_t n) noexcept {
    return Guard(err, n, [&] { *out = static_cast<int>(AsTrial(trial)->evaluation_reducer(name)); });
  }
  static int BuildCallbacks(void* trial, void* out, char* err, size_t n) noexcept {
    return Guard(err, n, [&] {
      *static_cast<std::map<std::string, std::shared_ptr<Callback>>*>(out) = AsTrial(trial)->build_callbacks();
    });
  }

  static DetTrialPlugin Make(const char* trial_class) {
    DetTrialPlugin p{};
    p.abi_version = DET_TRIAL_ABI_VERSION;
    p.struct_size = sizeof(DetTrialPlugin);
    p.sdk_version = DET_SDK_VERSION;
    p.torch_version = TORCH_VERSION;
#ifdef __VERSION__
    p.compiler = __VERSION__;
#else
    p.compiler = "unknown";
#endif
#ifdef _GLIBCXX_USE_CXX11_ABI
    p.cxx11_abi = _GLIBCXX_USE_CXX11_ABI;
#else
    p.cxx11_abi = -1;
#endif
    p.trial_class = trial_class;
    p.create = &Create;
    p.destroy = &Destroy;
    p.build_training_data_loader = &BuildTraining;
    p.build_validation_data_loader = &BuildValidation;
    p.train_batch = &TrainBatch;
    p.evaluate_batch = &EvaluateBatch;
    p.evaluate_full_dataset = &EvaluateFull;
    p.evaluation_reducer = &EvaluationReducer;
    p.build_callbacks = &BuildCallbacks;
    return p;
  }
};

}  // namespace internal
}  // namespace det

// Exports TrialClass (a det::Trial with a (det::TrialContext&) constructor)
// from this shared library. Use exactly once per trial.so.
#define DET_REGISTER_TRIAL(TrialClass)                                                     \
  extern "C" __attribute__((visibility("default"))) const DetTrialPlugin*                \
  det_trial_plugin_entry(void) {                                                          \
    static const DetTrialPlugin plugin = ::det::internal::PluginAdapter<TrialClass>::Make(#TrialClass); \
    return &plugin;                                                                       \
  }

#endif  // DET_TRIAL_H_
