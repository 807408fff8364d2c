// Fashion-MNIST CNN trial: about 88% validation accuracy after one epoch.
#include <torch/torch.h>

#include "det/det.h"
#include "examples/fashion_mnist/fashion_mnist_data.h"
#include "examples/fashion_mnist/fashion_mnist_model.h"

namespace fashion_mnist {

class FashionMnistTrial final : public det::Trial {
 public:
  explicit FashionMnistTrial(det::TrialContext& context) : context_(context) {
    const auto& data = context.get_data_config();
    source_dir_ = data.is_object() ? data.value("source_dir", std::string(kDefaultSourceDir)) : kDefaultSourceDir;
    cache_dir_ = data.is_object() ? data.value("cache_dir", DefaultCacheDir()) : DefaultCacheDir();
    train_limit_ = data.is_object() ? data.value("train_limit", int64_t{0}) : 0;
    validation_limit_ = data.is_object() ? data.value("validation_limit", int64_t{0}) : 0;
    workers_ = data.is_object() ? data.value("workers", int64_t{1}) : 1;
    EnsureUncompressed(source_dir_, cache_dir_);

    model_ = context.wrap_model(Cnn(context.get_hparam<int64_t>("n_filters1"),
                                    context.get_hparam<int64_t>("n_filters2"),
                                    context.get_hparam<int64_t>("hidden_size"), context.get_hparam<double>("dropout")));
    optimizer_ = context.wrap_optimizer(std::make_shared<torch::optim::Adam>(
        model_->parameters(), torch::optim::AdamOptions(context.get_hparam<double>("learning_rate"))));
    // Optional hyperparameter: "none" (default), "bf16" (bfloat16 autocast,
    // CPU or GPU) or "fp16" (float16 autocast with loss scaling, GPU).
    const std::string precision =
        context.hparams().contains("mixed_precision") ? context.get_hparam<std::string>("mixed_precision") : "none";
    if (precision == "bf16") {
      context.configure_mixed_precision(det::MixedPrecisionOptions().dtype(torch::kBFloat16));
    } else if (precision == "fp16") {
      context.configure_mixed_precision(det::MixedPrecisionOptions().dtype(torch::kHalf));
    } else if (precision != "none") {
      throw std::invalid_argument("hyperparameter 'mixed_precision' is '" + precision +
                                  "'; expected none, bf16 or fp16");
    }
  }

  det::DataLoader build_training_data_loader() override {
    return det::DataLoader(std::make_shared<FashionMnist>(cache_dir_, /*train=*/true, train_limit_),
                           det::DataLoaderOptions(context_.get_per_slot_batch_size()).shuffle(true).workers(workers_));
  }

  det::DataLoader build_validation_data_loader() override {
    return det::DataLoader(std::make_shared<FashionMnist>(cache_dir_, /*train=*/false, validation_limit_),
                           det::DataLoaderOptions(500));
  }

  det::Metrics train_batch(det::Batch& batch, int64_t epoch_idx, int64_t batch_idx) override {
    auto logits = model_->forward(batch[0]);
    auto loss = torch::nn::functional::cross_entropy(logits, batch[1]);
    context_.backward(loss);
    context_.step_optimizer(*optimizer_);
    return {{"loss", loss}};
  }

  det::Metrics evaluate_batch(det::Batch& batch, int64_t batch_idx) override {
    auto logits = model_->forward(batch[0]);
    auto loss = torch::nn::functional::cross_entropy(logits, batch[1]);
    auto accuracy = logits.argmax(1).eq(batch[1]).to(torch::kFloat).mean();
    return {{"validation_loss", loss}, {"accuracy", accuracy}};
  }

 private:
  det::TrialContext& context_;
  std::string source_dir_, cache_dir_;
  int64_t train_limit_ = 0, validation_limit_ = 0, workers_ = 1;
  Cnn model_{nullptr};
  std::shared_ptr<torch::optim::Adam> optimizer_;
};

}  // namespace fashion_mnist

DET_REGISTER_TRIAL(fashion_mnist::FashionMnistTrial)
