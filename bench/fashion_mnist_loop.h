// The hand-written side of the Fashion-MNIST benches: the example's CNN
// trained by a plain LibTorch loop (shuffled batches of 64, Adam 1e-3), on
// the CPU or a CUDA device, in a fresh child process. Header-only; the bench
// links examples/fashion_mnist/fashion_mnist_data.cc.
#ifndef DET_BENCH_FASHION_MNIST_LOOP_H_
#define DET_BENCH_FASHION_MNIST_LOOP_H_

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <torch/cuda.h>
#include <torch/torch.h>

#include "examples/fashion_mnist/fashion_mnist_data.h"
#include "examples/fashion_mnist/fashion_mnist_model.h"

namespace det::bench {

inline constexpr int64_t kBatchSize = 64;

// Batches per second of a plain LibTorch loop over shuffled Fashion-MNIST.
inline double HandWrittenLoop(int64_t batches, torch::Device device) {
  fashion_mnist::FashionMnist data(fashion_mnist::EnsureDefaultCache(), /*train=*/true);
  torch::manual_seed(42);
  fashion_mnist::Cnn model(16, 32, 128, 0.25);
  model->to(device);
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
    // Batches are gathered on the CPU and copied over, as det::DataLoader does.
    auto x = data.images().index_select(0, idx).to(device);
    auto y = data.targets().index_select(0, idx).to(device);
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    loss_sum += loss.item<double>();
  }
  if (device.is_cuda()) torch::cuda::synchronize();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (loss_sum < 0) std::printf("impossible\n");
  return static_cast<double>(batches) / secs;
}

// Runs the hand-written loop in a fresh child process, as det-trial runs in
// one, so that neither side profits from warm caches of the other.
inline double HandWrittenLoopInChild(int64_t batches, torch::Device device) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    double r = HandWrittenLoop(batches, device);
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

}  // namespace det::bench

#endif  // DET_BENCH_FASHION_MNIST_LOOP_H_
