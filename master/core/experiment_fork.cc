// MasterCore: forks (CreateExperiment.parent_id), warm starts
// (searcher.source_checkpoint_uuid / source_trial_id) and ContinueExperiment.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/safe_path.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/trial_lengths.h"

namespace det::master {

namespace {

// The largest max_length ContinueExperiment accepts (batches).
constexpr int64_t kMaxContinueBatches = int64_t{1} << 40;

}  // namespace

absl::Status MasterCore::ResolveForkLocked(const apiv1::CreateExperimentRequest& req, const ExperimentConfig& config,
                                           ExperimentRow* row) {
  if (req.parent_id() < 0) return absl::InvalidArgumentError("parent_id: must be >= 0");
  if (req.parent_id() > 0) {
    // Reads are open to every authenticated user: an existing parent is
    // readable by the caller.
    DET_RETURN_IF_ERROR(FindExperiment(req.parent_id()).status());
    row->parent_id = req.parent_id();
  }
  const auto& s = config.searcher;
  if (s.source_checkpoint_uuid && s.source_trial_id) {
    return absl::InvalidArgumentError(
        "searcher.source_checkpoint_uuid: set either it or searcher.source_trial_id, not both");
  }
  std::string uuid;
  const char* field = "searcher.source_checkpoint_uuid";
  if (s.source_checkpoint_uuid) {
    uuid = *s.source_checkpoint_uuid;
    DET_RETURN_IF_ERROR(ValidateUuid(uuid, field));
  } else if (s.source_trial_id) {
    field = "searcher.source_trial_id";
    auto trial = FindTrial(*s.source_trial_id);
    if (!trial.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", trial.status().message()));
    uuid = (*trial)->row.latest_checkpoint_uuid;
    if (uuid.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": trial ", *s.source_trial_id, " has no checkpoint"));
    }
  } else {
    return absl::OkStatus();
  }
  auto ck = store_->GetCheckpoint(uuid);
  if (!ck.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": checkpoint ", uuid, " not found"));
  if (ck->state != "COMPLETED") {
    return absl::InvalidArgumentError(absl::StrCat(field, ": checkpoint ", uuid, " is ", ck->state,
                                                   "; only a COMPLETED checkpoint can be a warm-start source"));
  }
  // The source experiment must still exist (and so be readable).
  if (!experiments_.count(ck->experiment_id)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": checkpoint ", uuid, "'s experiment is gone"));
  }
  row->warm_start_checkpoint_uuid = uuid;
  return absl::OkStatus();
}

void MasterCore::FillWarmStartLocked(const ExperimentRuntime& exp, const TrialRuntime& trial,
                                     trialv1::GetTrialContextResponse* resp) {
  // Never for a trial that has a checkpoint of its own: it resumes from that.
  if (exp.row.warm_start_checkpoint_uuid.empty() || !trial.row.latest_checkpoint_uuid.empty()) return;
  auto ck = store_->GetCheckpoint(exp.row.warm_start_checkpoint_uuid);
  if (!ck.ok() || ck->state != "COMPLETED") {
    TrialLogLocked(trial.row.id, trial.allocation_id,
                   absl::StrCat("[det-master] warm-start checkpoint ", exp.row.warm_start_checkpoint_uuid,
                                " is no longer available; the trial starts from scratch"));
    return;
  }
  auto* c = resp->mutable_warm_start_checkpoint();
  c->set_uuid(ck->uuid);
  c->set_storage_path(ck->storage_path);
  c->set_total_batches(ck->total_batches);
}

int64_t MasterCore::WarmStartUserLocked(const std::string& uuid) const {
  for (const auto& [id, exp] : experiments_) {
    if (exp->row.warm_start_checkpoint_uuid == uuid && !Terminal(exp->row.state)) return id;
  }
  return 0;
}

absl::StatusOr<apiv1::ContinueExperimentResponse> MasterCore::ContinueExperiment(
    const apiv1::ContinueExperimentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  const int64_t id = req.experiment_id();
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  if (!Terminal(exp->row.state)) {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", id, " is ", exp->row.state,
                                                      "; only a COMPLETED, CANCELED or ERROR experiment can be "
                                                      "continued"));
  }
  int64_t target = 0;
  if (req.has_max_length()) {
    target = req.max_length();
  } else if (exp->config.searcher.name == SearcherName::kSingle) {
    target = 2 * exp->searcher_length.max;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("max_length: required to continue a '",
                                                   std::string(SearcherNameToString(exp->config.searcher.name)),
                                                   "' experiment"));
  }
  if (target <= 0 || target > kMaxContinueBatches) {
    return absl::InvalidArgumentError(absl::StrCat("max_length: must be in [1, ", kMaxContinueBatches, "], got ", target));
  }
  std::vector<TrialRuntime*> continued;
  for (const auto& [r, tid] : exp->trial_by_request) {
    TrialRuntime& t = *trials_.at(tid);
    if (t.row.latest_checkpoint_uuid.empty() || !t.allocation_id.empty()) continue;
    auto ck = store_->GetCheckpoint(t.row.latest_checkpoint_uuid);
    if (!ck.ok() || ck->state != "COMPLETED") continue;  // garbage-collected: nothing to restore
    // The target is in the searcher's unit; each trial converts it.
    TrialRuntime probe = TrialRuntime();
    probe.row = t.row;
    probe.lengths = t.lengths;
    probe.time_metric_value = t.time_metric_value;
    DET_RETURN_IF_ERROR(SetSearcherTarget(*exp, probe, target));
    if (SearcherTargetReached(*exp, probe, t.row.total_batches)) {
      return absl::InvalidArgumentError(
          absl::StrCat("max_length: ", FormatSearcherLength(exp->searcher_length, target),
                       " is not more than trial ", t.row.id, " has trained (", t.row.total_batches, " batches)"));
    }
    continued.push_back(&t);
  }
  if (continued.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", id, " has no trial with a checkpoint to continue"));
  }
  exp->row.ended_ms = 0;
  SetExperimentState(*exp, kActive);
  apiv1::ContinueExperimentResponse resp;
  for (TrialRuntime* t : continued) {
    // Trains from its latest checkpoint to `target`, validates, checkpoints
    // and completes; the searcher (whose trials have all ended) is not asked.
    DET_RETURN_IF_ERROR(SetSearcherTarget(*exp, *t, target));
    t->close_requested = true;
    t->exit_completed = false;
    t->killed = false;
    t->invalid_hp = false;
    t->error_message.clear();
    t->current_op.reset();
    t->row.ended_ms = 0;
    SetTrialState(*t, kActive);
    RequestAllocation(*exp, *t);
    TrialLogLocked(t->row.id, "", absl::StrCat("[det-master] experiment continued: trial ", t->row.id,
                                               " trains on from its latest checkpoint to ", target, " batches"));
    resp.add_trial_ids(t->row.id);
  }
  spdlog::info("experiment {} continued to {} batches ({} trial(s))", id, target, continued.size());
  ScheduleLocked();
  *resp.mutable_experiment() = ExperimentProto(*exp);
  return Committed(w, resp);
}

}  // namespace det::master
