#include "trial_runtime/runtime/process_setup.h"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include <torch/cuda.h>

#include "common/utf8.h"

namespace det::runtime {

std::string ReportableMessage(absl::string_view message, size_t max_bytes) {
  constexpr absl::string_view kTruncated = " ... (truncated)";
  std::string out;
  out.reserve(std::min(message.size(), max_bytes));
  size_t i = 0;
  while (i < message.size()) {
    const size_t n = det::Utf8SequenceAt(std::string_view(message.data(), message.size()), i);
    const size_t take = n == 0 ? 1 : n;
    if (out.size() + take > max_bytes) break;
    if (n == 0) {
      out.push_back('?');
    } else {
      out.append(message.data() + i, n);
    }
    i += take;
  }
  if (i == message.size()) return out;
  // Too long: cut back to a character boundary that leaves room for the mark.
  size_t keep = max_bytes > kTruncated.size() ? max_bytes - kTruncated.size() : 0;
  keep = std::min(keep, out.size());
  while (keep > 0 && (static_cast<unsigned char>(out[keep]) & 0xC0) == 0x80) --keep;
  out.resize(keep);
  if (max_bytes >= kTruncated.size()) out.append(kTruncated.data(), kTruncated.size());
  return out;
}

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
