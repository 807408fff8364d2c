#include "det/context.h"

#include <torch/nn/utils/clip_grad.h>

namespace det {

TrialContext::TrialContext(TrialInfo info) : info_(std::move(info)), rng_(info_.trial_seed) {}

TrialContext::~TrialContext() = default;

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

const nlohmann::json& TrialContext::get_data_config() const {
  static const nlohmann::json kNull;
  auto it = info_.experiment_config.find("data");
  return it == info_.experiment_config.end() ? kNull : *it;
}

int64_t TrialContext::get_per_slot_batch_size() const {
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
  loss.backward();
  if (reducer_) {
    std::vector<torch::Tensor> params;
    for (const auto& m : models_) {
      for (const auto& p : m->parameters()) params.push_back(p);
    }
    reducer_->ReduceGradients(params);
  }
}

void TrialContext::step_optimizer(torch::optim::Optimizer& optimizer, const StepOptimizerOptions& options) {
  if (options.clip_grad_norm() || options.clip_grad_value()) {
    std::vector<torch::Tensor> params;
    for (const auto& group : optimizer.param_groups()) {
      for (const auto& p : group.params()) params.push_back(p);
    }
    if (options.clip_grad_norm()) torch::nn::utils::clip_grad_norm_(params, *options.clip_grad_norm());
    if (options.clip_grad_value()) torch::nn::utils::clip_grad_value_(params, *options.clip_grad_value());
  }
  optimizer.step();
  if (options.zero_grad()) optimizer.zero_grad();
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
