// det::TrialContext: what a trial learns about its run and how it hands its
// models, optimizers and LR schedulers to the runtime.
#ifndef DET_CONTEXT_H_
#define DET_CONTEXT_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

namespace det {

// When the runtime steps a wrapped LR scheduler.
enum class LRSchedulerStepMode {
  kStepEveryBatch,  // after every train_batch
  kStepEveryEpoch,  // after the last batch of every epoch
  kManualStep,      // the trial calls step() itself
};

// Options of TrialContext::step_optimizer.
struct StepOptimizerOptions {
  // Clip the global L2 norm of the optimizer's gradients to this value.
  TORCH_ARG(std::optional<double>, clip_grad_norm) = std::nullopt;
  // Clip every gradient element to [-v, v].
  TORCH_ARG(std::optional<double>, clip_grad_value) = std::nullopt;
  // Zero the gradients after the step.
  TORCH_ARG(bool, zero_grad) = true;
};

// Options of TrialContext::configure_mixed_precision: automatic mixed
// precision as PyTorch's autocast + GradScaler (Lightning's "16-mixed" and
// "bf16-mixed"). Defaults follow torch.amp.
struct MixedPrecisionOptions {
  // The autocast dtype; unset: float16 on CUDA, bfloat16 on CPU (CPU autocast
  // supports bfloat16 only).
  TORCH_ARG(std::optional<torch::Dtype>, dtype) = std::nullopt;
  // Dynamic loss scaling; unset: on for float16, off for bfloat16 (whose
  // exponent range is float32's).
  TORCH_ARG(std::optional<bool>, loss_scaling) = std::nullopt;
  TORCH_ARG(double, init_scale) = 65536.0;
  // After growth_interval steps in a row with finite gradients the scale is
  // multiplied by growth_factor; a step with an inf/NaN gradient is skipped
  // and the scale multiplied by backoff_factor.
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;
};

// The dynamic loss scaler of mixed precision (torch.amp.GradScaler's
// algorithm). TrialContext drives it: backward() scales the loss,
// step_optimizer() unscales the gradients (before clipping), skips the step
// when one is not finite, and the runtime calls update() once per batch.
// Not thread-safe.
class GradScaler {
 public:
  explicit GradScaler(const MixedPrecisionOptions& options);
  double scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  // Optimizer steps skipped for inf/NaN gradients since the trial started.
  int64_t skipped_steps() const { return skipped_steps_; }
  torch::Tensor scale_loss(const torch::Tensor& loss) const { return loss * scale_; }
  // Divides the gradients of `params` by the scale; false when any of them
  // holds an inf or NaN (the caller then skips its step).
  bool unscale(const std::vector<torch::Tensor>& params);
  // Notes that the step after a failed unscale() was skipped; update()
  // backs the scale off.
  void skip_step() {
    found_inf_ = true;
    ++skipped_steps_;
  }
  // End of a batch: grows or backs off the scale.
  void update();
  nlohmann::json state_dict() const;
  void load_state_dict(const nlohmann::json& state);

 private:
  MixedPrecisionOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  bool found_inf_ = false;
  bool stepped_ = false;  // unscale() ran since the last update()
};

class TrialContext;

// Autocast on the context's device while alive, when mixed precision is
// configured (a no-op otherwise). The runtime holds one around every
// train_batch and evaluate_batch; a trial may hold one elsewhere (say in
// evaluate_full_dataset). Restores the previous state on destruction.
class AutocastGuard {
 public:
  explicit AutocastGuard(const TrialContext& context);
  // With `enabled` false: autocast off inside (for example around a loss
  // that must be computed in float32).
  AutocastGuard(const TrialContext& context, bool enabled);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool active_ = false;
  bool enabled_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  bool prev_enabled_ = false;
  c10::ScalarType prev_dtype_ = c10::ScalarType::Float;
};

// Where this process stands in a distributed trial. Thread-safe (immutable).
class DistributedContext {
 public:
  DistributedContext() = default;
  DistributedContext(int rank, int size, int local_rank, int local_size, int cross_rank, int cross_size)
      : rank_(rank), size_(size), local_rank_(local_rank), local_size_(local_size),
        cross_rank_(cross_rank), cross_size_(cross_size) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  bool is_chief() const { return rank_ == 0; }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, cross_rank_ = 0, cross_size_ = 1;
};

// Hook the distributed runtime installs to all-reduce gradients after
// backward(); absent in a 1-rank trial. Both calls are collective (every rank
// makes them in the same order) and throw std::runtime_error when a peer
// failed or timed out.
class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // Replaces the parameters' gradients by their mean over the ranks.
  virtual void ReduceGradients(const std::vector<torch::Tensor>& params) = 0;
  // Overwrites the tensors (parameters and buffers) with rank 0's values.
  virtual void BroadcastParameters(const std::vector<torch::Tensor>& params) = 0;
};

// What the runtime fills in before the trial is built.
struct TrialInfo {
  nlohmann::json hparams = nlohmann::json::object();
  nlohmann::json experiment_config = nlohmann::json::object();
  int64_t experiment_id = 0;
  int64_t trial_id = 0;
  uint64_t trial_seed = 0;
  int64_t global_batch_size = 0;
  DistributedContext distributed;
  torch::Device device = torch::kCPU;
};

class TrialContext {
 public:
  // Runtime use.
  explicit TrialContext(TrialInfo info);
  ~TrialContext();
  TrialContext(const TrialContext&) = delete;
  TrialContext& operator=(const TrialContext&) = delete;

  // Hyperparameter `name` ("a.b" reaches into nested hparams) as T. Throws
  // std::invalid_argument naming the hyperparameter, its value and T when it
  // is absent or does not convert to T without loss:
  //  - bool: a JSON true/false only (not 0/1, not "true");
  //  - an integer type: a JSON integer within T's range, or a JSON number
  //    with an integral value (64.0 -> 64: the master may store integers as
  //    doubles); 64.5, 3e10 as int32_t, -1 as an unsigned type, a bool or a
  //    string are refused;
  //  - double/float: any JSON number within T's range (an integer beyond
  //    2^53 only when exact); float rounds to the nearest float; a bool or a
  //    string is refused;
  //  - anything else (std::string, std::vector<...>, nlohmann::json):
  //    nlohmann's get<T>(), which refuses a mismatched JSON type.
  template <typename T>
  T get_hparam(const std::string& name) const {
    const nlohmann::json& v = hparam_json(name);
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) ThrowLossyHparam(name, v, "bool", "it is not true or false");
      return v.get<bool>();
    } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      return static_cast<T>(HparamAsSigned(name, v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max(),
                                           IntTypeName<T>()));
    } else if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(HparamAsUnsigned(name, v, std::numeric_limits<T>::max(), IntTypeName<T>()));
    } else if constexpr (std::is_same_v<T, double> || std::is_same_v<T, float>) {
      const char* type = std::is_same_v<T, float> ? "float" : "double";
      return static_cast<T>(HparamAsFloating(name, v, std::numeric_limits<T>::max(), type));
    } else {
      try {
        return v.get<T>();
      } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument("hyperparameter '" + name + "' has value " + v.dump() +
                                    " of the wrong type: " + e.what());
      }
    }
  }
  const nlohmann::json& hparams() const { return info_.hparams; }

  // Registers a model for checkpointing (and gradient all-reduce), moves it
  // to device() and returns it. Call once per model, in a stable order. In a
  // distributed trial every rank then holds rank 0's initial parameters and
  // buffers.
  template <typename ModuleHolder>
  ModuleHolder wrap_model(ModuleHolder model) {
    register_model(model.ptr());
    return model;
  }
  std::shared_ptr<torch::nn::Module> wrap_model(std::shared_ptr<torch::nn::Module> model) {
    register_model(model);
    return model;
  }
  // Registers an optimizer for checkpointing; returns it.
  template <typename Optimizer>
  std::shared_ptr<Optimizer> wrap_optimizer(std::shared_ptr<Optimizer> optimizer) {
    register_optimizer(optimizer);
    return optimizer;
  }
  // Registers an LR scheduler for checkpointing; the runtime steps it as
  // `mode` says. The scheduler's optimizer must be wrapped too.
  template <typename Scheduler>
  std::shared_ptr<Scheduler> wrap_lr_scheduler(std::shared_ptr<Scheduler> scheduler,
                                               LRSchedulerStepMode mode) {
    register_lr_scheduler(scheduler, mode);
    return scheduler;
  }

  // loss.backward(), then (distributed) the wrapped models' gradients are
  // averaged over the ranks (bucketed all-reduce), so every rank steps with
  // the gradient of the whole global batch.
  void backward(const torch::Tensor& loss);
  // Optional clipping (of the averaged gradients), optimizer.step(), then
  // zero_grad (unless disabled). With loss scaling the gradients are
  // unscaled first, and a step whose gradients hold an inf or NaN is skipped.
  void step_optimizer(torch::optim::Optimizer& optimizer,
                      const StepOptimizerOptions& options = StepOptimizerOptions());

  // Turns on automatic mixed precision for the rest of the trial: the
  // runtime runs train_batch and evaluate_batch under autocast, backward()
  // scales the loss and step_optimizer() unscales (see GradScaler). Call it
  // in the trial's constructor. Throws std::invalid_argument for a dtype the
  // device's autocast does not support (CPU: bfloat16 only).
  void configure_mixed_precision(const MixedPrecisionOptions& options = MixedPrecisionOptions());
  bool mixed_precision() const { return mixed_precision_.has_value(); }
  // The autocast dtype (meaningful when mixed_precision()).
  torch::Dtype autocast_dtype() const;
  // The loss scaler, or null without loss scaling.
  GradScaler* grad_scaler() { return scaler_.get(); }
  const GradScaler* grad_scaler() const { return scaler_.get(); }

  // global_batch_size / distributed().size(); throws std::invalid_argument
  // when it does not divide or global_batch_size is not set.
  int64_t get_per_slot_batch_size() const;
  // The global_batch_size hyperparameter. Throws std::invalid_argument
  // ("hyperparameters.global_batch_size is not set; this trial asks for it
  // via get_global_batch_size()") when the hparams have none: it is needed
  // only by trials that ask for it (and by lengths in records or epochs).
  int64_t get_global_batch_size() const;
  // Whether the hparams have a global_batch_size.
  bool has_global_batch_size() const { return info_.global_batch_size > 0; }
  // Runtime use: the global batch size, 0 when not set.
  int64_t global_batch_size_or_zero() const { return info_.global_batch_size; }
  const DistributedContext& distributed() const { return info_.distributed; }
  torch::Device device() const { return info_.device; }
  // The config's `data` section (null when absent).
  const nlohmann::json& get_data_config() const;
  const nlohmann::json& get_experiment_config() const { return info_.experiment_config; }
  int64_t get_experiment_id() const { return info_.experiment_id; }
  int64_t get_trial_id() const { return info_.trial_id; }
  uint64_t get_trial_seed() const { return info_.trial_seed; }
  // A std engine seeded from the trial seed whose state is checkpointed.
  std::mt19937_64& random_engine() { return rng_; }

  // Reports `metrics` in metric group `group` ([a-z0-9_]{1,64}, not
  // "training", "validation", "profiling" or "system", which the runtime
  // reports itself) at the
  // current total batches, e.g. ctx.report_metrics("inference",
  // {{"latency_ms", 3.2}}). Managed mode stores them with the trial
  // (GetTrialMetrics by group, det-cli trial metrics --group); local mode
  // prints them and writes them to metrics.csv. In a distributed trial only
  // the chief's reports are kept. One report per group and batch: a second
  // at the same batch is ignored. Throws std::invalid_argument for a bad
  // group, std::runtime_error when the master refuses the report.
  void report_metrics(const std::string& group, const std::map<std::string, double>& metrics);

  // ---- Runtime use below. ----
  struct WrappedScheduler {
    std::shared_ptr<torch::optim::LRScheduler> scheduler;
    LRSchedulerStepMode mode;
  };
  const std::vector<std::shared_ptr<torch::nn::Module>>& models() const { return models_; }
  const std::vector<std::shared_ptr<torch::optim::Optimizer>>& optimizers() const { return optimizers_; }
  const std::vector<WrappedScheduler>& lr_schedulers() const { return schedulers_; }
  void set_gradient_reducer(std::shared_ptr<GradientReducer> reducer) { reducer_ = std::move(reducer); }
  const TrialInfo& info() const { return info_; }
  // Where report_metrics goes (runtime use): returns an error message, or
  // "" when stored. Unset: report_metrics only checks its arguments.
  using MetricsSink = std::function<std::string(const std::string& group, const std::map<std::string, double>&)>;
  void set_metrics_sink(MetricsSink sink) { metrics_sink_ = std::move(sink); }

 private:
  const nlohmann::json& hparam_json(const std::string& name) const;
  // get_hparam's checked conversions (see there); throw std::invalid_argument.
  template <typename T>
  static std::string IntTypeName() {
    return std::string(std::is_signed_v<T> ? "int" : "uint") + std::to_string(sizeof(T) * 8) + "_t";
  }
  [[noreturn]] static void ThrowLossyHparam(const std::string& name, const nlohmann::json& v, const std::string& type,
                                            const std::string& why);
  static int64_t HparamAsSigned(const std::string& name, const nlohmann::json& v, int64_t lo, int64_t hi,
                                const std::string& type);
  static uint64_t HparamAsUnsigned(const std::string& name, const nlohmann::json& v, uint64_t hi,
                                   const std::string& type);
  static double HparamAsFloating(const std::string& name, const nlohmann::json& v, double max_abs,
                                 const std::string& type);
  void register_model(std::shared_ptr<torch::nn::Module> model);
  void register_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer);
  void register_lr_scheduler(std::shared_ptr<torch::optim::LRScheduler> scheduler, LRSchedulerStepMode mode);

  TrialInfo info_;
  std::mt19937_64 rng_;
  std::vector<std::shared_ptr<torch::nn::Module>> models_;
  std::vector<std::shared_ptr<torch::optim::Optimizer>> optimizers_;
  std::vector<WrappedScheduler> schedulers_;
  std::shared_ptr<GradientReducer> reducer_;
  // Added after the members above to keep their offsets for trials built
  // against an older SDK.
  std::optional<MixedPrecisionOptions> mixed_precision_;
  std::unique_ptr<GradScaler> scaler_;
  MetricsSink metrics_sink_;
};

// Reads/writes the protected step count of a LibTorch LR scheduler (runtime
// use: checkpointing).
unsigned GetSchedulerStepCount(const torch::optim::LRScheduler& scheduler);
void SetSchedulerStepCount(torch::optim::LRScheduler& scheduler, unsigned step_count);

}  // namespace det

#endif  // DET_CONTEXT_H_
