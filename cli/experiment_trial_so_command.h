// det-cli experiment set trial-so ID TRIAL.so: attaches a trial.so rebuilt
// from the same source to a PAUSED experiment (after an upgrade whose Trial
// SDK ABI changed, or a restore without the master's artifacts), so that its
// trials resume from their checkpoints with it (docs/operations/upgrade.md).
//
// Not thread-safe: run one command at a time per Client.
#ifndef DET_CLI_EXPERIMENT_TRIAL_SO_COMMAND_H_
#define DET_CLI_EXPERIMENT_TRIAL_SO_COMMAND_H_

#include <cstdint>
#include <string>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/experiment_lifecycle_commands.h"

namespace CLI {
class App;
}  // namespace CLI

namespace det::cli {

// The largest trial.so det-cli reads (the master has its own, smaller,
// --max-artifact-mib).
inline constexpr int64_t kMaxTrialSoFileBytes = int64_t{4} << 30;

struct SetTrialSoArgs {
  int64_t experiment_id = 0;
  std::string trial_path;
  // As ExperimentCreateArgs: skip det-cli's own ABI check (the master
  // still checks), and the det-trial whose libraries it checks against.
  bool no_local_abi_check = false;
  std::string det_trial;
};

// Reads TRIAL.so (2 when unreadable or over kMaxTrialSoFileBytes), checks it
// locally like `experiment create` (1 when it cannot be loaded), uploads it
// (UploadArtifact) and sends PatchExperiment with its sha256 and file name;
// prints "Experiment ID now runs FILE (sha256 ...)". The master refuses
// (1, its message) an experiment that is not PAUSED or whose trials still
// run, and a trial.so its agents cannot load.
int ExperimentSetTrialSo(Client& client, const SetTrialSoArgs& args, const CommandIo& io);

// Registers `trial-so` under `set` (experiment set); the command run is
// stored in *run.
void AddExperimentSetTrialSoCommand(CLI::App* set, LifecycleCommand* run);

}  // namespace det::cli

#endif  // DET_CLI_EXPERIMENT_TRIAL_SO_COMMAND_H_
