// MasterCore: PauseTrial / ActivateTrial, one trial of an ACTIVE experiment.
//
// A trial paused on its own is PAUSED while its experiment stays ACTIVE (so
// the experiment is not finished while it waits). RequestAllocation never
// schedules a PAUSED trial; a running one checkpoints at its next batch and
// exits (SettleTrialLocked keeps it PAUSED); ActivateTrial schedules it again
// and it resumes from that checkpoint. As in Determined, activating the whole
// experiment (after PauseExperiment) activates every PAUSED trial, those
// paused on their own included.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"

namespace det::master {

absl::StatusOr<apiv1::PauseTrialResponse> MasterCore::PauseTrial(const apiv1::PauseTrialRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  const int64_t id = req.trial_id();
  DET_ASSIGN_OR_RETURN(TrialRuntime * t, FindTrial(id));
  if (t->row.state == kPaused) return apiv1::PauseTrialResponse();
  if (Terminal(t->row.state) || Stopping(t->row.state) || t->killed) {
    return absl::FailedPreconditionError(
        absl::StrCat("trial ", id, " is ", t->row.state, "; only an ACTIVE trial can be paused"));
  }
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(t->row.experiment_id));
  if (exp->row.state != kActive) {
    return absl::FailedPreconditionError(absl::StrCat("trial ", id, "'s experiment ", exp->row.id, " is ",
                                                      exp->row.state, "; PauseTrial needs an ACTIVE experiment"));
  }
  const std::string prefix = absl::StrCat("trial-", id, ".");
  ErasePendingIf([&](const SchedRequest& r) { return r.allocation_id.rfind(prefix, 0) == 0; });
  SetTrialState(*t, kPaused);
  auto ait = allocations_.find(t->allocation_id);
  // It checkpoints at its next batch and exits; it stays PAUSED.
  if (ait != allocations_.end()) RequestStopLocked(*ait->second);
  TrialLogLocked(id, t->allocation_id, "[det-master] trial paused by the user");
  spdlog::info("trial {} paused", id);
  return Committed(w, apiv1::PauseTrialResponse());
}

absl::StatusOr<apiv1::ActivateTrialResponse> MasterCore::ActivateTrial(const apiv1::ActivateTrialRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  const int64_t id = req.trial_id();
  DET_ASSIGN_OR_RETURN(TrialRuntime * t, FindTrial(id));
  if (t->row.state == kActive) return apiv1::ActivateTrialResponse();
  if (t->row.state != kPaused) {
    return absl::FailedPreconditionError(
        absl::StrCat("trial ", id, " is ", t->row.state, "; only a PAUSED trial can be activated"));
  }
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(t->row.experiment_id));
  if (exp->row.state != kActive) {
    return absl::FailedPreconditionError(absl::StrCat("trial ", id, "'s experiment ", exp->row.id, " is ",
                                                      exp->row.state, "; activate the experiment instead"));
  }
  SetTrialState(*t, kActive);
  // Still stopping: SettleTrialLocked schedules it once its run has ended.
  if (t->allocation_id.empty()) {
    std::vector<SearcherOp> ops;
    if (!CompleteIfCheckpointedLocked(*exp, *t, &ops)) RequestAllocation(*exp, *t);
    DET_RETURN_IF_ERROR(ApplySearcherOps(*exp, std::move(ops)));
  }
  TrialLogLocked(id, t->allocation_id, "[det-master] trial activated by the user");
  spdlog::info("trial {} activated", id);
  return Committed(w, apiv1::ActivateTrialResponse());
}

}  // namespace det::master
