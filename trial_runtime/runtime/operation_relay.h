// Managed mode with several ranks: only the chief (rank 0) talks to the
// master for operations; it relays each one to the other ranks through the
// process group's store, and every rank performs it in step (training and
// validation are collective, the chief alone reports and checkpoints).
#ifndef DET_TRIAL_RUNTIME_RUNTIME_OPERATION_RELAY_H_
#define DET_TRIAL_RUNTIME_RUNTIME_OPERATION_RELAY_H_

#include "absl/status/status.h"
#include "det/trial/v1/trial.pb.h"
#include "trial_runtime/runtime/distributed.h"
#include "trial_runtime/runtime/trial_controller.h"

namespace det::runtime {

// Chief: hands `op` to the other ranks before performing it itself. TRAIN,
// VALIDATE, CHECKPOINT and EXIT are relayed; WAIT is not (the others simply
// keep waiting). A no-op when `dist` is null. Returns once every other rank
// has received it; Unavailable when one is gone.
absl::Status RelayOperation(Distributed* dist, const det::trial::v1::Operation& op);

// Chief: tells the other ranks to checkpoint with it and exit (the chief was
// preempted while waiting for an operation). A no-op when `dist` is null.
absl::Status RelayPreemption(Distributed* dist);

// Non-chief ranks: performs the chief's relayed operations until EXIT, a
// preemption (a checkpoint is written with the chief first) or an error.
// Returns the process exit code: 0, or 1 (2 for a searcher-metric error)
// after printing the error.
int RunRelayedOperations(TrialController& controller, Distributed& dist);

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_OPERATION_RELAY_H_
