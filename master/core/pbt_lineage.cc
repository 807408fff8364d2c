// MasterCore: PBT lineage (searcher pbt, master/search/pbt.h). A child trial
// starts from its parent's checkpoint written at the end of the round (the
// parent checkpoints after each validation, see trial_calls.cc), with the
// whole training state; the child waits without an allocation until that
// checkpoint exists. Parent and checkpoint are stored on the trial
// (trials.parent_trial_id / parent_checkpoint_uuid).
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"

namespace det::master {

int64_t MasterCore::PbtParentTrialIdLocked(const ExperimentRuntime& exp, int64_t parent_request) const {
  auto it = exp.trial_by_request.find(parent_request);
  return it == exp.trial_by_request.end() ? 0 : it->second;  // unknown: starts from scratch
}

bool MasterCore::AwaitsParentCheckpointLocked(const TrialRuntime& trial) const {
  return trial.row.parent_trial_id != 0 && trial.row.parent_checkpoint_uuid.empty() &&
         trial.row.latest_checkpoint_uuid.empty() && !trial.pbt_parent_gone;
}

void MasterCore::ResolvePbtChildrenLocked(ExperimentRuntime& exp) {
  if (exp.config.searcher.name != SearcherName::kPbt) return;
  for (const auto& [request, tid] : exp.trial_by_request) {
    TrialRuntime& child = *trials_.at(tid);
    if (!AwaitsParentCheckpointLocked(child) || Terminal(child.row.state)) continue;
    auto pit = trials_.find(child.row.parent_trial_id);
    if (pit == trials_.end()) {
      child.pbt_parent_gone = true;
    } else {
      const TrialRuntime& parent = *pit->second;
      auto ck = parent.row.latest_checkpoint_uuid.empty() ? absl::StatusOr<CheckpointRow>(absl::NotFoundError(""))
                                                           : store_->GetCheckpoint(parent.row.latest_checkpoint_uuid);
      const bool ready = ck.ok() && ck->state == "COMPLETED" && ck->total_batches >= parent.last_validation;
      if (ready) {
        child.row.parent_checkpoint_uuid = ck->uuid;
        child.row.latest_checkpoint_uuid = ck->uuid;
        child.row.total_batches = ck->total_batches;
        child.last_checkpoint = ck->total_batches;
        child.last_validation = ck->total_batches;
        TrialLogLocked(child.row.id, "",
                       absl::StrCat("[det-master] pbt: trial ", child.row.id, " starts from checkpoint ", ck->uuid,
                                    " of trial ", parent.row.id, " at batch ", ck->total_batches));
      } else if (Terminal(parent.row.state) && parent.allocation_id.empty()) {
        child.pbt_parent_gone = true;  // it will write no checkpoint any more
      } else {
        continue;
      }
    }
    if (child.pbt_parent_gone) {
      TrialLogLocked(child.row.id, "",
                     absl::StrCat("[det-master] pbt: parent trial ", child.row.parent_trial_id,
                                  " ended without a checkpoint for this trial; it starts from scratch"));
    }
    SetTrialState(child, child.row.state);
    if (exp.row.state == kActive) RequestAllocation(exp, child);
  }
}

}  // namespace det::master
