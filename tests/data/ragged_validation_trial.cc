// A trial for the validation reducer tests: 600 validation samples whose
// value is SampleValue(i), so with batch size 64 the last batch holds 24.
// evaluate_batch returns "score", the mean value of the batch. Hyperparameters:
// reducer ("avg" default, "avg_per_batch") and tensorless (true: the
// validation batches hold no tensor; the score is computed from batch_idx).
#include <algorithm>
#include <string>

#include <torch/torch.h>

#include "det/det.h"

namespace {

constexpr int64_t kValidationSize = 600;

// The value of sample i; the test computes its means from the same formula.
double SampleValue(int64_t i) { return static_cast<double>((i * 37) % 101) / 101.0; }

class Values final : public det::Dataset {
 public:
  Values(int64_t n, bool tensorless) : n_(n), tensorless_(tensorless) {}
  size_t size() const override { return static_cast<size_t>(n_); }
  det::Batch get(size_t i) override { return get_batch({i}); }
  det::Batch get_batch(const std::vector<size_t>& indices) override {
    if (tensorless_) return det::Batch(det::Batch::TensorList{});
    auto t = torch::empty({static_cast<int64_t>(indices.size())}, torch::kFloat64);
    for (size_t k = 0; k < indices.size(); ++k) t[static_cast<int64_t>(k)] = SampleValue(static_cast<int64_t>(indices[k]));
    return det::Batch({t});
  }

 private:
  int64_t n_;
  bool tensorless_;
};

class RaggedValidationTrial final : public det::Trial {
 public:
  explicit RaggedValidationTrial(det::TrialContext& ctx) : ctx_(ctx) {
    model_ = ctx.wrap_model(torch::nn::Linear(1, 1));
    opt_ = ctx.wrap_optimizer(
        std::make_shared<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(0.01)));
    per_batch_ = ctx.hparams().value("reducer", std::string("avg")) == "avg_per_batch";
    tensorless_ = ctx.hparams().value("tensorless", false);
  }
  det::DataLoader build_training_data_loader() override {
    return det::DataLoader(std::make_shared<Values>(128, false), det::DataLoaderOptions(ctx_.get_per_slot_batch_size()));
  }
  det::DataLoader build_validation_data_loader() override {
    return det::DataLoader(std::make_shared<Values>(kValidationSize, tensorless_),
                           det::DataLoaderOptions(ctx_.get_per_slot_batch_size()));
  }
  det::Metrics train_batch(det::Batch& batch, int64_t, int64_t) override {
    auto x = batch[0].to(torch::kFloat32).reshape({-1, 1});
    auto loss = torch::mse_loss(model_->forward(x), x);
    ctx_.backward(loss);
    ctx_.step_optimizer(*opt_);
    return {{"loss", loss}};
  }
  det::Metrics evaluate_batch(det::Batch& batch, int64_t batch_idx) override {
    if (!tensorless_) return {{"score", batch[0].mean().item<double>()}};
    // One rank: batch batch_idx covers samples [64 * batch_idx, +64).
    const int64_t size = ctx_.get_per_slot_batch_size();
    const int64_t begin = batch_idx * size;
    const int64_t end = std::min(begin + size, kValidationSize);
    double sum = 0;
    for (int64_t i = begin; i < end; ++i) sum += SampleValue(i);
    return {{"score", sum / static_cast<double>(end - begin)}};
  }
  det::Reducer evaluation_reducer(const std::string&) override {
    return per_batch_ ? det::Reducer::kAvgPerBatch : det::Reducer::kAvg;
  }

 private:
  det::TrialContext& ctx_;
  torch::nn::Linear model_{nullptr};
  std::shared_ptr<torch::optim::SGD> opt_;
  bool per_batch_ = false;
  bool tensorless_ = false;
};

}  // namespace

DET_REGISTER_TRIAL(RaggedValidationTrial)
