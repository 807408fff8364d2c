// A hostile trial for the metric bounds (issue 46, finding 6): every batch
// it reports, besides its loss,
//   - group "flood": flood_names distinct names of name_bytes bytes, new
//     ones each batch (20,000 of 100 bytes: the reported attack);
//   - group "wide": wide_names new distinct names (to reach the trial's
//     distinct-name bound);
//   - group "same": same_names fixed names (to reach the bytes bound).
// ctx.report_metrics returns normally when the master refuses a report
// (det-trial logs it), so the trial floods until it is stopped.
// Hyperparameters: flood_names, wide_names, same_names, name_bytes,
// batch_delay_ms.
#include <chrono>
#include <map>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "det/det.h"

namespace {

class Points final : public det::Dataset {
 public:
  explicit Points(int64_t n) : x_(torch::ones({n, 4})), y_(torch::ones({n, 1})) {}
  size_t size() const override { return static_cast<size_t>(x_.size(0)); }
  det::Batch get(size_t i) override {
    return det::Batch({x_[static_cast<int64_t>(i)], y_[static_cast<int64_t>(i)]});
  }

 private:
  torch::Tensor x_, y_;
};

// Name `i` of `kind`, padded with 'x' to `bytes` bytes.
std::string Name(const std::string& kind, long long i, int bytes) {
  std::string s = kind + "_" + std::to_string(i) + "_";
  if (static_cast<int>(s.size()) < bytes) s.append(static_cast<size_t>(bytes) - s.size(), 'x');
  return s;
}

class MetricFloodTrial final : public det::Trial {
 public:
  explicit MetricFloodTrial(det::TrialContext& ctx) : ctx_(ctx) {
    model_ = ctx.wrap_model(torch::nn::Linear(4, 1));
    opt_ = ctx.wrap_optimizer(
        std::make_shared<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(0.01)));
    flood_ = ctx.hparams().value("flood_names", 20000);
    wide_ = ctx.hparams().value("wide_names", 500);
    same_ = ctx.hparams().value("same_names", 100);
    bytes_ = ctx.hparams().value("name_bytes", 100);
    delay_ms_ = ctx.hparams().value("batch_delay_ms", 0);
  }
  det::DataLoader build_training_data_loader() override {
    return det::DataLoader(std::make_shared<Points>(64), det::DataLoaderOptions(ctx_.get_per_slot_batch_size()));
  }
  det::DataLoader build_validation_data_loader() override {
    return det::DataLoader(std::make_shared<Points>(8), det::DataLoaderOptions(ctx_.get_per_slot_batch_size()));
  }
  det::Metrics train_batch(det::Batch& batch, int64_t, int64_t) override {
    if (delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    auto loss = torch::mse_loss(model_->forward(batch[0]), batch[1]);
    ctx_.backward(loss);
    ctx_.step_optimizer(*opt_);
    Report("flood", flood_, static_cast<long long>(n_) * flood_);
    Report("wide", wide_, static_cast<long long>(n_) * wide_);
    Report("same", same_, 0);
    ++n_;
    return {{"loss", loss}};
  }
  det::Metrics evaluate_batch(det::Batch& batch, int64_t) override {
    return {{"validation_loss", torch::mse_loss(model_->forward(batch[0]), batch[1])}};
  }

 private:
  void Report(const std::string& group, int count, long long first) {
    if (count <= 0) return;
    std::map<std::string, double> m;
    for (long long i = first; i < first + count; ++i) m.emplace(Name(group, i, bytes_), static_cast<double>(i));
    ctx_.report_metrics(group, m);
  }

  det::TrialContext& ctx_;
  torch::nn::Linear model_{nullptr};
  std::shared_ptr<torch::optim::SGD> opt_;
  int flood_ = 0, wide_ = 0, same_ = 0, bytes_ = 100, delay_ms_ = 0;
  int n_ = 0;
};

}  // namespace

DET_REGISTER_TRIAL(MetricFloodTrial)
