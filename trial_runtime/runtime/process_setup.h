// Process-wide setup shared by det-trial's local and managed modes.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_PROCESS_SETUP_H_
#define DET_TRIAL_RUNTIME_RUNTIME_PROCESS_SETUP_H_

#include <string>

#include "absl/status/statusor.h"
#include "common/exit_codes.h"
#include "trial_runtime/runtime/trial_controller.h"

namespace det::runtime {

// det-trial's exit codes (common/exit_codes.h).
using det::kExitConfigError;
using det::kExitLibraryError;
using det::kExitTrialError;

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
