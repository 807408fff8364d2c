// det-trial --managed: runs one rank of an allocation for the master.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_MANAGED_MODE_H_
#define DET_TRIAL_RUNTIME_RUNTIME_MANAGED_MODE_H_

#include <string>

#include "common/exit_codes.h"

namespace det::runtime {

// Exit code of a managed run that lost its master, its allocation or its
// agent (common/exit_codes.h).
using det::kExitMasterUnreachable;

// Reads DET_MASTER, DET_ALLOCATION_ID and DET_RANK from the environment and
// the allocation token from fd DET_ALLOCATION_TOKEN_FD (else
// DET_ALLOCATION_TOKEN; allocation_token.h), makes itself non-dumpable,
// fetches the trial's context from the master's
// TrialService, restores its latest checkpoint, then performs the operations
// the master hands out (train to N batches, validate, checkpoint, exit),
// reporting metrics and checkpoints. SIGTERM or the master's preemption make
// it checkpoint and exit 0. A master outage is ridden out: calls are retried
// (and are idempotent on the master) until it is back. Returns the process
// exit code; a config or library error reports ReportEarlyExit(ERRORED) and
// exits 2 or 3, which the master does not retry.
int RunManaged(const std::string& trial_path, int threads);
// The same with the allocation token given rather than read (det-trial
// --slurm-job-file: slurm_mode.h).
int RunManagedWithToken(const std::string& trial_path, int threads, const std::string& token);

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_MANAGED_MODE_H_
