// bench/harness_overhead: the Fashion-MNIST CNN trained for the same number
// of batches (same model, data, batch size, optimizer) by a hand-written
// LibTorch loop in this process and by det-trial --local on the example
// trial.so; prints both throughputs and their ratio (goal: det-trial >= 0.98).
//
//   harness_overhead [--batches N] [--rounds R]
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "bench/det_trial_runner.h"
#include "examples/fashion_mnist/fashion_mnist_data.h"
#include "examples/fashion_mnist/fashion_mnist_model.h"

namespace {
namespace fs = std::filesystem;

constexpr int64_t kBatchSize = 64;

// Batches per second of a plain LibTorch loop over shuffled Fashion-MNIST.
double HandWrittenLoop(int64_t batches) {
  std::string cache = fashion_mnist::DefaultCacheDir();
  fashion_mnist::EnsureUncompressed(fashion_mnist::kDefaultSourceDir, cache);
  fashion_mnist::FashionMnist data(cache, /*train=*/true);
  torch::manual_seed(42);
  fashion_mnist::Cnn model(16, 32, 128, 0.25);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  model->train();
  const int64_t n = data.images().size(0);
  const int64_t per_epoch = (n + kBatchSize - 1) / kBatchSize;
  torch::Tensor perm;
  double loss_sum = 0;
  auto start = std::chrono::steady_clock::now();
  for (int64_t k = 0; k < batches; ++k) {
    if (k % per_epoch == 0) perm = torch::randperm(n, torch::kLong);
    auto idx = perm.narrow(0, (k % per_epoch) * kBatchSize, std::min(kBatchSize, n - (k % per_epoch) * kBatchSize));
    auto x = data.images().index_select(0, idx);
    auto y = data.targets().index_select(0, idx);
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    loss_sum += loss.item<double>();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (loss_sum < 0) std::printf("impossible\n");
  return static_cast<double>(batches) / secs;
}

// Runs the hand-written loop in a fresh child process, as det-trial runs in
// one, so that neither side profits from warm caches of the other.
double HandWrittenLoopInChild(int64_t batches) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    double r = HandWrittenLoop(batches);
    ssize_t n = write(fds[1], &r, sizeof(r));
    _exit(n == sizeof(r) ? 0 : 1);
  }
  close(fds[1]);
  double r = 0;
  ssize_t n = read(fds[0], &r, sizeof(r));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n != sizeof(r) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "hand-written loop failed\n");
    std::exit(1);
  }
  return r;
}

// Batches per second that det-trial reports for its training loop.
double DetTrial(const std::string& dir, int64_t batches) {
  const char* workers = std::getenv("DET_BENCH_WORKERS");
  std::string config = det::bench::WriteFashionConfig(dir, batches, 64, workers ? workers : "1");
  return det::bench::RunDetTrialBatchesPerSecond(dir, config, "");
}

using det::bench::Median;

}  // namespace

int main(int argc, char** argv) {
  int64_t batches = 400;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--batches") batches = std::atoll(argv[i + 1]);
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
  }
  // The same allocator tuning det-trial applies, so the hand-written loop is
  // not handicapped by glibc's mmap churn.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  std::string dir = (fs::temp_directory_path() / ("det-bench-" + std::to_string(getpid()))).string();
  fs::create_directories(dir);

  std::vector<double> hand, det;
  std::printf("harness_overhead: Fashion-MNIST CNN, batch %lld, %lld batches per run, %d rounds; each side in a "
              "fresh process, timing its training loop only\n",
              static_cast<long long>(kBatchSize), static_cast<long long>(batches), rounds);
  for (int r = 0; r < rounds; ++r) {
    hand.push_back(HandWrittenLoopInChild(batches));
    det.push_back(DetTrial(dir, batches));
    std::printf("  round %d: hand-written %.2f batches/s, det-trial %.2f batches/s\n", r + 1, hand.back(), det.back());
  }
  fs::remove_all(dir);
  double h = Median(hand), d = Median(det);
  std::printf("hand-written loop: %.2f batches/s (median)\n", h);
  std::printf("det-trial:         %.2f batches/s (median)\n", d);
  std::printf("ratio det-trial / hand-written: %.3f (goal >= 0.98)\n", d / h);
  return 0;
}
