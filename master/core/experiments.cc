// MasterCore: the det.api.v1 experiment calls and the searcher's operations.
#include <algorithm>
#include <deque>
#include <filesystem>
#include <set>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/batch_lengths.h"
#include "common/checkpoint_storage_config.h"
#include "common/config_redact.h"
#include "common/proto_json.h"
#include "common/safe_path.h"
#include "common/status_macros.h"
#include "common/trial_env.h"
#include "master/core/checkpoint_facts.h"
#include "master/core/checkpoint_gc.h"
#include "master/core/checkpoint_list.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"
#include "master/core/trial_lengths.h"
#include "master/core/trial_states.h"
#include "master/core/workspaces.h"

namespace det::master {

std::string ExperimentCheckpointDir(const ExperimentConfig& config, const std::string& checkpoint_root) {
  if (!config.checkpoint_storage) return checkpoint_root;
  // s3: the URL of the experiment's bucket and prefix (the trials'
  // checkpoint_storage_path; checkpoints are s3://bucket/prefix/<uuid>).
  if (config.checkpoint_storage->type == "s3") return S3StorageUrl(*config.checkpoint_storage);
  // No host_path (a checkpoint_storage without type): the master's storage.
  std::filesystem::path p = config.checkpoint_storage->host_path.empty() ? checkpoint_root
                                                                         : config.checkpoint_storage->host_path;
  if (!config.checkpoint_storage->storage_path.empty()) p /= config.checkpoint_storage->storage_path;
  return p.string();
}

namespace {

// INVALID_ARGUMENT when slots_per_trial exceeds every slot the pool's known
// agents (registered since start-up or recovered, connected or not) have
// together: a trial may span several whole agents, but never more. With no
// agent of the pool known yet, anything within the config's cap is accepted.
absl::Status CheckSlotsFitPool(const std::map<std::string, std::unique_ptr<AgentRuntime>>& agents,
                               const ResourcesConfig& resources) {
  int64_t pool_slots = 0;
  bool known = false;
  for (const auto& [id, a] : agents) {
    if (a->row.resource_pool != resources.resource_pool) continue;
    known = true;
    pool_slots += static_cast<int64_t>(a->devices.size());
  }
  if (!known || resources.slots_per_trial <= pool_slots) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "config: field 'resources.slots_per_trial' is ", resources.slots_per_trial, ", more than resource pool '",
      resources.resource_pool, "' can offer (its agents have ", pool_slots, " slot(s) in all)"));
}

}  // namespace

absl::StatusOr<std::string> MasterCore::StoreTrialSo(const apiv1::CreateExperimentRequest& req,
                                                     const std::string& pool, std::string* so_name,
                                                     std::vector<std::string>* abi_warnings) {
  DET_ASSIGN_OR_RETURN(*so_name, ValidateTrialSoName(req.trial_so_name()));
  std::string sha;
  if (!req.trial_so().empty()) {
    if (static_cast<int64_t>(req.trial_so().size()) > options_.max_trial_so_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("trial.so is ", req.trial_so().size(), " bytes; the limit is ",
                                                     options_.max_trial_so_bytes));
    }
    DET_ASSIGN_OR_RETURN(sha, artifacts_.Put(req.trial_so()));
  } else if (!req.trial_so_sha256().empty()) {
    DET_RETURN_IF_ERROR(ValidateSha256(req.trial_so_sha256(), "trial_so_sha256"));
    if (!artifacts_.Has(req.trial_so_sha256())) {
      return absl::InvalidArgumentError(absl::StrCat("trial_so_sha256 ", req.trial_so_sha256(), " was never uploaded"));
    }
    sha = req.trial_so_sha256();
  } else {
    return absl::InvalidArgumentError("trial_so is required: the bytes of the trial library");
  }
  // The ABI check (agents.cc); a fork's request names no file: the name
  // its trial.so was uploaded as.
  if (req.trial_so_name().empty()) *so_name = artifacts_.Name(sha);
  absl::StatusOr<std::vector<std::string>> warnings = CheckTrialAbiOnAgents(sha, *so_name, pool);
  if (!warnings.ok()) {
    // A trial.so no agent can load is not kept unless an experiment uses it
    // (as DeletionStep, under the lock).
    std::lock_guard<std::mutex> l(mu_);
    auto users = store_->CountExperimentsWithArtifact(sha, 0);
    if (users.ok() && *users == 0) (void)artifacts_.Remove(sha);
    return warnings.status();
  }
  *abi_warnings = std::move(*warnings);
  return sha;
}

absl::Status MasterCore::CheckS3WarmStartLocked(const std::string& uuid, const std::string& workspace) {
  if (uuid.empty()) return absl::OkStatus();
  DET_ASSIGN_OR_RETURN(CheckpointRow ck, store_->GetCheckpoint(uuid));
  auto source = experiments_.find(ck.experiment_id);
  if (source == experiments_.end()) return absl::OkStatus();  // ResolveForkLocked refuses it
  const std::optional<CheckpointStorageConfig>& storage = source->second->config.checkpoint_storage;
  if (!storage || storage->type != "s3") return absl::OkStatus();
  absl::Status st = s3_profiles_.Resolve(*storage, workspace).status();
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat("searcher.source_checkpoint_uuid: checkpoint ", uuid,
                                              " is in S3 storage that workspace '", workspace,
                                              "' may not read: ", st.message()));
}

absl::StatusOr<apiv1::CreateExperimentResponse> MasterCore::CreateExperiment(
    const apiv1::CreateExperimentRequest& req, const apiv1::User& owner) {
  DET_ASSIGN_OR_RETURN(ExperimentConfig config, ParseExperimentConfig(req.config_yaml(), "config"));
  // The agent's launch-time rules, now: not after max_restarts failed starts.
  DET_RETURN_IF_ERROR(ValidateTrialEnv(config.environment.environment_variables, "environment.environment_variables"));
  DET_ASSIGN_OR_RETURN(config.resources.resource_pool,
                       ResolveExperimentPool(options_.resource_pools, config.resources));
  ExperimentRow fork;  // parent_id, warm_start_checkpoint_uuid
  std::string workspace;  // the name of the workspace of fork.project_id
  {
    std::lock_guard<std::mutex> l(mu_);
    DET_RETURN_IF_ERROR(CheckSlotsFitPool(agents_, config.resources));
    DET_RETURN_IF_ERROR(ResolveForkLocked(req, config, &fork));
    // The config's workspace/project, else the parent's project (a fork).
    const int64_t parent_project = fork.parent_id > 0 ? experiments_.at(fork.parent_id)->row.project_id : 0;
    DET_ASSIGN_OR_RETURN(fork.project_id, ResolveExperimentProject(*store_, config, parent_project));
    DET_ASSIGN_OR_RETURN(ProjectRow project, store_->GetProject(fork.project_id));
    workspace = project.workspace_name;
    DET_RETURN_IF_ERROR(CheckS3WarmStartLocked(fork.warm_start_checkpoint_uuid, workspace));
  }
  // s3: the profile must exist and allow the experiment's workspace (no S3
  // I/O here: the bucket is first used by the trials).
  const bool s3_storage = config.checkpoint_storage && config.checkpoint_storage->type == "s3";
  if (s3_storage) DET_RETURN_IF_ERROR(s3_profiles_.Resolve(*config.checkpoint_storage, workspace).status());
  // Checks the lengths convert (with the first sample; each trial converts
  // with its own hparams later).
  DET_RETURN_IF_ERROR(
      ResolveBatchLengths(config, "; set records_per_epoch to use epochs with the master").status());
  const SearcherLength searcher_length = ExperimentSearcherLength(config, nullptr);
  DET_ASSIGN_OR_RETURN(Searcher searcher, Searcher::Create(config, searcher_length.max));
  const std::string checkpoint_dir = ExperimentCheckpointDir(config, options_.checkpoint_root);
  if (!s3_storage) DET_RETURN_IF_ERROR(checkpoint_roots_.Check(checkpoint_dir, "checkpoint_storage.host_path"));

  std::string so_name;
  std::vector<std::string> abi_warnings;
  DET_ASSIGN_OR_RETURN(const std::string sha,
                       StoreTrialSo(req, config.resources.resource_pool, &so_name, &abi_warnings));
  apiv1::CreateExperimentResponse resp;
  for (const auto& w : config.warnings) resp.add_warnings(w);
  for (const auto& w : abi_warnings) resp.add_warnings(w);
  if (req.validate_only()) return resp;
  // The name goes with the bytes: one other experiments' trial.so goes by
  // is kept (as by PatchExperiment).
  if (!req.trial_so_name().empty() && store_->CountExperimentsWithArtifact(sha, 0).value_or(1) == 0) {
    DET_RETURN_IF_ERROR(artifacts_.SetName(sha, so_name));
  }

  std::lock_guard<std::mutex> l(mu_);
  // A DeleteExperiment may have removed an unshared trial.so meanwhile (it
  // counts the experiments using it under this lock).
  if (!artifacts_.Has(sha)) {
    return absl::UnavailableError(absl::StrCat("trial.so ", sha, " was deleted meanwhile; retry"));
  }
  WriteScope w(this);
  auto exp = std::make_unique<ExperimentRuntime>();
  exp->row.name = config.name;
  exp->row.owner = owner.username();
  exp->owner_id = owner.id();
  exp->row.description = config.description;
  exp->row.labels = config.labels;
  exp->row.state = req.activate() ? kActive : kPaused;
  exp->row.config_yaml = req.config_yaml();
  exp->row.config_json = ExperimentConfigToJson(config).dump();
  exp->row.trial_so_sha256 = sha;
  exp->row.created_ms = WallMs();
  exp->row.parent_id = fork.parent_id;
  exp->row.warm_start_checkpoint_uuid = fork.warm_start_checkpoint_uuid;
  exp->row.project_id = fork.project_id;
  exp->config = std::move(config);
  exp->searcher = std::make_unique<Searcher>(std::move(searcher));
  exp->searcher_length = searcher_length;
  exp->checkpoint_dir = checkpoint_dir;
  exp->row.searcher_state_json = SearcherSnapshot(*exp).dump();
  DET_ASSIGN_OR_RETURN(exp->row.id, store_->InsertExperiment(exp->row));
  SetJobKnobsFromConfig(*exp);
  ApplyPoolDefaultsLocked(*exp);
  int64_t id = exp->row.id;
  ExperimentRuntime& e = *exp;
  experiments_[id] = std::move(exp);
  spdlog::info("created experiment {} '{}' ({} searcher, trial.so {})", id, e.row.name,
               std::string(SearcherNameToString(e.config.searcher.name)), sha.substr(0, 12));
  if (req.activate()) DET_RETURN_IF_ERROR(ApplySearcherOps(e, e.searcher->InitialOperations()));
  *resp.mutable_experiment() = ExperimentProto(e);
  return Committed(w, resp);
}

std::map<RequestId, double> MasterCore::TrainedUnitsLocked(const ExperimentRuntime& exp) const {
  std::map<RequestId, double> out;
  for (const auto& [request, tid] : exp.trial_by_request) {
    const TrialRuntime& t = *trials_.at(tid);
    if (t.searcher_target <= 0) continue;
    if (exp.searcher_length.is_metric()) {
      if (t.time_metric_value) out[request] = std::min(*t.time_metric_value, static_cast<double>(t.searcher_target));
    } else {
      out[request] = TrainedUnits(t.searcher_target, t.target_batches, t.row.total_batches);
    }
  }
  return out;
}

ExperimentSummary MasterCore::ExperimentSummaryLocked(const ExperimentRuntime& exp) {
  if (exp.terminal_summary) return *exp.terminal_summary;
  ExperimentSummary s;
  s.progress = exp.searcher ? exp.searcher->ProgressWithTraining(TrainedUnitsLocked(exp)) : exp.row.progress;
  std::optional<double> best_checkpoint_metric;
  int64_t latest_checkpoint_ms = -1;
  bool all_terminal = Terminal(exp.row.state);
  for (const auto& [req, tid] : exp.trial_by_request) {
    const TrialRuntime& t = *trials_.at(tid);
    all_terminal = all_terminal && Terminal(t.row.state);
    // The shown state, as trial lists show it (a waiting trial is stored ACTIVE).
    s.trials_by_state[WaitsForSearcher(t) ? "WAITING" : t.row.state] += 1;
    const TrialFacts facts = TrialFactsLocked(t);
    if (facts.best_checkpoint_metric &&
        (!best_checkpoint_metric || BetterMetric(exp.config.searcher.smaller_is_better, *facts.best_checkpoint_metric,
                                                 *best_checkpoint_metric))) {
      best_checkpoint_metric = facts.best_checkpoint_metric;
      s.best_checkpoint_uuid = facts.best_checkpoint_uuid;
    }
    if (!t.row.latest_checkpoint_uuid.empty() && facts.latest_checkpoint_ms > latest_checkpoint_ms) {
      latest_checkpoint_ms = facts.latest_checkpoint_ms;
      s.latest_checkpoint_uuid = t.row.latest_checkpoint_uuid;
    }
    if (t.row.best_validation) {
      double v = *t.row.best_validation;
      if (!s.best_validation ||
          (exp.config.searcher.smaller_is_better ? v < *s.best_validation : v > *s.best_validation)) {
        s.best_validation = v;
        s.best_trial = tid;
      }
    }
    // Facts not cached (a store error) are read again next time.
    all_terminal = all_terminal && t.facts.has_value();
  }
  if (all_terminal) exp.terminal_summary = s;
  return s;
}

void MasterCore::ForgetTrialFactsLocked(const TrialRuntime& trial) {
  trial.facts.reset();
  auto it = experiments_.find(trial.row.experiment_id);
  if (it != experiments_.end()) it->second->terminal_summary.reset();
}

apiv1::Experiment MasterCore::ExperimentProto(const ExperimentRuntime& exp) {
  apiv1::Experiment e;
  e.set_id(exp.row.id);
  e.set_name(exp.row.name);
  e.set_description(exp.row.description);
  for (const auto& l : exp.row.labels) e.add_labels(l);
  e.set_state(StateEnum(exp.row.state));
  e.set_archived(exp.row.archived);
  // Shown to every reader: secret-looking values redacted (the trials get
  // the config as written: GetTrialContext, StartAllocation).
  if (!exp.shown_config) {
    ShownConfig shown;
    shown.yaml = RedactConfigYaml(exp.row.config_yaml);
    auto cfg = JsonToStruct(RedactConfigJson(nlohmann::json::parse(exp.row.config_json, nullptr, false)));
    if (cfg.ok()) shown.config = *std::move(cfg);
    exp.shown_config = std::move(shown);
  }
  e.set_config_yaml(exp.shown_config->yaml);
  if (exp.shown_config->config) *e.mutable_config() = *exp.shown_config->config;
  e.mutable_trial_so()->set_sha256(exp.row.trial_so_sha256);
  e.mutable_trial_so()->set_size_bytes(artifacts_.Size(exp.row.trial_so_sha256).value_or(0));
  e.set_searcher_name(std::string(SearcherNameToString(exp.config.searcher.name)));
  e.set_searcher_metric(exp.config.searcher.metric);
  e.set_smaller_is_better(exp.config.searcher.smaller_is_better);
  const ExperimentSummary summary = ExperimentSummaryLocked(exp);
  e.set_progress(summary.progress);
  for (const auto& [state, n] : summary.trials_by_state) (*e.mutable_num_trials_by_state())[state] = n;
  if (!summary.best_checkpoint_uuid.empty()) e.set_best_checkpoint_uuid(summary.best_checkpoint_uuid);
  if (!summary.latest_checkpoint_uuid.empty()) e.set_latest_checkpoint_uuid(summary.latest_checkpoint_uuid);
  if (summary.best_validation) {
    e.set_best_validation_metric(*summary.best_validation);
    e.set_best_trial_id(summary.best_trial);
  }
  e.set_num_trials(static_cast<int32_t>(exp.trial_by_request.size()));
  SetTime(e.mutable_start_time(), exp.row.created_ms);
  if (exp.row.ended_ms > 0) SetTime(e.mutable_end_time(), exp.row.ended_ms);
  e.set_resource_pool(exp.config.resources.resource_pool);
  e.set_username(exp.row.owner);
  e.set_user_id(exp.owner_id);
  e.set_parent_id(exp.row.parent_id);
  *e.mutable_checkpoint_gc_policy() = EffectiveGcPolicy(exp.config, exp.row.checkpoint_gc_policy_json);
  if (exp.row.id > 0) e.set_job_id(absl::StrCat("exp-", exp.row.id));
  e.set_priority(exp.priority);
  e.set_weight(exp.weight);
  e.set_max_slots(exp.max_slots);
  SetExperimentPlacement(*store_, exp.row.project_id, &e);
  return e;
}

namespace {

bool MatchesFilter(const ExperimentRow& row, const apiv1::GetExperimentsRequest& req) {
  if (!req.name().empty() && row.name.find(req.name()) == std::string::npos) return false;
  // Unset: only unarchived experiments (Determined's default listing).
  if (row.archived != (req.has_archived() && req.archived())) return false;
  if (req.states_size() > 0) {
    bool match = false;
    for (int s : req.states()) match |= StateEnum(row.state) == s;
    if (!match) return false;
  }
  for (const auto& want : req.labels()) {
    if (std::find(row.labels.begin(), row.labels.end(), want) == row.labels.end()) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<apiv1::GetExperimentsResponse> MasterCore::GetExperiments(const apiv1::GetExperimentsRequest& req) {
  DET_ASSIGN_OR_RETURN(std::optional<std::set<int64_t>> projects, ExperimentProjectFilter(*store_, req));
  std::lock_guard<std::mutex> l(mu_);
  apiv1::GetExperimentsResponse resp;
  std::vector<const ExperimentRuntime*> selected;
  for (const auto& [id, exp] : experiments_) {
    if (!MatchesFilter(exp->row, req) || (projects && !projects->count(exp->row.project_id))) continue;
    selected.push_back(exp.get());
  }
  if (req.order_by() == apiv1::ORDER_BY_DESC) std::reverse(selected.begin(), selected.end());
  int total = static_cast<int>(selected.size());
  int offset = std::clamp(req.offset(), 0, total);
  int end = req.limit() > 0 ? std::min(total, offset + req.limit()) : total;
  for (int i = offset; i < end; ++i) *resp.add_experiments() = ExperimentProto(*selected[i]);
  resp.mutable_pagination()->set_offset(offset);
  resp.mutable_pagination()->set_limit(req.limit());
  resp.mutable_pagination()->set_start_index(offset);
  resp.mutable_pagination()->set_end_index(end);
  resp.mutable_pagination()->set_total(total);
  return resp;
}

absl::StatusOr<apiv1::GetExperimentResponse> MasterCore::GetExperiment(const apiv1::GetExperimentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(req.experiment_id()));
  apiv1::GetExperimentResponse resp;
  *resp.mutable_experiment() = ExperimentProto(*exp);
  return resp;
}

absl::StatusOr<apiv1::ActivateExperimentResponse> MasterCore::ActivateExperiment(
    const apiv1::ActivateExperimentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  const int64_t id = req.experiment_id();
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  if (exp->row.state == kActive) return apiv1::ActivateExperimentResponse();
  if (exp->row.state != kPaused) {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", id, " is ", exp->row.state, "; only a PAUSED experiment can be activated"));
  }
  DET_RETURN_IF_ERROR(CheckTrialSoStoredLocked(*exp));
  SetExperimentState(*exp, kActive);
  std::vector<SearcherOp> ops;
  if (exp->trial_by_request.empty() && !exp->search_done) ops = exp->searcher->InitialOperations();
  for (const auto& [r, tid] : exp->trial_by_request) {
    TrialRuntime& t = *trials_[tid];
    if (t.row.state == kPaused) SetTrialState(t, kActive);
    if (!Terminal(t.row.state)) RequestAllocation(*exp, t);
  }
  DET_RETURN_IF_ERROR(ApplySearcherOps(*exp, std::move(ops)));
  return Committed(w, apiv1::ActivateExperimentResponse());
}

void MasterCore::DropPendingLocked(int64_t experiment_id) {
  ErasePendingIf([&](const SchedRequest& r) { return r.group_id == experiment_id; });
}

absl::StatusOr<apiv1::PauseExperimentResponse> MasterCore::PauseExperiment(const apiv1::PauseExperimentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_RETURN_IF_ERROR(UserStopLocked(req.experiment_id(), UserStop::kPause));
  return apiv1::PauseExperimentResponse();
}

// PauseExperiment's state change (UserStopLocked commits it).
absl::Status MasterCore::PauseExperimentLocked(int64_t id) {
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  if (exp->row.state == kPaused) return absl::OkStatus();
  if (exp->row.state != kActive) {
    return absl::FailedPreconditionError(absl::StrCat("experiment ", id, " is ", exp->row.state, "; only an ACTIVE experiment can be paused"));
  }
  SetExperimentState(*exp, kPaused);
  DropPendingLocked(id);
  for (const auto& [r, tid] : exp->trial_by_request) {
    TrialRuntime& t = *trials_[tid];
    if (Terminal(t.row.state)) continue;
    auto ait = allocations_.find(t.allocation_id);
    if (ait != allocations_.end()) {
      // It checkpoints at its next batch and exits; then it is PAUSED.
      RequestStopLocked(*ait->second);
    } else {
      SetTrialState(t, kPaused);
    }
  }
  return absl::OkStatus();
}

absl::Status MasterCore::StopExperimentLocked(int64_t id, bool kill) {
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(id));
  DET_RETURN_IF_ERROR(CheckNotDeletingLocked(*exp));
  if (Terminal(exp->row.state)) return absl::OkStatus();
  SetExperimentState(*exp, kill ? kStoppingKilled : kStoppingCanceled);
  DropPendingLocked(id);
  for (const auto& [r, tid] : exp->trial_by_request) {
    TrialRuntime& t = *trials_[tid];
    if (Terminal(t.row.state)) continue;
    t.killed = true;
    auto ait = allocations_.find(t.allocation_id);
    if (ait == allocations_.end()) {
      SetTrialState(t, kCanceled);
      continue;
    }
    SetTrialState(t, t.row.state);
    if (kill) {
      KillAllocationLocked(*ait->second, "experiment killed");
    } else {
      RequestStopLocked(*ait->second);
    }
  }
  MaybeFinishExperiment(*exp);
  return absl::OkStatus();
}

absl::StatusOr<apiv1::CancelExperimentResponse> MasterCore::CancelExperiment(
    const apiv1::CancelExperimentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_RETURN_IF_ERROR(UserStopLocked(req.experiment_id(), UserStop::kCancel));
  return apiv1::CancelExperimentResponse();
}

absl::StatusOr<apiv1::KillExperimentResponse> MasterCore::KillExperiment(const apiv1::KillExperimentRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_RETURN_IF_ERROR(UserStopLocked(req.experiment_id(), UserStop::kKill));
  return apiv1::KillExperimentResponse();
}

namespace {

// Bounds of what PatchExperiment stores (besides name: 1 to 255 bytes, and
// each label: 1 to 255 bytes, no duplicates).
constexpr size_t kMaxDescriptionBytes = 16 << 10;
constexpr int kMaxLabels = 100;

absl::Status ValidatePatch(const apiv1::PatchExperimentRequest& req) {
  if (req.has_name() && (req.name().empty() || req.name().size() > 255)) {
    return absl::InvalidArgumentError("name: must be 1 to 255 bytes");
  }
  if (req.has_description() && req.description().size() > kMaxDescriptionBytes) {
    return absl::InvalidArgumentError(absl::StrCat("description: at most ", kMaxDescriptionBytes, " bytes, not ",
                                                   req.description().size()));
  }
  if (req.has_labels() && req.labels().labels_size() > kMaxLabels) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels: at most ", kMaxLabels, " labels, not ", req.labels().labels_size()));
  }
  if (req.has_labels()) {
    std::set<std::string> seen;
    for (const auto& label : req.labels().labels()) {
      if (label.empty() || label.size() > 255) return absl::InvalidArgumentError("labels: each must be 1 to 255 bytes");
      if (!seen.insert(label).second) return absl::InvalidArgumentError(absl::StrCat("labels: duplicate '", label, "'"));
    }
  }
  if (!req.has_trial_so_sha256() && !req.trial_so_name().empty()) {
    return absl::InvalidArgumentError("trial_so_name: only with trial_so_sha256 (the trial.so it names)");
  }
  if (req.has_checkpoint_gc_policy()) {
    const auto& p = req.checkpoint_gc_policy();
    if (p.save_experiment_best() < 0) return absl::InvalidArgumentError("checkpoint_gc_policy.save_experiment_best: must be >= 0");
    if (p.save_trial_best() < 0) return absl::InvalidArgumentError("checkpoint_gc_policy.save_trial_best: must be >= 0");
    if (p.save_trial_latest() < 0) return absl::InvalidArgumentError("checkpoint_gc_policy.save_trial_latest: must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<apiv1::PatchExperimentResponse> MasterCore::PatchExperiment(const apiv1::PatchExperimentRequest& req) {
  DET_RETURN_IF_ERROR(ValidatePatch(req));
  std::string so_name;
  if (req.has_trial_so_sha256()) {
    DET_ASSIGN_OR_RETURN(so_name, CheckReplacementTrialSo(req));
  }
  std::string old_sha;
  bool unshared = false;
  apiv1::PatchExperimentResponse resp;
  {
    std::lock_guard<std::mutex> l(mu_);
    WriteScope w(this);
    DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(req.experiment_id()));
    DET_RETURN_IF_ERROR(CheckNotDeletingLocked(*exp));
    if (req.has_trial_so_sha256()) {
      DET_ASSIGN_OR_RETURN(old_sha, ReplaceTrialSoLocked(*exp, req.trial_so_sha256(), &unshared));
    }
    if (req.has_name()) exp->row.name = req.name();
    if (req.has_description()) exp->row.description = req.description();
    if (req.has_labels()) exp->row.labels.assign(req.labels().labels().begin(), req.labels().labels().end());
    if (req.has_checkpoint_gc_policy()) {
      const auto& p = req.checkpoint_gc_policy();
      exp->row.checkpoint_gc_policy_json = nlohmann::json{{"save_experiment_best", p.save_experiment_best()},
                                                          {"save_trial_best", p.save_trial_best()},
                                                          {"save_trial_latest", p.save_trial_latest()}}
                                               .dump();
      // Applied to the trials that have ended (by the background loop).
      exp->gc_pending = true;
      stop_cv_.notify_all();
      spdlog::info("experiment {}: checkpoint GC policy {}", exp->row.id, exp->row.checkpoint_gc_policy_json);
    }
    DET_RETURN_IF_ERROR(store_->UpdateExperiment(exp->row));
    *resp.mutable_experiment() = ExperimentProto(*exp);
    DET_RETURN_IF_ERROR(w.Commit());
  }
  if (req.has_trial_so_sha256()) {
    // Only once committed (a failed commit puts the experiment back on
    // old_sha), and without the lock held across the renaming.
    spdlog::info("experiment {}: trial.so is now {} (sha256 {}), was sha256 {}", req.experiment_id(), so_name,
                 req.trial_so_sha256(), old_sha);
    FinishTrialSoReplacement(req.trial_so_sha256(), so_name, unshared, old_sha);
  }
  return resp;
}

absl::StatusOr<apiv1::GetExperimentTrialsResponse> MasterCore::GetExperimentTrials(
    const apiv1::GetExperimentTrialsRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  DET_ASSIGN_OR_RETURN(ExperimentRuntime * exp, FindExperiment(req.experiment_id()));
  apiv1::GetExperimentTrialsResponse resp;
  std::vector<int64_t> ids;
  for (const auto& [r, tid] : exp->trial_by_request) ids.push_back(tid);
  std::sort(ids.begin(), ids.end());
  if (req.order_by() == apiv1::ORDER_BY_DESC) std::reverse(ids.begin(), ids.end());
  int total = static_cast<int>(ids.size());
  int offset = std::clamp(req.offset(), 0, total);
  int end = req.limit() > 0 ? std::min(total, offset + req.limit()) : total;
  for (int i = offset; i < end; ++i) *resp.add_trials() = TrialProto(*trials_[ids[i]]);
  resp.mutable_pagination()->set_total(total);
  resp.mutable_pagination()->set_offset(offset);
  resp.mutable_pagination()->set_end_index(end);
  return resp;
}

absl::StatusOr<apiv1::GetExperimentCheckpointsResponse> MasterCore::GetExperimentCheckpoints(
    const apiv1::GetExperimentCheckpointsRequest& req) {
  DET_ASSIGN_OR_RETURN(std::vector<apiv1::Checkpoint> checkpoints, ListCheckpoints(req.experiment_id(), std::nullopt));
  bool smaller_is_better = true;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto exp = FindExperiment(req.experiment_id());
    if (exp.ok()) smaller_is_better = (*exp)->config.searcher.smaller_is_better;
  }
  apiv1::GetExperimentCheckpointsResponse resp;
  DET_RETURN_IF_ERROR(SortFilterPageCheckpoints(CheckpointListQueryOf(req, smaller_is_better), &checkpoints,
                                                resp.mutable_pagination()));
  for (auto& c : checkpoints) *resp.add_checkpoints() = std::move(c);
  return resp;
}

absl::Status MasterCore::SaveSearcher(ExperimentRuntime& exp) {
  exp.row.searcher_state_json = SearcherSnapshot(exp).dump();
  exp.row.progress = exp.searcher->Progress();
  return store_->UpdateExperiment(exp.row);
}

absl::Status MasterCore::CreateTrialLocked(ExperimentRuntime& exp, const CreateTrialOp& create,
                                           std::vector<SearcherOp>* more) {
  TrialRow row;
  row.experiment_id = exp.row.id;
  row.request_id = create.request_id;
  row.state = kActive;
  row.hparams_json = create.hparams.dump();
  row.seed = create.trial_seed;
  row.created_ms = WallMs();
  if (create.parent != 0) row.parent_trial_id = PbtParentTrialIdLocked(exp, create.parent);
  DET_ASSIGN_OR_RETURN(row.id, store_->InsertTrial(row));
  auto trial = std::make_unique<TrialRuntime>();
  trial->row = row;
  exp.trial_by_request[create.request_id] = row.id;
  TrialRuntime& t = *trial;
  absl::Status lengths = InitTrialLengths(exp, t);  // a bad sample fails at its first ValidateAfter
  if (!lengths.ok()) spdlog::warn("experiment {}: {}", exp.row.id, lengths.ToString());
  trials_[row.id] = std::move(trial);
  if (row.parent_trial_id != 0) ResolvePbtChildrenLocked(exp);  // binds the parent's checkpoint if ready
  spdlog::info("experiment {}: created trial {} with hparams {}", exp.row.id, row.id,
               RedactConfigJson(create.hparams).dump());
  *more = exp.searcher->TrialCreated(create.request_id);
  if (Stopping(exp.row.state) || Terminal(exp.row.state)) {
    // The searcher answered a trial that ended under a cancel or kill
    // (e.g. random search filling the freed slot): nothing runs any more,
    // and a trial left ACTIVE would keep the experiment STOPPING forever.
    t.killed = true;
    SetTrialState(t, kCanceled);
  } else if (exp.row.state == kActive) {
    RequestAllocation(exp, t);
  } else if (exp.row.state == kPaused) {
    SetTrialState(t, kPaused);  // activating the experiment starts it
  }
  return absl::OkStatus();
}

absl::Status MasterCore::ApplySearcherOps(ExperimentRuntime& exp, std::vector<SearcherOp> ops) {
  std::deque<SearcherOp> queue(ops.begin(), ops.end());
  while (!queue.empty()) {
    SearcherOp op = std::move(queue.front());
    queue.pop_front();
    std::vector<SearcherOp> more;
    if (auto* create = std::get_if<CreateTrialOp>(&op)) {
      DET_RETURN_IF_ERROR(CreateTrialLocked(exp, *create, &more));
    } else if (auto* validate = std::get_if<ValidateAfterOp>(&op)) {
      auto it = exp.trial_by_request.find(validate->request_id);
      if (it == exp.trial_by_request.end()) continue;
      TrialRuntime& t = *trials_[it->second];
      if (absl::Status st = SetSearcherTarget(exp, t, validate->length); !st.ok()) {
        // This trial's own batch size cannot convert the length.
        t.error_message = std::string(st.message());
        if (!Terminal(t.row.state)) SetTrialState(t, kError);
        more = exp.searcher->TrialExitedEarly(validate->request_id, ExitedReason::kErrored);
        for (auto& next : more) queue.push_back(std::move(next));
        continue;
      }
      SetTrialState(t, t.row.state);
      // A trial that waited without a slot (e.g. an ASHA promotion) resumes
      // from its checkpoint.
      if (exp.row.state == kActive && !Terminal(t.row.state)) RequestAllocation(exp, t);
    } else if (auto* close = std::get_if<CloseTrialOp>(&op)) {
      auto it = exp.trial_by_request.find(close->request_id);
      if (it == exp.trial_by_request.end()) continue;
      TrialRuntime& t = *trials_[it->second];
      const bool waited = WaitsForSearcher(t);
      t.close_requested = true;
      if (t.allocation_id.empty() && !Terminal(t.row.state) && t.row.total_batches > 0 &&
          t.last_checkpoint == t.row.total_batches) {
        // Already checkpointed and off its slot (waiting): nothing left to run.
        SetTrialState(t, kCompleted);
        if (waited) TrialLogLocked(t.row.id, "", CompletedWhileWaitingLine(t));
        more = exp.searcher->TrialClosed(close->request_id);
      } else {
        SetTrialState(t, t.row.state);
        if (exp.row.state == kActive && !Terminal(t.row.state)) RequestAllocation(exp, t);
      }
    } else if (std::get_if<ShutdownOp>(&op)) {
      exp.search_done = true;
    }
    for (auto& next : more) queue.push_back(std::move(next));
  }
  DET_RETURN_IF_ERROR(SaveSearcher(exp));
  ResolvePbtChildrenLocked(exp);
  MaybeFinishExperiment(exp);
  ScheduleLocked();
  return absl::OkStatus();
}

bool MasterCore::CompleteIfCheckpointedLocked(ExperimentRuntime& exp, TrialRuntime& trial,
                                              std::vector<SearcherOp>* ops) {
  if (!trial.close_requested || trial.searcher_target > 0 || trial.row.total_batches <= 0 ||
      trial.last_checkpoint != trial.row.total_batches || !trial.allocation_id.empty() || Terminal(trial.row.state)) {
    return false;
  }
  SetTrialState(trial, kCompleted);
  TrialLogLocked(trial.row.id, "", RunEndLine(exp, trial, trial.row.state, trialv1::EXIT_REASON_COMPLETED));
  auto more = exp.searcher->TrialClosed(trial.row.request_id);
  ops->insert(ops->end(), more.begin(), more.end());
  return true;
}

void MasterCore::MaybeFinishExperiment(ExperimentRuntime& exp) {
  if (Terminal(exp.row.state) || exp.row.state == kDeleting) return;
  bool all_ended = true;
  bool any_completed = false;
  for (const auto& [req, tid] : exp.trial_by_request) {
    const TrialRuntime& t = *trials_[tid];
    if (!Terminal(t.row.state) || !t.allocation_id.empty()) all_ended = false;
    if (t.row.state == kCompleted) any_completed = true;
  }
  if (!all_ended) return;
  if (exp.row.state == kStoppingCanceled || exp.row.state == kStoppingKilled) {
    SetExperimentState(exp, kCanceled);
  } else if (exp.search_done) {
    SetExperimentState(exp, any_completed || exp.trial_by_request.empty() ? kCompleted : kError);
  }
}

}  // namespace det::master
