// bench/harness_overhead: the Fashion-MNIST CNN trained for the same number
// of batches (same model, data, batch size, optimizer) by a hand-written
// LibTorch loop in a child process and by det-trial --local on the example
// trial.so; prints both throughputs and their ratio (goal: det-trial >= 0.98).
//
//   harness_overhead [--batches N] [--rounds R]
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/det_trial_runner.h"
#include "bench/fashion_mnist_loop.h"

namespace {
namespace fs = std::filesystem;

// Batches per second that det-trial reports for its training loop.
double DetTrial(const std::string& dir, int64_t batches) {
  const char* workers = std::getenv("DET_BENCH_WORKERS");
  std::string config = det::bench::WriteFashionConfig(dir, batches, 64, workers ? workers : "1");
  return det::bench::RunDetTrialBatchesPerSecond(dir, config, "");
}

using det::bench::HandWrittenLoopInChild;
using det::bench::kBatchSize;
using det::bench::MakeTempDir;
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
  const std::string dir = MakeTempDir("harness_overhead");

  std::vector<double> hand, det;
  std::printf("harness_overhead: Fashion-MNIST CNN, batch %lld, %lld batches per run, %d rounds; each side in a "
              "fresh process, timing its training loop only\n",
              static_cast<long long>(kBatchSize), static_cast<long long>(batches), rounds);
  for (int r = 0; r < rounds; ++r) {
    hand.push_back(HandWrittenLoopInChild(batches, torch::kCPU));
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
