// MasterCore: the det.trial.v1 calls trial processes make (context, the
// operations to run, metrics, checkpoints, preemption, logs). Each call names
// its allocation and carries that allocation's token (Authorize).
#include <algorithm>
#include <cmath>
#include <map>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/hparams.h"
#include "common/proto_json.h"
#include "common/s3/s3_checkpoint.h"
#include "common/safe_path.h"
#include "common/validation_policy.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "master/core/checkpoint_facts.h"
#include "master/core/checkpoint_files.h"
#include "master/core/checkpoint_files_s3.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"
#include "master/core/trial_lengths.h"
#include "master/core/trial_states.h"

namespace det::master {

absl::StatusOr<trialv1::GetTrialContextResponse> MasterCore::GetTrialContext(const trialv1::GetTrialContextRequest& req,
                                                                              const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  const int world = std::max(alloc->rendezvous.world_size(), 1);
  if (req.rank() < 0 || (alloc->rendezvous.world_size() > 0 && req.rank() >= world)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", req.rank(), " is outside [0, ", world, ") of allocation '", alloc->id, "'"));
  }
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  trialv1::GetTrialContextResponse resp;
  resp.set_trial_id(trial.row.id);
  resp.set_experiment_id(exp.row.id);
  resp.set_task_id(absl::StrCat("trial-", trial.row.id));
  nlohmann::json hp = nlohmann::json::parse(trial.row.hparams_json, nullptr, false);
  DET_ASSIGN_OR_RETURN(*resp.mutable_hparams(), JsonToStruct(hp));
  resp.set_trial_seed(trial.row.seed);
  resp.set_config_yaml(exp.row.config_yaml);
  auto gbs = GlobalBatchSize(hp);
  resp.set_global_batch_size(gbs.ok() ? *gbs : 0);  // 0: the hparams have none
  resp.set_trial_run_id(trial.row.run_id);
  resp.set_checkpoint_storage_path(exp.checkpoint_dir);
  resp.set_scheduling_unit(exp.config.scheduling_unit);
  resp.set_trial_so_sha256(exp.row.trial_so_sha256);
  *resp.mutable_rendezvous() = alloc->rendezvous;
  int64_t restored_batches = 0;
  if (!trial.row.latest_checkpoint_uuid.empty()) {
    auto ck = store_->GetCheckpoint(trial.row.latest_checkpoint_uuid);
    if (ck.ok()) {
      auto* c = resp.mutable_latest_checkpoint();
      c->set_uuid(ck->uuid);
      c->set_storage_path(ck->storage_path);
      c->set_total_batches(ck->total_batches);
      restored_batches = ck->total_batches;
    }
  }
  FillWarmStartLocked(exp, trial, &resp);
  resp.set_keep_optimizer_options(!trial.row.parent_checkpoint_uuid.empty() &&
                                  trial.row.latest_checkpoint_uuid == trial.row.parent_checkpoint_uuid);
  if (req.rank() == 0 && trial.row.run_id > 1) RewindTrialLocked(trial, restored_batches);
  return Committed(w, resp);
}

void MasterCore::RewindTrialLocked(TrialRuntime& trial, int64_t restored_batches) {
  // A restart continues from the checkpoint: what the earlier run reported
  // after it is archived, and the sequencer rewinds to it.
  ForgetTrialFactsLocked(trial);  // its latest validation may be archived
  absl::Status st = store_->ArchiveMetricsAfter(trial.row.id, restored_batches);
  if (!st.ok()) spdlog::error("trial {}: archiving metrics: {}", trial.row.id, st.ToString());
  trial.row.total_batches = restored_batches;
  // The last validation the restored run has behind it, so that the next
  // ones fall where an uninterrupted run's do.
  if (trial.last_validation > restored_batches) {
    trial.last_validation = 0;
    auto validations = store_->ListMetrics(trial.row.id, "validation", /*include_archived=*/false);
    if (validations.ok() && !validations->empty()) trial.last_validation = validations->back().total_batches;
  }
  trial.last_checkpoint = restored_batches;
  // The restored run reports its time metric's value again.
  trial.time_metric_value.reset();
  trial.current_op.reset();
  SetTrialState(trial, trial.row.state);
}

trialv1::Operation MasterCore::NextOperation(ExperimentRuntime& exp, TrialRuntime& trial, AllocationRuntime& alloc,
                                             int64_t batches) {
  auto make = [&](trialv1::OperationKind kind, int64_t target = 0) {
    trialv1::Operation op;
    op.set_op_id(trial.next_op_id++);
    op.set_kind(kind);
    op.set_target_total_batches(target);
    op.set_preempting(alloc.preempt);
    return op;
  };
  if (alloc.preempt || exp.row.state != kActive) {
    if (trial.last_checkpoint != batches && batches > 0) return make(trialv1::OPERATION_KIND_CHECKPOINT);
    auto op = make(trialv1::OPERATION_KIND_EXIT);
    op.set_exit_reason(StopReason(exp, trial));  // canceled, paused by the user, or preempted
    RequestStopLocked(alloc);
    return op;
  }
  // checkpoint_policy: the validation just reported asked for one.
  if (trial.policy_checkpoint_at == batches && batches > 0 && trial.last_checkpoint != batches) {
    return make(trialv1::OPERATION_KIND_CHECKPOINT);
  }
  if (trial.searcher_target > 0) {
    if (InitialValidationDue(exp.config, batches, trial.row.latest_validation.has_value())) {
      return make(trialv1::OPERATION_KIND_VALIDATE);
    }
    if (!SearcherTargetReached(exp, trial, batches)) {
      // This trial's periods, in its own batches.
      const int64_t validation_period = trial.lengths.validation_period;
      const int64_t checkpoint_period = trial.lengths.checkpoint_period;
      bool val_due = validation_period > 0 && batches - trial.last_validation >= validation_period &&
                     trial.last_validation != batches;
      bool ckpt_due = checkpoint_period > 0 && batches - trial.last_checkpoint >= checkpoint_period &&
                      trial.last_checkpoint != batches;
      if (val_due) return make(trialv1::OPERATION_KIND_VALIDATE);
      if (ckpt_due) return make(trialv1::OPERATION_KIND_CHECKPOINT);
      // A training metric (e.g. tokens) has no batch target: the periods cap
      // the op (0: no cap) and the runtime stops on the metric.
      const bool by_metric = exp.searcher_length.is_metric();
      const int64_t full = by_metric ? 0 : trial.target_batches;
      auto cap = [](int64_t target, int64_t limit) { return target == 0 ? limit : std::min(target, limit); };
      int64_t target = full;
      if (validation_period > 0) target = cap(target, trial.last_validation + validation_period);
      if (checkpoint_period > 0) target = cap(target, trial.last_checkpoint + checkpoint_period);
      if (target <= batches) target = full;
      trialv1::Operation op = make(trialv1::OPERATION_KIND_TRAIN, target);
      if (by_metric) {
        op.set_time_metric(exp.searcher_length.unit);
        op.set_time_metric_target(static_cast<double>(trial.searcher_target));
      }
      return op;
    }
    // At the searcher's length: validate (the searcher op completes when the
    // metric arrives).
    return make(trialv1::OPERATION_KIND_VALIDATE);
  }
  if (trial.close_requested) {
    if (trial.last_checkpoint != batches) return make(trialv1::OPERATION_KIND_CHECKPOINT);
    auto op = make(trialv1::OPERATION_KIND_EXIT);
    op.set_exit_reason(trialv1::EXIT_REASON_COMPLETED);
    trial.exit_completed = true;
    if (alloc.stop_requested_mono_ms == 0) alloc.stop_requested_mono_ms = MonoMs();
    return op;
  }
  // The searcher has nothing for this trial now (e.g. ASHA: not promoted
  // yet): checkpoint and give the slot back; a later ValidateAfter resumes it.
  if (batches > 0 && trial.last_checkpoint != batches) return make(trialv1::OPERATION_KIND_CHECKPOINT);
  if (batches > 0) {
    auto op = make(trialv1::OPERATION_KIND_EXIT);
    op.set_exit_reason(trialv1::EXIT_REASON_WAITING);  // shown WAITING once its run ends (trial_states.h)
    RequestStopLocked(alloc);
    return op;
  }
  return make(trialv1::OPERATION_KIND_WAIT);
}

absl::StatusOr<trialv1::GetNextOperationResponse> MasterCore::GetNextOperation(
    const trialv1::GetNextOperationRequest& req, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  if (req.total_batches() > trial.row.total_batches || trial.row.total_batches == 0) {
    trial.row.total_batches = req.total_batches();
  }
  // Untrusted: a non-finite value is ignored (it only steers this trial).
  if (req.has_time_metric_value() && std::isfinite(req.time_metric_value())) {
    trial.time_metric_value = req.time_metric_value();
  }
  trialv1::GetNextOperationResponse resp;
  if (trial.current_op && trial.current_op->op_id() != req.completed_op_id() &&
      trial.current_op->kind() != trialv1::OPERATION_KIND_WAIT) {
    // A retry of the same question: the same answer.
    *resp.mutable_operation() = *trial.current_op;
    return resp;
  }
  trial.current_op = NextOperation(exp, trial, *alloc, req.total_batches());
  // Persists the op counter and exit_completed with the batches trained.
  SetTrialState(trial, trial.row.state);
  *resp.mutable_operation() = *trial.current_op;
  return Committed(w, resp);
}

namespace {

// `id`'s runtime, or NOT_FOUND naming it (an experiment deleted, or a trial
// gone, while a run of it still reports).
template <typename T>
absl::StatusOr<T*> FindRuntime(const std::map<int64_t, std::unique_ptr<T>>& m, int64_t id, const char* what) {
  auto it = m.find(id);
  if (it == m.end()) return absl::NotFoundError(absl::StrCat(what, " ", id, " not found (deleted while it ran?)"));
  return it->second.get();
}

// Why `alloc` is being stopped (StopReason), or NOT_FOUND when its
// experiment or trial is gone.
absl::StatusOr<trialv1::ExitReason> PreemptReason(const std::map<int64_t, std::unique_ptr<ExperimentRuntime>>& exps,
                                                  const std::map<int64_t, std::unique_ptr<TrialRuntime>>& trials,
                                                  const AllocationRuntime& alloc) {
  DET_ASSIGN_OR_RETURN(const ExperimentRuntime* exp, FindRuntime(exps, alloc.experiment_id, "experiment"));
  DET_ASSIGN_OR_RETURN(const TrialRuntime* trial, FindRuntime(trials, alloc.trial_id, "trial"));
  return StopReason(*exp, *trial);
}

MetricRow ToMetricRow(const trialv1::MetricsRow& r, int64_t trial_id, int64_t run_id, const char* group,
                      int64_t now_ms) {
  MetricRow m;
  m.trial_id = trial_id;
  m.trial_run_id = run_id;
  m.group = group;
  m.total_batches = r.total_batches();
  m.total_epochs = r.total_epochs();
  m.metrics.insert(r.metrics().begin(), r.metrics().end());
  m.time_ms = r.has_end_time() ? TimeMs(r.end_time()) : now_ms;
  return m;
}

}  // namespace

absl::StatusOr<std::vector<MetricRow>> MasterCore::TrainingRows(const trialv1::ReportTrainingMetricsRequest& req,
                                                               const std::string& token) {
  int64_t trial_id, run_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
    TrialRuntime& trial = *trials_.at(alloc->trial_id);
    trial_id = trial.row.id;
    run_id = trial.row.run_id;
    for (const auto& r : req.rows()) trial.row.total_batches = std::max(trial.row.total_batches, r.total_batches());
    if (req.rows_size() > 0) alloc->made_progress = true;
  }
  std::vector<MetricRow> rows;
  rows.reserve(req.rows_size());
  const int64_t now_ms = WallMs();
  for (const auto& r : req.rows()) rows.push_back(ToMetricRow(r, trial_id, run_id, "training", now_ms));
  return rows;
}

absl::StatusOr<trialv1::ReportTrainingMetricsResponse> MasterCore::ReportTrainingMetrics(
    const trialv1::ReportTrainingMetricsRequest& req, const std::string& token) {
  DET_ASSIGN_OR_RETURN(std::vector<MetricRow> rows, TrainingRows(req, token));
  DET_RETURN_IF_ERROR(store_->InsertMetricsGrouped(rows));
  return trialv1::ReportTrainingMetricsResponse();
}

void MasterCore::ReportTrainingMetricsAsync(const trialv1::ReportTrainingMetricsRequest& req,
                                            const std::string& token, std::function<void(absl::Status)> done) {
  absl::StatusOr<std::vector<MetricRow>> rows = TrainingRows(req, token);
  if (!rows.ok()) {
    done(rows.status());
    return;
  }
  store_->InsertMetricsAsync(*std::move(rows), std::move(done));
}

absl::StatusOr<trialv1::ReportValidationMetricsResponse> MasterCore::ReportValidationMetrics(
    const trialv1::ReportValidationMetricsRequest& req, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  // The experiment's best before these rows, for checkpoint_policy best.
  const bool smaller = exp.config.searcher.smaller_is_better;
  std::optional<double> experiment_best;
  for (const auto& [request, tid] : exp.trial_by_request) {
    const std::optional<double>& v = trials_.at(tid)->row.best_validation;
    if (v && IsBetterMetric(smaller, *v, experiment_best)) experiment_best = v;
  }
  std::vector<MetricRow> rows;
  for (const auto& r : req.rows()) {
    rows.push_back(ToMetricRow(r, trial.row.id, trial.row.run_id, "validation", WallMs()));
    auto it = r.metrics().find(exp.config.searcher.metric);
    std::optional<double> metric;
    if (it != r.metrics().end()) metric = it->second;
    if (CheckpointAfterValidation(exp.config, metric, experiment_best)) trial.policy_checkpoint_at = r.total_batches();
    // pbt: a child may start from this trial's state at this validation.
    if (exp.config.searcher.name == SearcherName::kPbt) trial.policy_checkpoint_at = r.total_batches();
    if (metric && IsBetterMetric(smaller, *metric, experiment_best)) experiment_best = metric;
    if (it != r.metrics().end()) {
      double v = it->second;
      trial.row.latest_validation = v;
      if (!trial.row.best_validation ||
          (exp.config.searcher.smaller_is_better ? v < *trial.row.best_validation : v > *trial.row.best_validation)) {
        trial.row.best_validation = v;
      }
    }
    trial.last_validation = r.total_batches();
    trial.row.total_batches = std::max(trial.row.total_batches, r.total_batches());
    alloc->made_progress = true;
  }
  DET_RETURN_IF_ERROR(store_->InsertMetrics(rows));
  // A checkpoint taken at these batches before its validation was reported
  // gets its searcher metric now (best checkpoint, GC's save_*_best).
  for (const MetricRow& r : rows) {
    auto it = r.metrics.find(exp.config.searcher.metric);
    if (it == r.metrics.end() || std::isnan(it->second)) continue;
    DET_RETURN_IF_ERROR(
        store_->SetCheckpointSearcherMetric(trial.row.id, r.trial_run_id, r.total_batches, it->second));
  }
  ForgetTrialFactsLocked(trial);
  SetTrialState(trial, trial.row.state);
  return Committed(w, trialv1::ReportValidationMetricsResponse());
}

absl::StatusOr<std::optional<int64_t>> MasterCore::MeasureCheckpointMetadata(
    const trialv1::ReportCheckpointRequest& req, const std::string& token) {
  std::optional<int64_t> metadata_size;
  if (!ValidateUuid(req.uuid(), "uuid").ok()) return metadata_size;  // ReportCheckpoint says why
  std::string storage_path;
  std::optional<ResolvedS3Storage> s3_storage;
  std::string s3_dir;
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
    DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindRuntime(experiments_, alloc->experiment_id, "experiment"));
    if (s3::IsS3Url(exp->checkpoint_dir)) {
      // A retried report of a recorded checkpoint is not checked again.
      if (store_->GetCheckpoint(req.uuid()).ok()) return metadata_size;
      DET_ASSIGN_OR_RETURN(s3_storage, ExperimentS3StorageLocked(exp->row.id));
      s3_dir = exp->checkpoint_dir;
    } else if (req.resources().count(kCheckpointMetadataFile) == 0) {
      auto path = JoinUnder(exp->checkpoint_dir, req.uuid(), "uuid");
      if (path.ok()) storage_path = *path;
    }
  }
  if (s3_storage) {
    // Outside the lock: S3 I/O. Where the trial uploaded it (the
    // checkpoint_storage_path it was given), read with the profile's keys.
    DET_ASSIGN_OR_RETURN(s3::S3Location storage, s3::ParseS3Url(s3_dir));
    DET_ASSIGN_OR_RETURN(s3::S3Location checkpoint, s3::CheckpointLocation(storage, req.uuid()));
    DET_ASSIGN_OR_RETURN(std::unique_ptr<s3::S3Client> client, NewS3Client(*s3_storage));
    const std::map<std::string, int64_t> resources(req.resources().begin(), req.resources().end());
    return VerifyS3CheckpointReport(*client, checkpoint, resources, req.uuid());
  }
  if (!storage_path.empty()) {
    absl::StatusOr<int64_t> size = CheckpointMetadataSize(checkpoint_roots_, storage_path, req.uuid());
    if (size.ok()) metadata_size = *size;
  }
  return metadata_size;
}

absl::StatusOr<CheckpointRow> MasterCore::CheckpointRowLocked(const ExperimentRuntime& exp, const TrialRuntime& trial,
                                                             const trialv1::ReportCheckpointRequest& req,
                                                             std::optional<int64_t> metadata_size) {
  CheckpointRow row;
  row.uuid = req.uuid();
  row.trial_id = trial.row.id;
  row.experiment_id = exp.row.id;
  row.trial_run_id = trial.row.run_id;
  row.state = "COMPLETED";
  row.total_batches = req.total_batches();
  // Epochs from the config's epoch length (records_per_epoch) when there is
  // one; else what the runtime said (0: unknown).
  row.total_epochs = trial.lengths.batches_per_epoch > 0
                         ? EpochsAt(req.total_batches(), trial.lengths.batches_per_epoch)
                         : std::max(0.0, req.total_epochs());
  for (const auto& [path, size] : req.resources()) {
    if (size < 0) {
      return absl::InvalidArgumentError(absl::StrCat("resources: file '", path.substr(0, 256), "' has size ", size,
                                                     "; sizes are bytes, >= 0"));
    }
  }
  row.resources.insert(req.resources().begin(), req.resources().end());
  if (metadata_size) row.resources[kCheckpointMetadataFile] = *metadata_size;
  row.metadata_json = StructToJson(req.metadata()).dump();
  if (s3::IsS3Url(exp.checkpoint_dir)) {  // s3://B/P/<uuid>, where the trial uploaded it
    DET_ASSIGN_OR_RETURN(s3::S3Location storage, s3::ParseS3Url(exp.checkpoint_dir));
    DET_ASSIGN_OR_RETURN(s3::S3Location checkpoint, s3::CheckpointLocation(storage, req.uuid()));
    row.storage_path = s3::FormatS3Url(checkpoint);
  } else {
    DET_ASSIGN_OR_RETURN(row.storage_path, JoinUnder(exp.checkpoint_dir, req.uuid(), "uuid"));
  }
  row.time_ms = WallMs();
  if (trial.last_validation == req.total_batches() && trial.row.latest_validation) {
    row.searcher_metric = trial.row.latest_validation;
  }
  return row;
}

absl::Status MasterCore::AdmitCheckpointLocked(TrialRuntime& trial, const CheckpointRow& row) {
  if (!trial.checkpoint_budget) {
    DET_ASSIGN_OR_RETURN(trial.checkpoint_budget, store_->CheckpointBudgetOf(trial.row.id));
  }
  const int64_t bytes = Store::CheckpointRowBytes(row);
  DET_RETURN_IF_ERROR(CheckCheckpointReport(trial.row.id, static_cast<int64_t>(row.resources.size()),
                                            static_cast<int64_t>(row.metadata_json.size()), bytes,
                                            options_.checkpoint_limits, *trial.checkpoint_budget));
  trial.checkpoint_budget->rows += 1;
  trial.checkpoint_budget->bytes += bytes;
  return absl::OkStatus();
}

absl::StatusOr<trialv1::ReportCheckpointResponse> MasterCore::ReportCheckpoint(
    const trialv1::ReportCheckpointRequest& req, const std::string& token) {
  DET_ASSIGN_OR_RETURN(const std::optional<int64_t> metadata_size, MeasureCheckpointMetadata(req, token));
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  // Trial code names the checkpoint: a UUID only, so that the directory GC
  // later deletes is always <checkpoint dir>/<uuid>.
  DET_RETURN_IF_ERROR(ValidateUuid(req.uuid(), "uuid"));
  auto existing = store_->GetCheckpoint(req.uuid());
  if (existing.ok()) {
    if (existing->trial_id != trial.row.id) {
      return absl::AlreadyExistsError(absl::StrCat("checkpoint ", req.uuid(), " belongs to trial ", existing->trial_id));
    }
    // A retried report (the reply was lost, e.g. to a master restart).
    ForgetTrialFactsLocked(trial);
    trial.row.latest_checkpoint_uuid = existing->uuid;
    trial.last_checkpoint = existing->total_batches;
    SetTrialState(trial, trial.row.state);
    return Committed(w, trialv1::ReportCheckpointResponse());
  }
  DET_ASSIGN_OR_RETURN(const CheckpointRow row, CheckpointRowLocked(exp, trial, req, metadata_size));
  DET_RETURN_IF_ERROR(AdmitCheckpointLocked(trial, row));
  if (absl::Status inserted = store_->InsertCheckpoint(row); !inserted.ok()) {
    trial.checkpoint_budget.reset();  // recounted at the next report
    return inserted;
  }
  ForgetTrialFactsLocked(trial);
  alloc->made_progress = true;
  trial.row.latest_checkpoint_uuid = row.uuid;
  trial.last_checkpoint = req.total_batches();
  SetTrialState(trial, trial.row.state);
  if (exp.config.searcher.name == SearcherName::kPbt) {
    ResolvePbtChildrenLocked(exp);  // children waiting for this checkpoint
    ScheduleLocked();
  }
  return Committed(w, trialv1::ReportCheckpointResponse());
}

absl::StatusOr<trialv1::CompleteSearcherOperationResponse> MasterCore::CompleteSearcherOperation(
    const trialv1::CompleteSearcherOperationRequest& req, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  ExperimentRuntime& exp = *experiments_.at(alloc->experiment_id);
  trial.last_validation = trial.row.total_batches;
  if (SearcherTargetReached(exp, trial, trial.row.total_batches)) {
    int64_t length = trial.searcher_target;  // in the searcher's unit
    trial.searcher_target = 0;
    SetTrialState(trial, trial.row.state);
    DET_RETURN_IF_ERROR(
        ApplySearcherOps(exp, exp.searcher->ValidationCompleted(trial.row.request_id, req.searcher_metric(), length)));
  }
  return Committed(w, trialv1::CompleteSearcherOperationResponse());
}

absl::StatusOr<trialv1::ReportProgressResponse> MasterCore::ReportProgress(const trialv1::ReportProgressRequest& req,
                                                                           const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  DET_RETURN_IF_ERROR(Authorize(req.allocation_id(), token).status());
  return trialv1::ReportProgressResponse();
}

// An early exit's message, at most 8 KiB: cut at a character boundary (a
// proto3 string is valid UTF-8) and marked when cut.
static std::string BoundedEarlyExitMessage(const std::string& message) {
  constexpr size_t kMaxBytes = 8192;
  if (message.size() <= kMaxBytes) return message;
  size_t n = kMaxBytes;
  while (n > 0 && (static_cast<unsigned char>(message[n]) & 0xC0) == 0x80) --n;
  return message.substr(0, n) + " ... (truncated)";
}

absl::StatusOr<trialv1::ReportEarlyExitResponse> MasterCore::ReportEarlyExit(const trialv1::ReportEarlyExitRequest& req,
                                                                             const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
  TrialRuntime& trial = *trials_.at(alloc->trial_id);
  // The first report of an allocation names the cause: a rank whose peer
  // failed reports after it.
  if (!alloc->early_exit_reported) trial.error_message = BoundedEarlyExitMessage(req.message());
  alloc->early_exit_reported = true;
  if (req.reason() == trialv1::EARLY_EXIT_REASON_INVALID_HP) trial.invalid_hp = true;
  SetTrialState(trial, trial.row.state);
  return Committed(w, trialv1::ReportEarlyExitResponse());
}

absl::StatusOr<trialv1::ShouldPreemptResponse> MasterCore::ShouldPreempt(const trialv1::ShouldPreemptRequest& req,
                                                                         const std::string& token) {
  std::unique_lock<std::mutex> l(mu_);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::clamp(req.timeout_ms(), 0, 60000));
  trialv1::ShouldPreemptResponse resp;
  while (true) {
    DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
    resp.set_preempt(alloc->preempt);
    if (alloc->preempt) {
      DET_ASSIGN_OR_RETURN(trialv1::ExitReason why, PreemptReason(experiments_, trials_, *alloc));
      resp.set_reason(why);
    }
    if (alloc->preempt || stop_) return resp;
    if (preempt_cv_.wait_until(l, deadline) == std::cv_status::timeout) {
      DET_ASSIGN_OR_RETURN(AllocationRuntime * again, Authorize(req.allocation_id(), token));
      resp.set_preempt(again->preempt);
      if (again->preempt) {
        DET_ASSIGN_OR_RETURN(trialv1::ExitReason why, PreemptReason(experiments_, trials_, *again));
        resp.set_reason(why);
      }
      return resp;
    }
  }
}

absl::StatusOr<int> MasterCore::AllocationRanks(const std::string& allocation_id, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(allocation_id, token));
  return std::max({alloc->rendezvous.world_size(), alloc->rendezvous.ranks_size(), 1});
}

absl::StatusOr<trialv1::AckPreemptionResponse> MasterCore::AckPreemption(const trialv1::AckPreemptionRequest& req,
                                                                         const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  DET_RETURN_IF_ERROR(Authorize(req.allocation_id(), token).status());
  return trialv1::AckPreemptionResponse();
}

absl::StatusOr<trialv1::ReportTrialLogsResponse> MasterCore::ReportTrialLogs(const trialv1::ReportTrialLogsRequest& req,
                                                                             const std::string& token) {
  int64_t trial_id;
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_ASSIGN_OR_RETURN(AllocationRuntime * alloc, Authorize(req.allocation_id(), token));
    trial_id = alloc->trial_id;
  }
  if (req.logs_size() > options_.max_log_lines_per_message) {
    return absl::InvalidArgumentError(absl::StrCat("logs: ", req.logs_size(), " lines in one message; the limit is ",
                                                   options_.max_log_lines_per_message));
  }
  std::vector<TaskLogRow> rows;
  for (const auto& log : req.logs()) {
    TaskLogRow r;
    r.trial_id = trial_id;
    r.allocation_id = req.allocation_id();
    r.rank = log.has_rank() ? log.rank() : 0;
    r.time_ms = log.has_timestamp() ? TimeMs(log.timestamp()) : WallMs();
    r.level = apiv1::LogLevel_Name(log.level());
    r.stream = log.stdtype() == apiv1::STD_TYPE_STDERR ? "stderr" : "stdout";
    r.message = Utf8Sanitized(log.message());  // bytes: a hostile trial's too
    rows.push_back(std::move(r));
  }
  DET_RETURN_IF_ERROR(store_->InsertTaskLogs(rows));
  return trialv1::ReportTrialLogsResponse();
}

}  // namespace det::master
