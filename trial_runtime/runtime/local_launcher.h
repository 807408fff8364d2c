// det-trial --local CONFIG TRIAL.so --nproc N: runs the N ranks of a
// distributed trial on this machine (like torchrun), with no master.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_LOCAL_LAUNCHER_H_
#define DET_TRIAL_RUNTIME_RUNTIME_LOCAL_LAUNCHER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace det::runtime {

// A TCP port on 127.0.0.1 that was free a moment ago (the kernel's choice).
absl::StatusOr<int> PickFreeLoopbackPort();

// Starts `nproc` processes `exe args...`, rank r with DET_RANK=r,
// DET_LOCAL_RANK=r, DET_WORLD_SIZE=DET_LOCAL_SIZE=nproc, DET_NODE_RANK=0,
// DET_NUM_NODES=1, DET_CHIEF_ADDR=127.0.0.1 and DET_CHIEF_PORT a free port,
// each in its own process group (so a terminal's Ctrl-C reaches only this
// launcher) and killed if the launcher dies. Forwards SIGTERM and SIGINT to
// every rank. When a rank fails (non-zero exit or a signal) it kills the
// others at once and prints one error line naming the rank. Returns 0 when
// every rank exited 0, else the failed rank's exit code (1 when it died of a
// signal). Call from the main thread, once.
int LaunchLocalRanks(const std::string& exe, const std::vector<std::string>& args, int nproc);

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_LOCAL_LAUNCHER_H_
