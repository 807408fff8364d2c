// The smallest complete trial: a two-layer network learns to tell points in
// 16 dimensions apart by the sign of their coordinates' sum. Build it with
// CMakeLists.txt beside it and train it with no master:
//   det-cli experiment create --local const.yaml build/minimal_trial.so
#include <torch/torch.h>

#include "det/det.h"

namespace {

// `n` labelled points drawn from a seeded normal: the same data every run.
class Points final : public det::Dataset {
 public:
  Points(int64_t n, uint64_t seed)
      : x_(torch::randn({n, 16}, at::make_generator<at::CPUGeneratorImpl>(seed))),
        y_((x_.sum(1) > 0).to(torch::kLong)) {}
  size_t size() const override { return static_cast<size_t>(x_.size(0)); }
  det::Batch get(size_t i) override {  // one example; the loader stacks them
    return det::Batch({x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]});
  }

 private:
  torch::Tensor x_, y_;
};

class MinimalTrial final : public det::Trial {
 public:
  // Hyperparameters come from the config; wrapped models and optimizers are
  // checkpointed (and averaged over ranks) by the runtime.
  explicit MinimalTrial(det::TrialContext& ctx) : ctx_(ctx) {
    const auto hidden = ctx.get_hparam<int64_t>("hidden_size");
    model_ = ctx.wrap_model(torch::nn::Sequential(torch::nn::Linear(16, hidden), torch::nn::ReLU(),
                                                  torch::nn::Linear(hidden, 2)));
    opt_ = ctx.wrap_optimizer(std::make_shared<torch::optim::SGD>(
        model_->parameters(), torch::optim::SGDOptions(ctx.get_hparam<double>("learning_rate"))));
  }

  det::DataLoader build_training_data_loader() override {
    return det::DataLoader(std::make_shared<Points>(1024, 1),
                           det::DataLoaderOptions(ctx_.get_per_slot_batch_size()).shuffle(true));
  }
  det::DataLoader build_validation_data_loader() override {
    return det::DataLoader(std::make_shared<Points>(256, 2), ctx_.get_per_slot_batch_size());
  }

  det::Metrics train_batch(det::Batch& batch, int64_t epoch_idx, int64_t batch_idx) override {
    auto loss = torch::nn::functional::cross_entropy(model_->forward(batch[0]), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(*opt_);
    return {{"loss", loss}};  // training metrics: tensors or doubles
  }

  // Validation metrics, averaged over the batches. The config's
  // searcher.metric names one of them as returned here: `loss`.
  det::Metrics evaluate_batch(det::Batch& batch, int64_t batch_idx) override {
    auto logits = model_->forward(batch[0]);
    auto accuracy = logits.argmax(1).eq(batch[1]).to(torch::kFloat).mean();
    return {{"loss", torch::nn::functional::cross_entropy(logits, batch[1])}, {"accuracy", accuracy}};
  }

 private:
  det::TrialContext& ctx_;
  torch::nn::Sequential model_{nullptr};
  std::shared_ptr<torch::optim::SGD> opt_;
};

}  // namespace

DET_REGISTER_TRIAL(MinimalTrial)
