#include "trial_runtime/runtime/process_setup.h"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include <torch/cuda.h>

namespace det::runtime {

absl::StatusOr<torch::Device> SelectDevice(const std::string& requested, const DistributedContext& ranks) {
  const bool cuda = torch::cuda::is_available();
  const int64_t count = cuda ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  if (requested == "cpu" || (requested == "auto" && !cuda)) return torch::Device(torch::kCPU);
  if (requested == "auto" || requested == "cuda") {
    if (!cuda) {
      return absl::InvalidArgumentError("--device cuda: LibTorch sees no CUDA device (a CPU build of LibTorch, "
                                        "no GPU, or CUDA_VISIBLE_DEVICES empty)");
    }
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(count == 1 ? 0 : ranks.local_rank() % count));
  }
  if (requested.rfind("cuda:", 0) == 0) {
    try {
      torch::Device d(requested);
      if (d.index() < count) return d;
    } catch (const std::exception&) {
    }
    return absl::InvalidArgumentError("--device " + requested + ": no such CUDA device (" + std::to_string(count) +
                                      " visible)");
  }
  return absl::InvalidArgumentError("--device '" + requested + "': expected auto, cpu, cuda or cuda:N");
}
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) {
  if (g_stop_signal.exchange(sig) != 0) _exit(128 + sig);  // second signal: stop now
  static const char kMsg[] = "\n[det-trial] stop requested: finishing the current batch and checkpointing\n";
  ssize_t ignored = write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
  (void)ignored;
}

}  // namespace

void TuneAllocator() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

void InstallStopSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool StopRequested() { return g_stop_signal.load(std::memory_order_relaxed) != 0; }

}  // namespace det::runtime
