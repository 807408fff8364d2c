// A small classifier on generated data, exercising every part of the SDK that
// a resumed run must restore: dropout (torch RNG), Adam (optimizer state), a
// per-batch LR scheduler, shuffling with loader workers, and a stateful
// callback. Test-only hyperparameters: batch_delay_ms slows each batch down,
// val_batch_delay_ms each validation batch,
// throw_at_batch makes train_batch throw at that batch, tokens_per_record
// makes train_batch report a cumulative `tokens` training metric
// ((batch_idx + 1) x global batch x tokens_per_record, for searcher
// time_metric: tokens). Without hyperparameters.global_batch_size (Determined
// 0.38 configs) the loaders use data.batch_size (default 8) per slot.
#include <cstdio>
#include <chrono>
#include <thread>

#include <torch/torch.h>

#include "det/det.h"

namespace {

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t hidden, double dropout)
      : fc1(register_module("fc1", torch::nn::Linear(in, hidden))),
        drop(register_module("drop", torch::nn::Dropout(dropout))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, 2))) {}
  torch::Tensor forward(torch::Tensor x) { return fc2(drop(torch::relu(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Mlp);

// Points from a seeded normal; the label is the sign of a fixed projection.
class GeneratedDataset final : public det::Dataset {
 public:
  // Splits of one seed share the labelling projection.
  GeneratedDataset(int64_t n, int64_t features, uint64_t seed, uint64_t split) {
    auto w = torch::randn({features}, at::make_generator<at::CPUGeneratorImpl>(seed));
    x_ = torch::randn({n, features}, at::make_generator<at::CPUGeneratorImpl>(seed * 1000 + split + 1));
    y_ = (x_.matmul(w) > 0).to(torch::kLong);
  }
  size_t size() const override { return static_cast<size_t>(x_.size(0)); }
  det::Batch get(size_t i) override {
    return det::Batch({x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]});
  }
  det::Batch get_batch(const std::vector<size_t>& indices) override {
    std::vector<int64_t> idx(indices.begin(), indices.end());
    auto t = torch::tensor(idx, torch::kLong);
    return det::Batch({x_.index_select(0, t), y_.index_select(0, t)});
  }

 private:
  torch::Tensor x_, y_;
};

// Counts epochs; its count survives checkpoints.
class EpochCounter final : public det::Callback {
 public:
  void on_training_epoch_end(int64_t) override { ++epochs_; }
  nlohmann::json state_dict() override { return {{"epochs", epochs_}}; }
  void load_state_dict(const nlohmann::json& s) override { epochs_ = s.at("epochs").get<int64_t>(); }

 private:
  int64_t epochs_ = 0;
};

class SyntheticTrial final : public det::Trial {
 public:
  explicit SyntheticTrial(det::TrialContext& context) : context_(context) {
    const auto& data = context.get_data_config();
    features_ = data.value("features", 16);
    model_ = context.wrap_model(
        Mlp(features_, context.get_hparam<int64_t>("hidden_size"), context.get_hparam<double>("dropout")));
    optimizer_ = context.wrap_optimizer(std::make_shared<torch::optim::Adam>(
        model_->parameters(), torch::optim::AdamOptions(context.get_hparam<double>("learning_rate"))));
    scheduler_ = context.wrap_lr_scheduler(std::make_shared<torch::optim::StepLR>(*optimizer_, 50, 0.9),
                                           det::LRSchedulerStepMode::kStepEveryBatch);
    auto hp = context.hparams();
    delay_ms_ = hp.value("batch_delay_ms", 0);
    val_delay_ms_ = hp.value("val_batch_delay_ms", 0);
    throw_at_ = hp.value("throw_at_batch", int64_t{-1});
    tokens_per_record_ = hp.value("tokens_per_record", 0.0);
    // "bf16": bfloat16 autocast, with a loss scaler that grows every 40
    // steps (exercising the scaler; bfloat16 itself needs none).
    if (hp.value("mixed_precision", std::string("none")) == "bf16") {
      context.configure_mixed_precision(
          det::MixedPrecisionOptions().dtype(torch::kBFloat16).loss_scaling(true).init_scale(256).growth_interval(40));
    }
  }

  det::DataLoader build_training_data_loader() override {
    const auto& data = context_.get_data_config();
    auto ds = std::make_shared<GeneratedDataset>(data.value("train_size", 1024), features_, data.value("seed", 1), 0);
    return det::DataLoader(ds, det::DataLoaderOptions(BatchSize()).shuffle(true).workers(2));
  }

  det::DataLoader build_validation_data_loader() override {
    const auto& data = context_.get_data_config();
    auto ds =
        std::make_shared<GeneratedDataset>(data.value("val_size", 256), features_, data.value("seed", 1), 1);
    return det::DataLoader(ds, det::DataLoaderOptions(BatchSize()));
  }

  det::Metrics train_batch(det::Batch& batch, int64_t epoch_idx, int64_t batch_idx) override {
    if (batch_idx == throw_at_) throw std::runtime_error("synthetic failure at batch " + std::to_string(batch_idx));
    if (delay_ms_ >= 1000) {
      // Long delays are for tests that need to know a batch is under way.
      std::printf("[synthetic] batch %lld started, sleeping %lld ms\n", static_cast<long long>(batch_idx),
                  static_cast<long long>(delay_ms_));
      std::fflush(stdout);
    }
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    auto out = model_->forward(batch[0]);
    auto loss = torch::nn::functional::cross_entropy(out, batch[1]);
    context_.backward(loss);
    context_.step_optimizer(*optimizer_, det::StepOptimizerOptions().clip_grad_norm(1.0));
    auto acc = out.argmax(1).eq(batch[1]).to(torch::kFloat).mean();
    det::Metrics metrics = {
        {"loss", loss}, {"accuracy", acc}, {"lr", optimizer_->param_groups()[0].options().get_lr()}};
    if (tokens_per_record_ > 0) {
      const double global_batch = static_cast<double>(batch[0].size(0)) * context_.distributed().size();
      metrics.emplace("tokens", static_cast<double>(batch_idx + 1) * global_batch * tokens_per_record_);
    }
    return metrics;
  }

  det::Metrics evaluate_batch(det::Batch& batch, int64_t batch_idx) override {
    if (val_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(val_delay_ms_));
    auto out = model_->forward(batch[0]);
    auto loss = torch::nn::functional::cross_entropy(out, batch[1]);
    auto acc = out.argmax(1).eq(batch[1]).to(torch::kFloat).mean();
    return {{"validation_loss", loss}, {"validation_accuracy", acc}};
  }

  std::map<std::string, std::shared_ptr<det::Callback>> build_callbacks() override {
    return {{"epoch_counter", std::make_shared<EpochCounter>()}};
  }

 private:
  // Per slot: from global_batch_size when the hparams have one.
  int64_t BatchSize() const {
    if (context_.has_global_batch_size()) return context_.get_per_slot_batch_size();
    return context_.get_data_config().value("batch_size", int64_t{8});
  }

  det::TrialContext& context_;
  int64_t features_ = 16;
  Mlp model_{nullptr};
  std::shared_ptr<torch::optim::Adam> optimizer_;
  std::shared_ptr<torch::optim::StepLR> scheduler_;
  int delay_ms_ = 0;
  int val_delay_ms_ = 0;
  int64_t throw_at_ = -1;
  double tokens_per_record_ = 0;
};

}  // namespace

DET_REGISTER_TRIAL(SyntheticTrial)
