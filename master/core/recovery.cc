// MasterCore: reloading the state after a master restart. Experiments and
// trials come back from the store; allocations that were running wait for
// their agents to re-register (and reattach); every other unfinished trial
// resumes from its latest checkpoint without counting a restart.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/batch_lengths.h"
#include "common/safe_path.h"
#include "common/proto_json.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/job_queue.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"
#include "master/core/trial_lengths.h"

namespace det::master {

absl::Status MasterCore::LoadFromStore() {
  DET_ASSIGN_OR_RETURN(std::optional<std::string> id, store_->GetValue("cluster_id"));
  if (id) {
    cluster_id_ = *id;
  } else {
    cluster_id_ = RandomHex(16);
    DET_RETURN_IF_ERROR(store_->PutValue("cluster_id", cluster_id_));
  }
  if (master_id_.empty()) master_id_ = RandomHex(16);
  ExperimentFilter all;
  DET_ASSIGN_OR_RETURN(std::vector<ExperimentRow> rows, store_->ListExperiments(all));
  for (const auto& row : rows) DET_RETURN_IF_ERROR(LoadExperimentLocked(row));
  DET_RETURN_IF_ERROR(RecoverAllocations());
  ResumeTrialsLocked();
  return absl::OkStatus();
}

namespace {

// The config experiment `row` was created with: its stored resolved config
// (`config_json`, every default filled in as the master that created it
// chose, the experiment seed included), so that a restarted master, a newer
// one with other defaults too, resumes the very search that was started.
// The YAML is parsed only where that JSON does not parse (a row of an older
// master's format), with a warning naming the experiment; its defaults are
// then this master's. The YAML stays the text the trials receive.
absl::StatusOr<ExperimentConfig> StoredExperimentConfig(const ExperimentRow& row) {
  const std::string source = absl::StrCat("experiment ", row.id);
  nlohmann::json stored = nlohmann::json::parse(row.config_json, nullptr, false);
  absl::Status json_error = absl::InvalidArgumentError("config_json is not a JSON object");
  if (stored.is_object()) {
    absl::StatusOr<ExperimentConfig> config = ParseExperimentConfigJson(stored, source);
    if (config.ok()) {
      config->yaml_text = row.config_yaml;
      return config;
    }
    json_error = config.status();
  }
  spdlog::warn("{}: its stored resolved config does not parse ({}); re-parsing its YAML, with this master's defaults",
               source, json_error.ToString());
  return ParseExperimentConfig(row.config_yaml, source);
}

}  // namespace

absl::Status MasterCore::LoadExperimentLocked(const ExperimentRow& row) {
  auto config = StoredExperimentConfig(row);
  if (!config.ok()) {
    spdlog::warn("experiment {}: stored config no longer parses: {}", row.id, config.status().ToString());
    return absl::OkStatus();
  }
  auto exp = std::make_unique<ExperimentRuntime>();
  exp->row = row;
  exp->config = *std::move(config);
  SetJobKnobsFromConfig(*exp);
  ApplyPoolDefaultsLocked(*exp);  // before stored job overrides
  ApplyStoredJobKnobs(*exp);  // what UpdateJob stored (job_queue.h)
  exp->checkpoint_dir = ExperimentCheckpointDir(exp->config, options_.checkpoint_root);
  nlohmann::json snap = nlohmann::json::parse(row.searcher_state_json, nullptr, false);
  // Snapshots of older masters in records/epochs keep their batch plan.
  exp->searcher_length = ExperimentSearcherLength(exp->config, snap);
  auto searcher = snap.is_object() ? Searcher::Restore(exp->config, exp->searcher_length.max, snap)
                                   : Searcher::Create(exp->config, exp->searcher_length.max);
  if (!searcher.ok()) {
    spdlog::warn("experiment {}: cannot restore its searcher: {}", row.id, searcher.status().ToString());
    return absl::OkStatus();
  }
  exp->searcher = std::make_unique<Searcher>(*std::move(searcher));
  exp->search_done = exp->searcher->shutdown();
  DET_ASSIGN_OR_RETURN(std::vector<TrialRow> trials, store_->ListTrials(row.id));
  for (auto& t : trials) {
    auto tr = std::make_unique<TrialRuntime>();
    tr->row = t;
    nlohmann::json seq = nlohmann::json::parse(t.sequencer_state_json, nullptr, false);
    if (seq.is_object()) {
      tr->searcher_target = seq.value("searcher_target", int64_t{0});
      tr->close_requested = seq.value("close_requested", false);
      tr->last_validation = seq.value("last_validation", int64_t{0});
      tr->last_checkpoint = seq.value("last_checkpoint", int64_t{0});
      tr->policy_checkpoint_at = seq.value("policy_checkpoint_at", int64_t{-1});
      tr->next_op_id = seq.value("next_op_id", int64_t{1});
      tr->killed = seq.value("killed", false);
      tr->exit_completed = seq.value("exit_completed", false);
      tr->invalid_hp = seq.value("invalid_hp", false);
      tr->error_message = seq.value("error_message", std::string());
      if (seq.contains("time_metric_value") && seq["time_metric_value"].is_number()) {
        tr->time_metric_value = seq["time_metric_value"].get<double>();
      }
    }
    absl::Status lengths = InitTrialLengths(*exp, *tr);
    if (!lengths.ok()) spdlog::warn("experiment {}: {}", row.id, lengths.ToString());
    // The batches are not stored: each trial converts its pending target again.
    if (tr->searcher_target > 0 && !SetSearcherTarget(*exp, *tr, tr->searcher_target).ok()) {
      spdlog::warn("experiment {}: trial {}: its searcher target no longer converts", row.id, t.id);
    }
    exp->trial_by_request[t.request_id] = t.id;
    trials_[t.id] = std::move(tr);
  }
  exp->gc_pending = true;
  if (!row.owner.empty()) {
    auto owner = store_->GetUserByName(row.owner);
    if (owner.ok()) exp->owner_id = owner->id;
  }
  experiments_[row.id] = std::move(exp);
  return absl::OkStatus();
}

namespace {

// The agent of a recovered allocation as the master last knew it; it has
// heartbeat_timeout_ms from `now_mono_ms` to re-register.
std::unique_ptr<AgentRuntime> RecoveredAgent(const std::string& id, const std::vector<AgentRow>& rows,
                                             int64_t now_mono_ms) {
  auto agent = std::make_unique<AgentRuntime>();
  agent->row.id = id;
  for (const auto& r : rows) {
    if (r.id != id) continue;
    agent->row = r;
    nlohmann::json devices = nlohmann::json::parse(r.devices_json, nullptr, false);
    if (!devices.is_array()) continue;
    for (const auto& d : devices) {
      ::det::api::v1::Device device;
      if (JsonToMessage(d.dump(), &device).ok()) agent->devices.push_back(device);
    }
  }
  agent->last_heartbeat_mono_ms = now_mono_ms;
  agent->last_heartbeat_ms = agent->row.last_seen_ms;
  return agent;
}

}  // namespace

absl::Status MasterCore::RecoverAllocations() {
  DET_ASSIGN_OR_RETURN(std::vector<AllocationRow> rows, store_->ListAllocations());
  if (rows.empty()) return absl::OkStatus();
  DET_ASSIGN_OR_RETURN(std::vector<AgentRow> agent_rows, store_->ListAgents());
  const int64_t now = MonoMs();
  for (const AllocationRow& row : rows) {
    auto tit = trials_.find(row.trial_id);
    auto eit = experiments_.find(row.experiment_id);
    std::vector<SlotAssignment> placements;
    if (tit == trials_.end() || eit == experiments_.end() || Terminal(tit->second->row.state) ||
        !tit->second->allocation_id.empty() || !ParsePlacements(row.placements_json, &placements)) {
      DET_RETURN_IF_ERROR(store_->DeleteAllocation(row.id));
      continue;
    }
    TrialRuntime& trial = *tit->second;
    ExperimentRuntime& exp = *eit->second;
    auto alloc = std::make_unique<AllocationRuntime>();
    alloc->id = row.id;
    alloc->token_sha256 = IsSha256Hex(row.token) ? row.token : Sha256Hex(row.token);
    alloc->trial_id = row.trial_id;
    alloc->experiment_id = row.experiment_id;
    alloc->placements = placements;
    alloc->processes = static_cast<int>(row.processes);
    alloc->terminated = static_cast<int>(row.terminated);
    alloc->created_ms = row.created_ms;
    alloc->created_mono_ms = now;
    if (exp.row.state != kActive || trial.killed || trial.row.state == kPaused) {
      alloc->preempt = true;
      alloc->stop_requested_mono_ms = now;
    }
    // A Slurm job: found again through squeue (RunSlurmPass), no agent.
    if (options_.resource_manager.slurm_managed() && placements.size() == 1 &&
        placements[0].agent_id == kSlurmAgentId) {
      alloc->slurm = true;
      alloc->slurm_job_id = row.slurm_job_id;
      alloc->slurm_state = "PENDING";
      alloc->slurm_job_dir = JoinUnder(options_.resource_manager.slurm.job_storage_root, row.id, "id").value_or("");
      alloc->rendezvous.set_world_size(alloc->processes);
      for (int i = 0; i < alloc->processes; ++i) alloc->rendezvous.add_ranks()->set_rank(i);
      placements.clear();
    }
    for (const auto& p : placements) {
      auto& agent = agents_[p.agent_id];
      if (!agent) agent = RecoveredAgent(p.agent_id, agent_rows, now);
      for (int slot : p.slots) {
        agent->used_slots.insert(slot);
        agent->slot_allocation[slot] = row.id;
      }
    }
    trial.allocation_id = row.id;
    spdlog::info("trial {}: allocation {} waits for {}", trial.row.id, row.id,
                 alloc->slurm ? "squeue to show its Slurm job" : "its agent(s) to re-register");
    allocations_[row.id] = std::move(alloc);
  }
  return absl::OkStatus();
}

void MasterCore::ResumeTrialsLocked() {
  for (auto& [id, exp] : experiments_) {
    std::vector<SearcherOp> ops;
    for (const auto& [req, tid] : exp->trial_by_request) {
      TrialRuntime& t = *trials_.at(tid);
      if (Terminal(t.row.state) || !t.allocation_id.empty()) continue;
      if (t.killed || Stopping(exp->row.state)) {
        t.killed = true;
        SetTrialState(t, kCanceled);
        auto more = exp->searcher->TrialExitedEarly(t.row.request_id, ExitedReason::kUserCanceled);
        ops.insert(ops.end(), more.begin(), more.end());
      } else if (exp->row.state == kPaused) {
        if (t.row.state != kPaused) SetTrialState(t, kPaused);
      } else if (exp->row.state == kActive) {
        if (!CompleteIfCheckpointedLocked(*exp, t, &ops)) RequestAllocation(*exp, t);
      }
    }
    ResolvePbtChildrenLocked(*exp);  // children whose parent checkpointed before the restart
    if (!ops.empty()) {
      absl::Status st = ApplySearcherOps(*exp, std::move(ops));
      if (!st.ok()) spdlog::error("experiment {}: {}", id, st.ToString());
    }
    MaybeFinishExperiment(*exp);
  }
}

}  // namespace det::master
