// fashion_mnist_predict CHECKPOINT_DIR [--data-dir DIR] [--cache-dir DIR]
//
// Evaluates a Fashion-MNIST checkpoint on the test set with no master: the
// model is rebuilt from the checkpoint's hyperparameters and its weights
// loaded with det::load_model_from_checkpoint; the evaluation is the
// trial's (batches of 500 in order, eval mode, per-batch accuracy averaged),
// so the printed accuracy equals the validation accuracy recorded with the
// checkpoint. Get a checkpoint with
//   det-cli experiment list-checkpoints ID          (the best: highest accuracy)
//   det-cli checkpoint download UUID -o ckpt
//   fashion_mnist_predict ckpt
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <torch/torch.h>

#include "det/inference.h"
#include "examples/fashion_mnist/fashion_mnist_data.h"
#include "examples/fashion_mnist/fashion_mnist_model.h"

namespace {

int Usage() {
  std::fprintf(stderr, "usage: fashion_mnist_predict CHECKPOINT_DIR [--data-dir DIR] [--cache-dir DIR]\n");
  return 2;
}

int Run(int argc, char** argv) {
  std::string checkpoint, data_dir = fashion_mnist::kDefaultSourceDir, cache_dir = fashion_mnist::DefaultCacheDir();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--data-dir") == 0 && i + 1 < argc) {
      data_dir = argv[++i];
    } else if (std::strcmp(argv[i], "--cache-dir") == 0 && i + 1 < argc) {
      cache_dir = argv[++i];
    } else if (argv[i][0] == '-' || !checkpoint.empty()) {
      return Usage();
    } else {
      checkpoint = argv[i];
    }
  }
  if (checkpoint.empty()) return Usage();
  const nlohmann::json meta = det::load_checkpoint_metadata(checkpoint);
  const nlohmann::json& hp = meta.at("hparams");
  fashion_mnist::Cnn model(hp.at("n_filters1").get<int64_t>(), hp.at("n_filters2").get<int64_t>(),
                           hp.at("hidden_size").get<int64_t>(), hp.at("dropout").get<double>());
  det::load_model_from_checkpoint(checkpoint, *model);
  model->eval();

  fashion_mnist::EnsureUncompressed(data_dir, cache_dir);
  fashion_mnist::FashionMnist test(cache_dir, /*train=*/false);
  torch::NoGradGuard no_grad;
  constexpr int64_t kBatch = 500;  // the trial's validation batch size
  const int64_t n = test.images().size(0);
  double sum = 0;
  int64_t batches = 0;
  for (int64_t start = 0; start < n; start += kBatch) {
    const int64_t end = std::min(n, start + kBatch);
    auto logits = model->forward(test.images().slice(0, start, end));
    auto accuracy = logits.argmax(1).eq(test.targets().slice(0, start, end)).to(torch::kFloat).mean();
    sum += accuracy.item<double>();
    ++batches;
  }
  std::printf("checkpoint %s (trial %s, %s batches): test accuracy %.4f on %lld images\n",
              meta.value("uuid", std::string("?")).c_str(), meta.contains("trial_id") ? meta["trial_id"].dump().c_str() : "?",
              meta.contains("batches_trained") ? meta["batches_trained"].dump().c_str() : "?", sum / batches,
              static_cast<long long>(n));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist_predict: error: %s\n", e.what());
    return 1;
  }
}
