#include "det/context.h"

#include <ATen/autocast_mode.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/version.h>

#include <atomic>
#include <cmath>

#include "phase_hook.h"

namespace det {

namespace internal {
namespace {
std::atomic<PhaseHook*> g_phase_hook{nullptr};
}  // namespace
void SetPhaseHook(PhaseHook* hook) { g_phase_hook.store(hook, std::memory_order_release); }
PhaseHook* GetPhaseHook() { return g_phase_hook.load(std::memory_order_acquire); }
}  // namespace internal

namespace {
// LibTorch 2.4 replaced the per-device autocast functions by ones that take
// the device type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool AutocastEnabled(c10::DeviceType t) { return at::autocast::is_autocast_enabled(t); }
void SetAutocastEnabled(c10::DeviceType t, bool on) { at::autocast::set_autocast_enabled(t, on); }
c10::ScalarType AutocastDtype(c10::DeviceType t) { return at::autocast::get_autocast_dtype(t); }
void SetAutocastDtype(c10::DeviceType t, c10::ScalarType d) { at::autocast::set_autocast_dtype(t, d); }
#else
bool AutocastEnabled(c10::DeviceType t) {
  return t == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void SetAutocastEnabled(c10::DeviceType t, bool on) {
  if (t == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
c10::ScalarType AutocastDtype(c10::DeviceType t) {
  return t == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void SetAutocastDtype(c10::DeviceType t, c10::ScalarType d) {
  if (t == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(d);
  } else {
    at::autocast::set_autocast_cpu_dtype(d);
  }
}
#endif

std::vector<torch::Tensor> OptimizerParams(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) params.push_back(p);
  }
  return params;
}
}  // namespace

GradScaler::GradScaler(const MixedPrecisionOptions& options) : options_(options), scale_(options.init_scale()) {}

bool GradScaler::unscale(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  const double inverse = 1.0 / scale_;
  torch::Tensor bad;
  for (const auto& p : params) {
    torch::Tensor g = p.grad();
    if (!g.defined()) continue;
    g.mul_(inverse);
    torch::Tensor not_finite = torch::logical_not(torch::isfinite(g)).any();
    bad = bad.defined() ? bad.logical_or(not_finite) : not_finite;
  }
  stepped_ = true;
  return !bad.defined() || !bad.item<bool>();  // one device sync per step
}

void GradScaler::update() {
  if (!stepped_) return;  // no optimizer step this batch (gradient accumulation)
  stepped_ = false;
  if (found_inf_) {
    scale_ *= options_.backoff_factor();
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= options_.growth_interval()) {
    scale_ *= options_.growth_factor();
    growth_tracker_ = 0;
  }
  found_inf_ = false;
}

nlohmann::json GradScaler::state_dict() const {
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}, {"skipped_steps", skipped_steps_}};
}

void GradScaler::load_state_dict(const nlohmann::json& state) {
  scale_ = state.at("scale").get<double>();
  growth_tracker_ = state.at("growth_tracker").get<int64_t>();
  skipped_steps_ = state.value("skipped_steps", int64_t{0});
  found_inf_ = false;
  stepped_ = false;
}

AutocastGuard::AutocastGuard(const TrialContext& context) : AutocastGuard(context, true) {}

AutocastGuard::AutocastGuard(const TrialContext& context, bool enabled) {
  if (!context.mixed_precision()) return;
  active_ = true;
  enabled_ = enabled;
  device_type_ = context.device().type();
  prev_enabled_ = AutocastEnabled(device_type_);
  prev_dtype_ = AutocastDtype(device_type_);
  SetAutocastEnabled(device_type_, enabled);
  SetAutocastDtype(device_type_, context.autocast_dtype());
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocastEnabled(device_type_, prev_enabled_);
  SetAutocastDtype(device_type_, prev_dtype_);
}

TrialContext::TrialContext(TrialInfo info) : info_(std::move(info)), rng_(info_.trial_seed) {}

TrialContext::~TrialContext() = default;

void TrialContext::report_metrics(const std::string& group, const std::map<std::string, double>& metrics) {
  bool ok = !group.empty() && group.size() <= 64;
  for (char c : group) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  if (!ok) throw std::invalid_argument("report_metrics: group must match [a-z0-9_]{1,64}, got '" + group + "'");
  if (group == "training" || group == "validation" || group == "profiling" || group == "system") {
    throw std::invalid_argument("report_metrics: group '" + group + "' is reported by the runtime itself");
  }
  if (!metrics_sink_) return;
  std::string error = metrics_sink_(group, metrics);
  if (!error.empty()) throw std::runtime_error("report_metrics(\"" + group + "\"): " + error);
}

const nlohmann::json& TrialContext::hparam_json(const std::string& name) const {
  const nlohmann::json* node = &info_.hparams;
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    std::string part = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object() || !node->contains(part)) {
      throw std::invalid_argument("hyperparameter '" + name + "' is not defined; defined: " + info_.hparams.dump());
    }
    node = &(*node)[part];
    if (dot == std::string::npos) return *node;
    start = dot + 1;
  }
}

void TrialContext::ThrowLossyHparam(const std::string& name, const nlohmann::json& v, const std::string& type,
                                    const std::string& why) {
  throw std::invalid_argument("hyperparameter '" + name + "' has value " + v.dump() + ", which get_hparam<" + type +
                              "> cannot convert without loss: " + why);
}

namespace {

// Why `v` is no number (empty when it is one).
std::string NotANumber(const nlohmann::json& v) {
  if (v.is_boolean()) return "it is a bool, not a number (read it as get_hparam<bool>)";
  if (v.is_string()) return "it is a string, not a number (write it unquoted in the config, or read it as std::string)";
  if (!v.is_number()) return std::string("it is ") + v.type_name() + ", not a number";
  return "";
}

// The integral value of a JSON float in [-2^63, 2^64), or why it has none.
std::string IntegralFloat(const nlohmann::json& v, long double* out) {
  double d = v.get<double>();
  if (!std::isfinite(d)) return "it is not finite";
  if (std::trunc(d) != d) return "it has a fractional part (read it as double, or make the hyperparameter an integer)";
  if (d < -0x1p63 || d >= 0x1p64) return "it is out of range";
  *out = static_cast<long double>(d);
  return "";
}

}  // namespace

int64_t TrialContext::HparamAsSigned(const std::string& name, const nlohmann::json& v, int64_t lo, int64_t hi,
                                     const std::string& type) {
  std::string why = NotANumber(v);
  if (!why.empty()) ThrowLossyHparam(name, v, type, why);
  std::string range = "it is outside " + type + "'s range " + std::to_string(lo) + ".." + std::to_string(hi);
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(hi)) ThrowLossyHparam(name, v, type, range);
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) {
    int64_t n = v.get<int64_t>();
    if (n < lo || n > hi) ThrowLossyHparam(name, v, type, range);
    return n;
  }
  long double d = 0;
  why = IntegralFloat(v, &d);
  if (!why.empty()) ThrowLossyHparam(name, v, type, why == "it is out of range" ? range : why);
  if (d < static_cast<long double>(lo) || d > static_cast<long double>(hi)) ThrowLossyHparam(name, v, type, range);
  return static_cast<int64_t>(d);
}

uint64_t TrialContext::HparamAsUnsigned(const std::string& name, const nlohmann::json& v, uint64_t hi,
                                        const std::string& type) {
  std::string why = NotANumber(v);
  if (!why.empty()) ThrowLossyHparam(name, v, type, why);
  std::string range = "it is outside " + type + "'s range 0.." + std::to_string(hi);
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > hi) ThrowLossyHparam(name, v, type, range);
    return v.get<uint64_t>();
  }
  if (v.is_number_integer()) ThrowLossyHparam(name, v, type, range);  // nlohmann keeps n >= 0 unsigned
  long double d = 0;
  why = IntegralFloat(v, &d);
  if (!why.empty()) ThrowLossyHparam(name, v, type, why == "it is out of range" ? range : why);
  if (d < 0 || d > static_cast<long double>(hi)) ThrowLossyHparam(name, v, type, range);
  return static_cast<uint64_t>(d);
}

double TrialContext::HparamAsFloating(const std::string& name, const nlohmann::json& v, double max_abs,
                                      const std::string& type) {
  std::string why = NotANumber(v);
  if (!why.empty()) ThrowLossyHparam(name, v, type, why);
  constexpr uint64_t kExact = uint64_t{1} << 53;
  std::string inexact = "integers beyond 2^53 are not exact in a double (read it as int64_t)";
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > kExact) ThrowLossyHparam(name, v, type, inexact);
    return static_cast<double>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) {
    int64_t n = v.get<int64_t>();
    if (n < -static_cast<int64_t>(kExact)) ThrowLossyHparam(name, v, type, inexact);
    return static_cast<double>(n);
  }
  double d = v.get<double>();
  if (std::isfinite(d) && std::fabs(d) > max_abs) {
    ThrowLossyHparam(name, v, type, "it is outside " + type + "'s range");
  }
  return d;
}

const nlohmann::json& TrialContext::get_data_config() const {
  static const nlohmann::json kNull;
  auto it = info_.experiment_config.find("data");
  return it == info_.experiment_config.end() ? kNull : *it;
}

namespace {

[[noreturn]] void ThrowNoGlobalBatchSize(const char* caller) {
  throw std::invalid_argument(std::string("hyperparameters.global_batch_size is not set; this trial asks for it via ") +
                              caller + "()");
}

}  // namespace

int64_t TrialContext::get_global_batch_size() const {
  if (info_.global_batch_size <= 0) ThrowNoGlobalBatchSize("get_global_batch_size");
  return info_.global_batch_size;
}

int64_t TrialContext::get_per_slot_batch_size() const {
  if (info_.global_batch_size <= 0) ThrowNoGlobalBatchSize("get_per_slot_batch_size");
  int size = info_.distributed.size();
  if (info_.global_batch_size % size != 0) {
    throw std::invalid_argument("global_batch_size " + std::to_string(info_.global_batch_size) +
                                " is not divisible by the " + std::to_string(size) + " slots of this trial");
  }
  return info_.global_batch_size / size;
}

void TrialContext::register_model(std::shared_ptr<torch::nn::Module> model) {
  if (!model) throw std::invalid_argument("wrap_model: model is null");
  model->to(info_.device);
  if (reducer_) {
    // Every rank starts from the chief's initial weights and buffers.
    auto tensors = model->parameters();
    for (const auto& b : model->buffers()) tensors.push_back(b);
    reducer_->BroadcastParameters(tensors);
  }
  models_.push_back(std::move(model));
}

void TrialContext::register_optimizer(std::shared_ptr<torch::optim::Optimizer> optimizer) {
  if (!optimizer) throw std::invalid_argument("wrap_optimizer: optimizer is null");
  optimizers_.push_back(std::move(optimizer));
}

void TrialContext::register_lr_scheduler(std::shared_ptr<torch::optim::LRScheduler> scheduler,
                                         LRSchedulerStepMode mode) {
  if (!scheduler) throw std::invalid_argument("wrap_lr_scheduler: scheduler is null");
  schedulers_.push_back({std::move(scheduler), mode});
}

void TrialContext::backward(const torch::Tensor& loss) {
  {
    internal::PhaseScope timed(internal::SdkPhase::kBackward);
    // Backward outside autocast (as torch.amp advises), of the scaled loss
    // with loss scaling.
    AutocastGuard no_autocast(*this, /*enabled=*/false);
    if (scaler_) {
      scaler_->scale_loss(loss).backward();
    } else {
      loss.backward();
    }
  }
  if (reducer_) {
    std::vector<torch::Tensor> params;
    for (const auto& m : models_) {
      for (const auto& p : m->parameters()) params.push_back(p);
    }
    // Scaled gradients are averaged as they are: an inf on one rank is an
    // inf on every rank, so all of them skip the same steps.
    internal::PhaseScope timed(internal::SdkPhase::kAllReduce);
    reducer_->ReduceGradients(params);
  }
}

void TrialContext::step_optimizer(torch::optim::Optimizer& optimizer, const StepOptimizerOptions& options) {
  internal::PhaseScope timed(internal::SdkPhase::kOptimizerStep);
  const bool clip = options.clip_grad_norm() || options.clip_grad_value();
  if (clip || scaler_) {
    std::vector<torch::Tensor> params = OptimizerParams(optimizer);
    if (scaler_ && !scaler_->unscale(params)) {
      scaler_->skip_step();
      if (options.zero_grad()) optimizer.zero_grad();
      return;
    }
    if (options.clip_grad_norm()) torch::nn::utils::clip_grad_norm_(params, *options.clip_grad_norm());
    if (options.clip_grad_value()) torch::nn::utils::clip_grad_value_(params, *options.clip_grad_value());
  }
  optimizer.step();
  if (options.zero_grad()) optimizer.zero_grad();
}

void TrialContext::configure_mixed_precision(const MixedPrecisionOptions& options) {
  const bool cuda = info_.device.is_cuda();
  const torch::Dtype dtype = options.dtype().value_or(cuda ? torch::kHalf : torch::kBFloat16);
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("configure_mixed_precision: " + what);
  };
  if (dtype != torch::kHalf && dtype != torch::kBFloat16) {
    fail(std::string("dtype ") + c10::toString(dtype) + " is not an autocast dtype (Half or BFloat16)");
  }
  if (!cuda && dtype != torch::kBFloat16) {
    fail(std::string("dtype ") + c10::toString(dtype) + " is not supported by autocast on " +
         info_.device.str() + " (BFloat16 only)");
  }
  if (!(options.init_scale() > 0) || !std::isfinite(options.init_scale())) fail("init_scale must be > 0");
  if (!(options.growth_factor() > 1)) fail("growth_factor must be > 1");
  if (!(options.backoff_factor() > 0 && options.backoff_factor() < 1)) fail("backoff_factor must be in (0, 1)");
  if (options.growth_interval() < 1) fail("growth_interval must be >= 1");
  MixedPrecisionOptions resolved = options;
  resolved.dtype(dtype);
  resolved.loss_scaling(options.loss_scaling().value_or(dtype == torch::kHalf));
  mixed_precision_ = resolved;
  scaler_ = *resolved.loss_scaling() ? std::make_unique<GradScaler>(resolved) : nullptr;
}

torch::Dtype TrialContext::autocast_dtype() const {
  return mixed_precision_ && mixed_precision_->dtype() ? *mixed_precision_->dtype() : torch::kFloat;
}

namespace {
// Reaches LRScheduler's protected step_count_ through a derived class's
// pointer-to-member, which C++ allows.
struct SchedulerAccess : torch::optim::LRScheduler {
  static unsigned torch::optim::LRScheduler::*StepCount() { return &SchedulerAccess::step_count_; }
};
}  // namespace

unsigned GetSchedulerStepCount(const torch::optim::LRScheduler& scheduler) {
  return scheduler.*SchedulerAccess::StepCount();
}

void SetSchedulerStepCount(torch::optim::LRScheduler& scheduler, unsigned step_count) {
  scheduler.*SchedulerAccess::StepCount() = step_count;
}

}  // namespace det
