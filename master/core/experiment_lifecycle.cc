// MasterCore: archiving and deleting experiments. DeleteExperiment records
// DELETING and answers; DeletionStep (run by the background thread, or by
// RunBackgroundPass) then removes the experiment's checkpoint directories,
// its rows in bounded batches, its trial.so when no other experiment uses
// it, and last its row. Every step is idempotent, and DELETING is stored, so
// a restarted master (recovery.cc reloads DELETING experiments) resumes
// where it stopped.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/store/store_events.h"

namespace det::master {
namespace {

// Rows deleted per store transaction, and checkpoint directories removed
// per step: each step is short, so the master stays responsive.
constexpr int64_t kDeleteBatchRows = 2000;
constexpr size_t kDeleteBatchCheckpoints = 64;

}  // namespace

absl::Status MasterCore::CheckNotDeletingLocked(const ExperimentRuntime& exp) const {
  if (exp.row.state != kDeleting) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("experiment ", exp.row.id, " is being deleted"));
}

absl::Status MasterCore::SetArchivedLocked(int64_t experiment_id, bool archived) {
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(experiment_id));
  DET_RETURN_IF_ERROR(CheckNotDeletingLocked(*exp));
  if (exp->row.archived == archived) return absl::OkStatus();
  if (archived && !Terminal(exp->row.state)) {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", experiment_id, " is ", exp->row.state,
                                                      "; only a terminal experiment (COMPLETED, CANCELED or "
                                                      "ERROR) can be archived"));
  }
  exp->row.archived = archived;
  spdlog::info("experiment {} {}", experiment_id, archived ? "archived" : "unarchived");
  return store_->UpdateExperiment(exp->row);
}

absl::StatusOr<apiv1::ArchiveExperimentResponse> MasterCore::ArchiveExperiment(
    const apiv1::ArchiveExperimentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_RETURN_IF_ERROR(SetArchivedLocked(req.experiment_id(), true));
  return Committed(w, apiv1::ArchiveExperimentResponse());
}

absl::StatusOr<apiv1::UnarchiveExperimentResponse> MasterCore::UnarchiveExperiment(
    const apiv1::UnarchiveExperimentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_RETURN_IF_ERROR(SetArchivedLocked(req.experiment_id(), false));
  return Committed(w, apiv1::UnarchiveExperimentResponse());
}

absl::StatusOr<apiv1::DeleteExperimentResponse> MasterCore::DeleteExperiment(
    const apiv1::DeleteExperimentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  const int64_t id = req.experiment_id();
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  if (exp->row.state == kDeleting) return apiv1::DeleteExperimentResponse();
  bool running = !Terminal(exp->row.state);
  for (const auto& [r, tid] : exp->trial_by_request) running |= !trials_.at(tid)->allocation_id.empty();
  if (running) {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", id, " is ", exp->row.state,
                                                      "; only a terminal experiment (COMPLETED, CANCELED or "
                                                      "ERROR) with no running trial can be deleted"));
  }
  for (const auto& [other_id, other] : experiments_) {
    if (Terminal(other->row.state) || other->row.warm_start_checkpoint_uuid.empty()) continue;
    auto ck = store_->GetCheckpoint(other->row.warm_start_checkpoint_uuid);
    if (ck.ok() && ck->experiment_id == id) {
      return absl::FailedPreconditionError(absl::StrCat("experiment ", id, " holds checkpoint ", ck->uuid,
                                                        ", the warm-start source of experiment ", other_id,
                                                        ", which is not finished"));
    }
  }
  exp->gc_pending = false;
  // The background thread's next pass (within 500 ms) starts the deletion.
  SetExperimentState(*exp, kDeleting);
  return Committed(w, apiv1::DeleteExperimentResponse());
}

bool MasterCore::DeletionStep() {
  int64_t id = 0;
  std::string sha;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [eid, exp] : experiments_) {
      if (exp->row.state != kDeleting) continue;
      id = eid;
      sha = exp->row.trial_so_sha256;
      break;
    }
  }
  if (id == 0) return false;
  // 1. Checkpoint directories, a batch at a time, each before its row.
  auto checkpoints = store_->ListCheckpoints(id, std::nullopt);
  if (!checkpoints.ok()) {
    spdlog::error("deleting experiment {}: {}", id, checkpoints.status().ToString());
    return false;  // retried at the next pass
  }
  if (!checkpoints->empty()) {
    if (checkpoints->size() > kDeleteBatchCheckpoints) checkpoints->resize(kDeleteBatchCheckpoints);
    // A DELETED row's bytes were counted when GC or a user deleted it.
    DeleteCheckpointDirs(*checkpoints, CheckpointDeletion::kExperimentDelete, absl::StrCat("deleting experiment ", id));
    std::vector<std::string> uuids;
    for (const CheckpointRow& c : *checkpoints) uuids.push_back(c.uuid);
    absl::Status st = store_->DeleteCheckpointRows(uuids);
    if (!st.ok()) spdlog::error("deleting experiment {}: {}", id, st.ToString());
    return st.ok();
  }
  // 2. Metrics, logs, allocations, trials: bounded batches.
  auto deleted = store_->DeleteExperimentDataBatch(id, kDeleteBatchRows);
  if (!deleted.ok()) {
    spdlog::error("deleting experiment {}: {}", id, deleted.status().ToString());
    return false;
  }
  if (*deleted > 0) return true;
  // 3. The trial.so unless another experiment uses it, then the row; the
  // experiment is then gone (NOT_FOUND). Under the lock: a CreateExperiment
  // naming the same trial.so either is counted or finds it gone.
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  auto users = store_->CountExperimentsWithArtifact(sha, id);
  if (users.ok() && *users == 0 && !sha.empty()) {
    absl::Status st = artifacts_.Remove(sha);
    if (!st.ok()) spdlog::warn("deleting experiment {}: {}", id, st.ToString());
  }
  if (absl::Status st = store_->DeleteExperimentRow(id); !st.ok()) {
    spdlog::error("deleting experiment {}: {}", id, st.ToString());
    return false;
  }
  if (absl::Status st = w.Commit(); !st.ok()) return false;
  auto it = experiments_.find(id);
  if (it != experiments_.end()) {
    for (const auto& [r, tid] : it->second->trial_by_request) trials_.erase(tid);
    experiments_.erase(it);
  }
  DropPendingLocked(id);
  spdlog::info("experiment {} deleted", id);
  return true;  // another may be DELETING
}

}  // namespace det::master
