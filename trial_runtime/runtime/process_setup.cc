#include "trial_runtime/runtime/process_setup.h"

#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace det::runtime {
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
