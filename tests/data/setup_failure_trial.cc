// A trial that needs a data file, for the setup-error tests (issue 45): it
// throws "cannot open data file 'PATH': No such file or directory" where the
// config's data section says, when data.required_file does not exist:
//   data:
//     required_file: PATH
//     throw_in: constructor (default), build_training_data_loader or
//       build_validation_data_loader
//     rank: N             only rank N looks for the file (default: every rank)
//     appears_after_failure: true
//                         the failing attempt creates the file as it throws
//                         (a file system briefly at fault): the next attempt
//                         finds it, with no race against the test
// Otherwise a small linear model on generated data.
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include <torch/torch.h>

#include "det/det.h"

namespace {

class Points final : public det::Dataset {
 public:
  explicit Points(int64_t n) : x_(torch::randn({n, 4}, at::make_generator<at::CPUGeneratorImpl>(7))) {
    y_ = (x_.sum(1) > 0).to(torch::kLong);
  }
  size_t size() const override { return static_cast<size_t>(x_.size(0)); }
  det::Batch get(size_t i) override { return det::Batch({x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]}); }

 private:
  torch::Tensor x_, y_;
};

class SetupFailureTrial final : public det::Trial {
 public:
  explicit SetupFailureTrial(det::TrialContext& ctx) : ctx_(ctx) {
    NeedDataFile("constructor");
    model_ = ctx.wrap_model(torch::nn::Linear(4, 2));
    opt_ = ctx.wrap_optimizer(
        std::make_shared<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(0.05)));
  }
  det::DataLoader build_training_data_loader() override {
    NeedDataFile("build_training_data_loader");
    return det::DataLoader(std::make_shared<Points>(64), det::DataLoaderOptions(ctx_.get_per_slot_batch_size()));
  }
  det::DataLoader build_validation_data_loader() override {
    NeedDataFile("build_validation_data_loader");
    return det::DataLoader(std::make_shared<Points>(32), det::DataLoaderOptions(ctx_.get_per_slot_batch_size()));
  }
  det::Metrics train_batch(det::Batch& batch, int64_t, int64_t) override {
    auto loss = torch::nn::functional::cross_entropy(model_->forward(batch[0]), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(*opt_);
    return {{"loss", loss}};
  }
  det::Metrics evaluate_batch(det::Batch& batch, int64_t) override {
    return {{"loss", torch::nn::functional::cross_entropy(model_->forward(batch[0]), batch[1])}};
  }

 private:
  // Throws, in `method` if the config says so, when the data file is missing.
  void NeedDataFile(const std::string& method) const {
    const auto& data = ctx_.get_data_config();
    const std::string path = data.value("required_file", std::string());
    if (path.empty() || data.value("throw_in", std::string("constructor")) != method) return;
    const int rank = data.value("rank", -1);
    if (rank >= 0 && rank != ctx_.distributed().rank()) return;
    if (std::ifstream(path).good()) return;
    if (data.value("appears_after_failure", false)) std::ofstream(path) << "data\n";
    throw std::runtime_error("cannot open data file '" + path + "': No such file or directory");
  }

  det::TrialContext& ctx_;
  torch::nn::Linear model_{nullptr};
  std::shared_ptr<torch::optim::SGD> opt_;
};

}  // namespace

DET_REGISTER_TRIAL(SetupFailureTrial)
