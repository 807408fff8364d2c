// A trial whose training data loader is slow (issue 48's profiler test): each
// training example's get() sleeps hparam loader_delay_ms (default 3) while
// train_batch is a tiny linear model, so the data loader's wait is where its
// time goes. Validation data is fast.
#include <chrono>
#include <thread>

#include <torch/torch.h>

#include "det/det.h"

namespace {

class Points final : public det::Dataset {
 public:
  Points(int64_t n, int64_t delay_ms) : n_(n), delay_ms_(delay_ms) {}
  size_t size() const override { return static_cast<size_t>(n_); }
  det::Batch get(size_t i) override {
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    const auto x = static_cast<float>(i % 17) / 17.0f;
    return det::Batch({torch::tensor({x, 1.0f - x}), torch::tensor({2.0f * x})});
  }

 private:
  int64_t n_;
  int64_t delay_ms_;
};

class SlowLoaderTrial final : public det::Trial {
 public:
  explicit SlowLoaderTrial(det::TrialContext& ctx) : ctx_(ctx) {
    model_ = ctx.wrap_model(torch::nn::Linear(2, 1));
    opt_ = ctx.wrap_optimizer(
        std::make_shared<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(0.01)));
    delay_ms_ = ctx.hparams().value("loader_delay_ms", int64_t{3});
  }
  det::DataLoader build_training_data_loader() override {
    return det::DataLoader(std::make_shared<Points>(256, delay_ms_), det::DataLoaderOptions(8));
  }
  det::DataLoader build_validation_data_loader() override {
    return det::DataLoader(std::make_shared<Points>(32, 0), det::DataLoaderOptions(8));
  }
  det::Metrics train_batch(det::Batch& batch, int64_t, int64_t) override {
    auto loss = torch::mse_loss(model_->forward(batch[0]), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(*opt_);
    return {{"loss", loss}};
  }
  det::Metrics evaluate_batch(det::Batch& batch, int64_t) override {
    return {{"validation_loss", torch::mse_loss(model_->forward(batch[0]), batch[1])}};
  }

 private:
  det::TrialContext& ctx_;
  torch::nn::Linear model_{nullptr};
  std::shared_ptr<torch::optim::SGD> opt_;
  int64_t delay_ms_ = 3;
};

}  // namespace

DET_REGISTER_TRIAL(SlowLoaderTrial)
