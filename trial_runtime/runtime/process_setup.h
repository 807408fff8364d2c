// Process-wide setup shared by det-trial's local and managed modes.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_PROCESS_SETUP_H_
#define DET_TRIAL_RUNTIME_RUNTIME_PROCESS_SETUP_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/exit_codes.h"
#include "trial_runtime/runtime/trial_controller.h"

namespace det::runtime {

// det-trial's exit codes (common/exit_codes.h).
using det::kExitConfigError;
using det::kExitLibraryError;
using det::kExitTrialError;
using det::kExitTrialSetupError;

// The most bytes of an error message det-trial sends the master
// (ReportEarlyExit; shown as the trial's error).
inline constexpr size_t kMaxReportedErrorBytes = 4096;

// `message` as the master may store and show it: valid UTF-8 (each byte
// that is not part of a valid sequence becomes '?') and at most `max_bytes`
// bytes, cut at a character boundary and ending in " ... (truncated)" when
// it was longer. A trial's exception text may hold anything.
std::string ReportableMessage(absl::string_view message, size_t max_bytes = kMaxReportedErrorBytes);

// Training allocates and frees the same large activation buffers every batch;
// glibc would serve each with mmap/munmap (page faults and syscalls, up to half
// the step time on a small CNN). Keeps them on the heap instead.
void TuneAllocator();

// The device a rank trains on (TrialContext::device()). `requested`:
//  - "auto": a CUDA device when LibTorch sees one, else the CPU. With one
//    visible device (the agent pins each rank to its GPU through
//    CUDA_VISIBLE_DEVICES) that is cuda:0; with several (local --nproc on a
//    multi-GPU host) cuda:(local_rank mod count).
//  - "cpu", "cuda" (as auto, but an error without CUDA) or "cuda:N".
// InvalidArgument names --device for anything else or a missing device.
absl::StatusOr<torch::Device> SelectDevice(const std::string& requested, const DistributedContext& ranks);

// SIGTERM/SIGINT ask the trial to stop after the current batch; a second one
// exits at once with 128+signal.
void InstallStopSignalHandlers();
bool StopRequested();

// A PreemptionSource that fires on SIGTERM/SIGINT.
class SignalPreemption : public PreemptionSource {
 public:
  bool ShouldPreempt() override { return StopRequested(); }
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_PROCESS_SETUP_H_
