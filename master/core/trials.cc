// MasterCore: the det.api.v1 calls on trials, their metrics, logs and
// checkpoints.
#include <algorithm>

#include <spdlog/spdlog.h>
#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "common/config_redact.h"
#include "common/proto_json.h"
#include "common/status_macros.h"
#include "master/core/checkpoint_facts.h"
#include "master/core/checkpoint_list.h"
#include "master/core/metrics_logs.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"
#include "master/core/trial_states.h"

namespace det::master {

// Terminal trials, and every trial of an experiment this master did not
// load (its stored config or searcher no longer parses: recovery.cc), from
// the store; the other trials from memory, as shown (WAITING). Under mu_, so
// a trial that ends meanwhile is counted once.
std::map<std::string, int64_t> MasterCore::TrialCountsByShownState() {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, int64_t> counts;
  for (const auto& [id, trial] : trials_) {
    if (Terminal(trial->row.state) || experiments_.count(trial->row.experiment_id) == 0) continue;
    ++counts[WaitsForSearcher(*trial) ? "WAITING" : trial->row.state];
  }
  absl::Status st = store_->WithConnection([&](sqlite3* db) -> absl::Status {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT experiment_id, state, COUNT(*) FROM trials GROUP BY experiment_id, state", -1,
                           &stmt, nullptr) != SQLITE_OK) {
      return absl::InternalError(sqlite3_errmsg(db));
    }
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      const auto* state = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 1));
      if (state == nullptr) continue;
      if (Terminal(state) || experiments_.count(sqlite3_column_int64(stmt, 0)) == 0) {
        counts[state] += sqlite3_column_int64(stmt, 2);
      }
    }
    sqlite3_finalize(stmt);
    return absl::OkStatus();
  });
  (void)st;  // as det_experiments' count: a failed read shows no stored trials; the health check reports the store
  return counts;
}

apiv1::Trial MasterCore::TrialProto(const TrialRuntime& trial) {
  apiv1::Trial t;
  t.set_id(trial.row.id);
  t.set_experiment_id(trial.row.experiment_id);
  t.set_state(ShownState(trial));  // WAITING: ACTIVE without work or a slot (trial_states.h)
  // Readers see secret-looking hparams redacted (config_redact.h); the
  // trial itself gets them as written (GetTrialContext).
  auto hp = JsonToStruct(RedactConfigJson(nlohmann::json::parse(trial.row.hparams_json, nullptr, false)));
  if (hp.ok()) *t.mutable_hparams() = *hp;
  t.set_seed(trial.row.seed);
  t.set_restarts(static_cast<int32_t>(trial.row.restarts));
  t.set_total_batches_processed(trial.row.total_batches);
  t.set_latest_checkpoint_uuid(trial.row.latest_checkpoint_uuid);
  const TrialFacts facts = TrialFactsLocked(trial);
  t.set_best_checkpoint_uuid(facts.best_checkpoint_uuid);
  auto eit = experiments_.find(trial.row.experiment_id);
  // The stored validation report (its batches, epochs, every metric); the
  // searcher metric alone if the store could not be read.
  auto validation = [&](apiv1::MetricsReport* m, const std::optional<MetricRow>& row, double value) {
    if (row) {
      *m = MetricProto(*row);
      return;
    }
    m->set_trial_id(t.id());
    m->set_group("validation");
    if (eit != experiments_.end()) (*m->mutable_metrics())[eit->second->config.searcher.metric] = value;
  };
  if (trial.row.best_validation) {
    validation(t.mutable_best_validation(), facts.best_validation, *trial.row.best_validation);
  }
  if (trial.row.latest_validation) {
    validation(t.mutable_latest_validation(), facts.latest_validation, *trial.row.latest_validation);
  }
  SetTime(t.mutable_start_time(), trial.row.created_ms);
  if (trial.row.ended_ms > 0) SetTime(t.mutable_end_time(), trial.row.ended_ms);
  t.set_allocation_id(trial.allocation_id);
  t.set_runner_state(trial.allocation_id.empty() ? apiv1::ALLOCATION_STATE_UNSPECIFIED
                                                 : apiv1::ALLOCATION_STATE_RUNNING);
  t.set_request_id(trial.row.request_id);
  t.set_searcher_target_batches(trial.target_batches);
  t.set_error_message(trial.error_message);
  if (!Terminal(trial.row.state)) t.set_preemption(trial.preemption);
  t.set_parent_trial_id(trial.row.parent_trial_id);
  t.set_parent_checkpoint_uuid(trial.row.parent_checkpoint_uuid);
  if (eit != experiments_.end()) {
    const int slots = static_cast<int>(eit->second->config.resources.slots_per_trial);
    t.set_state_reason(StateReason(*eit->second, trial, pending_trials_.count(trial.row.id) != 0, slots));
  }
  return t;
}

void MasterCore::CompleteCheckpointRowsLocked(std::vector<CheckpointRow>* rows) {
  for (CheckpointRow& r : *rows) CompleteCheckpointRowLocked(&r);
}

void MasterCore::CompleteCheckpointRowLocked(CheckpointRow* row) {
  auto eit = experiments_.find(row->experiment_id);
  if (eit == experiments_.end()) return;
  auto tit = trials_.find(row->trial_id);
  CompleteCheckpointRow(eit->second->config.searcher.metric,
                        tit == trials_.end() ? BatchLengths() : tit->second->lengths, row);
}

TrialFacts MasterCore::TrialFactsLocked(const TrialRuntime& trial) {
  if (trial.facts) return *trial.facts;
  TrialFacts f;
  auto eit = experiments_.find(trial.row.experiment_id);
  if (eit == experiments_.end()) return f;
  const SearcherConfig& searcher = eit->second->config.searcher;
  auto rows = store_->ListCheckpoints(std::nullopt, trial.row.id);
  auto validations = store_->ListMetrics(trial.row.id, "validation", /*include_archived=*/true);
  if (!rows.ok() || !validations.ok()) {
    spdlog::warn("trial {}: reading its checkpoints and validations: {}", trial.row.id,
                 (rows.ok() ? validations.status() : rows.status()).ToString());
    return f;
  }
  CompleteCheckpointRowsLocked(&*rows);
  if (const CheckpointRow* best = BestCheckpoint(*rows, searcher.smaller_is_better)) {
    f.best_checkpoint_uuid = best->uuid;
    f.best_checkpoint_metric = best->searcher_metric;
  }
  for (const CheckpointRow& r : *rows) {
    if (r.uuid == trial.row.latest_checkpoint_uuid) f.latest_checkpoint_ms = r.time_ms;
  }
  if (const MetricRow* best = BestValidation(*validations, searcher.metric, searcher.smaller_is_better)) {
    f.best_validation = *best;
  }
  for (const MetricRow& v : *validations) {
    if (!v.archived) f.latest_validation = v;  // ordered by total_batches, then id
  }
  trial.facts = f;
  return f;
}

absl::StatusOr<apiv1::GetTrialResponse> MasterCore::GetTrial(const apiv1::GetTrialRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(TrialRuntime * t, FindTrial(req.trial_id()));
  apiv1::GetTrialResponse resp;
  *resp.mutable_trial() = TrialProto(*t);
  return resp;
}

absl::StatusOr<apiv1::KillTrialResponse> MasterCore::KillTrial(const apiv1::KillTrialRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  const int64_t id = req.trial_id();
  DET_ASSIGN_OR_RETURN(TrialRuntime * t, FindTrial(id));
  if (Terminal(t->row.state)) return apiv1::KillTrialResponse();
  t->killed = true;
  auto ait = allocations_.find(t->allocation_id);
  if (ait != allocations_.end()) {
    SetTrialState(*t, t->row.state);
    KillAllocationLocked(*ait->second, "trial killed");
    return Committed(w, apiv1::KillTrialResponse());
  }
  const std::string prefix = absl::StrCat("trial-", id, ".");
  ErasePendingIf([&](const SchedRequest& r) { return r.allocation_id.rfind(prefix, 0) == 0; });
  SetTrialState(*t, kCanceled);
  auto& exp = *experiments_[t->row.experiment_id];
  DET_RETURN_IF_ERROR(
      ApplySearcherOps(exp, exp.searcher->TrialExitedEarly(t->row.request_id, ExitedReason::kUserCanceled)));
  return Committed(w, apiv1::KillTrialResponse());
}

absl::StatusOr<std::vector<apiv1::Checkpoint>> MasterCore::ListCheckpoints(std::optional<int64_t> experiment_id,
                                                                           std::optional<int64_t> trial_id) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (experiment_id) DET_RETURN_IF_ERROR(FindExperiment(*experiment_id).status());
    if (trial_id) DET_RETURN_IF_ERROR(FindTrial(*trial_id).status());
  }
  DET_ASSIGN_OR_RETURN(std::vector<CheckpointRow> rows, store_->ListCheckpoints(experiment_id, trial_id));
  {
    std::lock_guard<std::mutex> l(mu_);
    CompleteCheckpointRowsLocked(&rows);
  }
  std::vector<apiv1::Checkpoint> out;
  for (const auto& r : rows) out.push_back(CheckpointProto(r));
  return out;
}

absl::StatusOr<apiv1::GetTrialCheckpointsResponse> MasterCore::GetTrialCheckpoints(
    const apiv1::GetTrialCheckpointsRequest& req) {
  DET_ASSIGN_OR_RETURN(std::vector<apiv1::Checkpoint> checkpoints, ListCheckpoints(std::nullopt, req.trial_id()));
  bool smaller_is_better = true;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto trial = FindTrial(req.trial_id());
    if (trial.ok()) {
      auto exp = FindExperiment((*trial)->row.experiment_id);
      if (exp.ok()) smaller_is_better = (*exp)->config.searcher.smaller_is_better;
    }
  }
  apiv1::GetTrialCheckpointsResponse resp;
  DET_RETURN_IF_ERROR(SortFilterPageCheckpoints(CheckpointListQueryOf(req, smaller_is_better), &checkpoints,
                                                resp.mutable_pagination()));
  for (auto& c : checkpoints) *resp.add_checkpoints() = std::move(c);
  return resp;
}

absl::StatusOr<apiv1::GetCheckpointResponse> MasterCore::GetCheckpoint(const apiv1::GetCheckpointRequest& req) {
  DET_ASSIGN_OR_RETURN(CheckpointRow row, store_->GetCheckpoint(req.checkpoint_uuid()));
  {
    std::lock_guard<std::mutex> l(mu_);
    CompleteCheckpointRowLocked(&row);
  }
  apiv1::GetCheckpointResponse resp;
  *resp.mutable_checkpoint() = CheckpointProto(row);
  return resp;
}

}  // namespace det::master
