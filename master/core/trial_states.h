// What a trial is doing and why, as the master shows it (Trial.state,
// Trial.state_reason, the trial's log lines) and tells its runtime
// (Operation.exit_reason, ShouldPreemptResponse.reason). Pure functions of
// the in-memory state (core_state.h); the caller holds MasterCore's mutex.
//
//   state as stored      shown as   state_reason (examples)
//   ACTIVE, running      ACTIVE     "" (or "pausing: ...", "preempted ...")
//   ACTIVE, queued       ACTIVE     "queued for 1 slot(s)"
//   ACTIVE, no work now  WAITING    "waiting for promotion: ..."
//   PAUSED               PAUSED     "paused by the user ..."
//   COMPLETED            COMPLETED  "completed at 160 batches: ..."
//   CANCELED / ERROR     same       "canceled by the user" / "error: ..."
//
// WAITING is never stored: a trial waits while it is ACTIVE, has trained,
// holds no allocation and the searcher has neither a length nor a close for
// it (WaitsForSearcher). So pause, activate, a master restart and fork treat
// it as the ACTIVE trial it is stored as.
#ifndef DET_MASTER_CORE_TRIAL_STATES_H_
#define DET_MASTER_CORE_TRIAL_STATES_H_

#include <string>

#include "det/api/v1/common.pb.h"
#include "det/trial/v1/trial.pb.h"
#include "master/core/core_state.h"

namespace det::master {

// Whether `trial` waits for the searcher without a slot (shown WAITING).
bool WaitsForSearcher(const TrialRuntime& trial);

// The state shown for `trial` (STATE_WAITING for a waiting trial, else its
// stored state).
::det::api::v1::State ShownState(const TrialRuntime& trial);

// Why a run of `trial` is being stopped by the master: STOPPED (the trial or
// its experiment canceled or killed), PAUSED (the trial or its experiment
// paused by the user), else PREEMPTED (the scheduler took its slots).
::det::trial::v1::ExitReason StopReason(const ExperimentRuntime& exp, const TrialRuntime& trial);

// Trial.state_reason. `pending`: the trial has a request in the queue;
// `slots`: slots per trial.
std::string StateReason(const ExperimentRuntime& exp, const TrialRuntime& trial, bool pending, int slots);

// The trial log line for a waiting trial's exit ("trial 3 waits for
// promotion at 40 batches: ...").
std::string WaitingLine(const ExperimentRuntime& exp, const TrialRuntime& trial);

// The trial log line for a run that ended with the trial `state_after`
// (after SettleTrialLocked), or "" when the run's end says nothing new
// (a failure, logged where it is handled).
std::string RunEndLine(const ExperimentRuntime& exp, const TrialRuntime& trial, const std::string& state_after,
                       ::det::trial::v1::ExitReason reason);

// The trial log line for a waiting trial the searcher closes without running
// it again ("trial 3 completed at 40 batches: the search ended ...").
std::string CompletedWhileWaitingLine(const TrialRuntime& trial);

}  // namespace det::master

#endif  // DET_MASTER_CORE_TRIAL_STATES_H_
