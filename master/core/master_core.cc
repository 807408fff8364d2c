// MasterCore: setup, the write scope, and the lookups and state changes that
// every part of the core shares. See master_core.h for where the rest lives.
#include "master/core/master_core.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/det_version.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "common/trial_abi.h"
#include "master/core/auth.h"
#include "master/core/core_state.h"
#include "master/core/proto_convert.h"

namespace det::master {
namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<MasterCore>> MasterCore::Create(MasterOptions options) {
  std::error_code ec;
  fs::create_directories(options.data_dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot create data dir '", options.data_dir, "': ", ec.message()));
  if (options.db_path.empty()) options.db_path = (fs::path(options.data_dir) / "det.db").string();
  if (options.checkpoint_root.empty()) options.checkpoint_root = (fs::path(options.data_dir) / "checkpoints").string();
  options.checkpoint_root = fs::absolute(options.checkpoint_root).string();
  if (!options.clock) options.clock = std::make_shared<SystemClock>();
  if (options.resource_manager.slurm_managed() && options.resource_manager.slurm.job_storage_root.empty()) {
    options.resource_manager.slurm.job_storage_root = fs::absolute(fs::path(options.data_dir) / "slurm-jobs").string();
  }
  std::vector<std::string> roots = options.checkpoint_storage_roots;
  roots.insert(roots.begin(), options.checkpoint_root);
  DET_ASSIGN_OR_RETURN(
      CheckpointRoots checkpoint_roots,
      CheckpointRoots::Create(roots, {options.data_dir, options.db_path, (fs::path(options.data_dir) / "artifacts").string()}));
  // Before the database: a bad credentials file stops det-master at start.
  DET_ASSIGN_OR_RETURN(S3Profiles s3_profiles, S3Profiles::Load(options.s3_credentials_file));
  DET_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(options.db_path));
  TaskLogLimits log_limits;
  log_limits.max_line_bytes = options.max_log_line_bytes;
  log_limits.max_trial_bytes = options.max_trial_log_bytes;
  store->set_task_log_limits(log_limits);
  store->set_metric_limits(options.metric_limits);
  std::unique_ptr<MasterCore> core(new MasterCore(std::move(options), std::move(store)));
  core->checkpoint_roots_ = std::move(checkpoint_roots);
  core->s3_profiles_ = std::move(s3_profiles);
  if (core->options_.resource_manager.slurm_managed()) {
    core->slurm_driver_ = std::make_unique<SlurmDriver>(core->options_.resource_manager.slurm,
                                                        core->options_.resource_manager.runner);
  }
  {
    std::lock_guard<std::mutex> l(core->mu_);
    WriteScope w(core.get());
    DET_RETURN_IF_ERROR(core->LoadFromStore());
    // Unfinished saves of trials that no allocation runs (a run that died
    // mid-save, e.g. on a full disk); trials still running are left alone.
    std::set<std::string> dirs;  // experiments often share one: each scanned once
    for (const auto& [id, exp] : core->experiments_) dirs.insert(exp->checkpoint_dir);
    for (const std::string& dir : dirs) core->RemoveStaleCheckpointTempsLocked(dir, 0);
  }
  if (core->options_.background_thread) {
    core->background_ = std::thread([c = core.get()] { c->BackgroundLoop(); });
  }
  return core;
}

MasterCore::MasterCore(MasterOptions options, std::unique_ptr<Store> store)
    : options_(std::move(options)),
      clock_(options_.clock),
      store_(std::move(store)),
      artifacts_((fs::path(options_.data_dir) / "artifacts").string()),
      started_mono_ms_(clock_->MonotonicMs()),
      started_wall_ms_(clock_->WallMs()) {}

MasterCore::~MasterCore() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    for (auto& [id, agent] : agents_) {
      if (agent->session) agent->session->Close();
    }
  }
  stop_cv_.notify_all();
  preempt_cv_.notify_all();
  rendezvous_cv_.notify_all();
  if (background_.joinable()) background_.join();
}

MasterCore::WriteScope::~WriteScope() {
  if (!done_) Commit().IgnoreError();
}

absl::Status MasterCore::WriteScope::Commit() {
  if (done_) return absl::FailedPreconditionError("WriteScope committed twice");
  done_ = true;
  std::vector<std::pair<std::string, agentv1::MasterMessage>> outbox;
  outbox.swap(core_->agent_outbox_);
  absl::Status st = txn_->Commit();
  txn_.reset();
  if (!st.ok()) {
    // The database does not know what these messages would start or stop:
    // an agent must not act on them.
    spdlog::error("committing the master's state: {}; {} agent message(s) not sent", st.ToString(), outbox.size());
    if (!core_->reloading_) core_->ReloadLocked();
    return st;
  }
  for (auto& [agent_id, msg] : outbox) {
    auto it = core_->agents_.find(agent_id);
    if (it != core_->agents_.end() && it->second->session) it->second->session->Push(std::move(msg));
  }
  return absl::OkStatus();
}

void MasterCore::ReloadLocked() {
  spdlog::error("reloading the master's state from the database after a failed commit");
  reloading_ = true;
  experiments_.clear();
  trials_.clear();
  allocations_.clear();
  pending_.clear();
  pending_trials_.clear();
  agent_outbox_.clear();
  for (auto& [id, agent] : agents_) {
    agent->used_slots.clear();
    agent->slot_allocation.clear();
  }
  {
    WriteScope w(this);
    absl::Status st = LoadFromStore();
    if (!st.ok()) spdlog::error("reloading the master's state: {}", st.ToString());
  }
  reloading_ = false;
  preempt_cv_.notify_all();
  rendezvous_cv_.notify_all();
}

void MasterCore::SendToAgentLocked(const std::string& agent_id, agentv1::MasterMessage msg) {
  msg.set_seq(next_seq_++);
  agent_outbox_.emplace_back(agent_id, std::move(msg));
}

void MasterCore::set_trial_master_address(std::string address) {
  std::lock_guard<std::mutex> l(mu_);
  trial_master_address_ = std::move(address);
}

absl::StatusOr<apiv1::GetMasterResponse> MasterCore::GetMaster(const apiv1::GetMasterRequest&) {
  apiv1::GetMasterResponse resp;
  resp.set_version(kDetVersion);
  resp.set_cluster_name(options_.cluster_name);
  {
    std::lock_guard<std::mutex> l(mu_);
    resp.set_cluster_id(cluster_id_);
    resp.set_master_id(master_id_);
  }
  SetTime(resp.mutable_start_time(), started_wall_ms_);
  const int64_t up = MonoMs() - started_mono_ms_;
  resp.mutable_uptime()->set_seconds(up / 1000);
  resp.mutable_uptime()->set_nanos(static_cast<int32_t>((up % 1000) * 1000000));
  resp.set_max_request_bytes(options_.max_request_bytes());
  resp.set_trial_abi_version(static_cast<int32_t>(kTrialAbiVersion));
  return resp;
}

bool MasterCore::Ping(std::chrono::milliseconds wait) { return ping_probe_.Probe(wait); }

absl::StatusOr<ExperimentRuntime*> MasterCore::FindExperiment(int64_t id) {
  auto it = experiments_.find(id);
  if (it == experiments_.end()) return absl::NotFoundError(absl::StrCat("experiment ", id, " not found"));
  return it->second.get();
}

absl::StatusOr<TrialRuntime*> MasterCore::FindTrial(int64_t id) {
  auto it = trials_.find(id);
  if (it == trials_.end()) return absl::NotFoundError(absl::StrCat("trial ", id, " not found"));
  return it->second.get();
}

bool TokenMatches(const AllocationRuntime& alloc, const std::string& token) {
  // Both are 64 hex digits: the compare takes the same time for any token.
  return AuthCore::ConstantTimeEquals(Sha256Hex(token), alloc.token_sha256);
}

absl::StatusOr<AllocationRuntime*> MasterCore::Authorize(const std::string& allocation_id, const std::string& token) {
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) return absl::NotFoundError(absl::StrCat("allocation '", allocation_id, "' not found"));
  if (!TokenMatches(*it->second, token)) {
    return absl::PermissionDeniedError(absl::StrCat("bad allocation token for '", allocation_id, "'"));
  }
  return it->second.get();
}

void MasterCore::SetTrialState(TrialRuntime& trial, const std::string& state) {
  const bool ends = Terminal(state) && !Terminal(trial.row.state);
  trial.row.state = state;
  if (auto it = experiments_.find(trial.row.experiment_id); it != experiments_.end()) {
    it->second->terminal_summary.reset();
  }
  if (ends) {
    trial.row.ended_ms = WallMs();
    // Its checkpoints are now subject to the experiment's GC policy.
    auto eit = experiments_.find(trial.row.experiment_id);
    if (eit != experiments_.end()) eit->second->gc_pending = true;
    stop_cv_.notify_all();
  }
  nlohmann::json seq = {{"searcher_target", trial.searcher_target},
                        {"close_requested", trial.close_requested},
                        {"last_validation", trial.last_validation},
                        {"last_checkpoint", trial.last_checkpoint},
                        // A checkpoint owed since a validation (checkpoint_policy, pbt's round end):
                        // still owed after a master restart (a pbt child waits for it).
                        {"policy_checkpoint_at", trial.policy_checkpoint_at},
                        {"next_op_id", trial.next_op_id},
                        {"killed", trial.killed},
                        {"exit_completed", trial.exit_completed},
                        {"invalid_hp", trial.invalid_hp},
                        {"error_message", trial.error_message}};
  if (trial.time_metric_value) seq["time_metric_value"] = *trial.time_metric_value;
  trial.row.sequencer_state_json = seq.dump();
  absl::Status st = store_->UpdateTrial(trial.row);
  if (!st.ok()) spdlog::error("saving trial {}: {}", trial.row.id, st.ToString());
}

void MasterCore::SetExperimentState(ExperimentRuntime& exp, const std::string& state) {
  exp.row.state = state;
  exp.terminal_summary.reset();
  if (Terminal(state)) exp.row.ended_ms = WallMs();
  if (exp.searcher) exp.row.progress = exp.searcher->Progress();
  absl::Status st = store_->UpdateExperiment(exp.row);
  if (!st.ok()) spdlog::error("saving experiment {}: {}", exp.row.id, st.ToString());
  spdlog::info("experiment {} is {}", exp.row.id, state);
}

void MasterCore::TrialLogLocked(int64_t trial_id, const std::string& allocation_id, const std::string& message) {
  TaskLogRow r;
  r.trial_id = trial_id;
  r.allocation_id = allocation_id;
  r.time_ms = WallMs();
  r.level = "LOG_LEVEL_WARNING";
  r.stream = "system";
  r.message = message;
  absl::Status st = store_->InsertTaskLogs({r});
  if (!st.ok()) spdlog::error("trial {}: storing a log line: {}", trial_id, st.ToString());
}

}  // namespace det::master
