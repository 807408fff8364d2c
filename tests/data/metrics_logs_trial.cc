// A small regression trial for the metrics and logs tests: every train_batch
// reports an "inference" group with ctx.report_metrics and prints one known
// line to stdout and one (with a '%') to stderr. Hyperparameters:
// batch_delay_ms slows each batch; learning_rate.
#include <chrono>
#include <cstdio>
#include <thread>

#include <torch/torch.h>

#include "det/det.h"

namespace {

class Points final : public det::Dataset {
 public:
  Points(int64_t n, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    x_ = torch::randn({n, 4}, gen);
    y_ = x_.sum(1, /*keepdim=*/true);
  }
  size_t size() const override { return static_cast<size_t>(x_.size(0)); }
  det::Batch get(size_t i) override {
    return det::Batch({x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]});
  }

 private:
  torch::Tensor x_, y_;
};

class MetricsLogsTrial final : public det::Trial {
 public:
  explicit MetricsLogsTrial(det::TrialContext& ctx) : ctx_(ctx) {
    model_ = ctx.wrap_model(torch::nn::Linear(4, 1));
    opt_ = ctx.wrap_optimizer(std::make_shared<torch::optim::SGD>(
        model_->parameters(), torch::optim::SGDOptions(ctx.hparams().value("learning_rate", 0.05))));
    delay_ms_ = ctx.hparams().value("batch_delay_ms", 0);
  }
  det::DataLoader build_training_data_loader() override {
    return det::DataLoader(std::make_shared<Points>(256, 1), det::DataLoaderOptions(ctx_.get_per_slot_batch_size()));
  }
  det::DataLoader build_validation_data_loader() override {
    return det::DataLoader(std::make_shared<Points>(64, 2), det::DataLoaderOptions(ctx_.get_per_slot_batch_size()));
  }
  det::Metrics train_batch(det::Batch& batch, int64_t, int64_t batch_idx) override {
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    auto loss = torch::mse_loss(model_->forward(batch[0]), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(*opt_);
    ctx_.report_metrics("inference", {{"latency_ms", 0.5 * static_cast<double>(batch_idx)}});
    std::printf("[mltrial] stdout line %lld\n", static_cast<long long>(batch_idx));
    std::fflush(stdout);
    std::fprintf(stderr, "[mltrial] stderr 100%% line %lld\n", static_cast<long long>(batch_idx));
    std::fflush(stderr);
    return {{"loss", loss}};
  }
  det::Metrics evaluate_batch(det::Batch& batch, int64_t) override {
    return {{"validation_loss", torch::mse_loss(model_->forward(batch[0]), batch[1])}};
  }

 private:
  det::TrialContext& ctx_;
  torch::nn::Linear model_{nullptr};
  std::shared_ptr<torch::optim::SGD> opt_;
  int delay_ms_ = 0;
};

}  // namespace

DET_REGISTER_TRIAL(MetricsLogsTrial)
