// MasterCore: allocations, from the scheduling request to the end of their
// last process, and what their end means for the trial (done, resumed,
// restarted or failed).
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/sha256.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"
#include "master/core/trial_states.h"

namespace det::master {
namespace {

// The trial id of an allocation id "trial-<id>.<run>.<hex>" (0 if none).
// Where a trial that runs again starts, for the log: never "its latest
// checkpoint" when it has none.
std::string RestartPoint(const TrialRuntime& trial) {
  return trial.row.latest_checkpoint_uuid.empty() ? "from the beginning (no checkpoint yet)"
                                                  : "from its latest checkpoint";
}

int64_t TrialIdOfAllocation(const std::string& allocation_id) {
  long long id = 0;
  return std::sscanf(allocation_id.c_str(), "trial-%lld.", &id) == 1 ? id : 0;
}

// The scheduling knobs of `exp` on its request (read at every pass).
void SetJobKnobs(const ExperimentRuntime& exp, SchedRequest* r) {
  r->priority = exp.priority;
  r->weight = exp.weight;
  r->max_slots = exp.max_slots;
  r->queue_position = exp.queue_position;
}

// What runs, as the scheduler sees it: slots, placements, the job's knobs
// now, start order, progress, and whether it is already stopping.
std::vector<SchedRunning> SchedRunningOf(const std::map<std::string, std::unique_ptr<AllocationRuntime>>& allocations,
                                         const std::map<int64_t, std::unique_ptr<ExperimentRuntime>>& experiments) {
  std::vector<SchedRunning> running;
  running.reserve(allocations.size());
  for (const auto& [id, alloc] : allocations) {
    SchedRunning r;
    r.allocation_id = id;
    r.group_id = alloc->experiment_id;
    r.resource_pool = "default";
    for (const auto& p : alloc->placements) r.slots += static_cast<int>(p.slots.size());
    r.placements = alloc->placements;
    auto exp = experiments.find(alloc->experiment_id);
    if (exp != experiments.end()) {
      r.resource_pool = exp->second->config.resources.resource_pool;
      r.priority = exp->second->priority;
      r.weight = exp->second->weight;
    }
    r.start_order = alloc->start_order;
    r.preemptible = alloc->made_progress;
    r.stopping = alloc->preempt || alloc->kill_sent || alloc->stop_requested_mono_ms != 0;
    running.push_back(std::move(r));
  }
  return running;
}

}  // namespace

void MasterCore::RequestAllocation(ExperimentRuntime& exp, TrialRuntime& trial) {
  if (!trial.allocation_id.empty()) return;
  // A trial the searcher has nothing for waits without a slot.
  if (trial.searcher_target == 0 && !trial.close_requested) return;
  // Paused on its own (PauseTrial): waits for ActivateTrial.
  if (trial.row.state == kPaused) return;
  // pbt: a child waits for its parent's checkpoint (pbt_lineage.cc).
  if (AwaitsParentCheckpointLocked(trial)) return;
  if (pending_trials_.count(trial.row.id) != 0) return;
  SchedRequest req;
  req.allocation_id = absl::StrCat("trial-", trial.row.id, ".", trial.row.run_id + 1, ".", RandomHex(4));
  req.group_id = exp.row.id;
  req.resource_pool = exp.config.resources.resource_pool;
  req.slots = static_cast<int>(exp.config.resources.slots_per_trial);
  SetJobKnobs(exp, &req);
  req.submit_order = ++submit_order_;
  pending_.push_back(req);
  pending_trials_.insert(trial.row.id);
}

void MasterCore::ErasePendingIf(const std::function<bool(const SchedRequest&)>& drop) {
  auto end = std::remove_if(pending_.begin(), pending_.end(), [&](const SchedRequest& r) {
    if (!drop(r)) return false;
    pending_trials_.erase(TrialIdOfAllocation(r.allocation_id));
    return true;
  });
  pending_.erase(end, pending_.end());
}

void MasterCore::ScheduleLocked() {
  if (pending_.empty()) return;
  // Slurm queues and places the jobs itself (slurm_allocations.cc).
  if (options_.resource_manager.slurm_managed()) return StartSlurmAllocationsLocked();
  std::vector<SchedAgent> agents;
  for (const auto& [id, a] : agents_) {
    // An agent still running processes the master gave up on has slots
    // taken that the master cannot name: nothing goes there until they end.
    if (!a->connected || !a->zombies.empty()) continue;
    SchedAgent s;
    s.id = id;
    s.resource_pool = a->row.resource_pool;
    s.total_slots = static_cast<int>(a->devices.size());
    s.enabled = a->row.enabled;
    for (const auto& d : a->devices) {
      if (a->used_slots.count(d.id()) == 0) s.free_slots.push_back(d.id());
    }
    agents.push_back(std::move(s));
  }
  ApplyAgentControlLocked(&agents);  // disabled agents and slots, pool max_slots (agent_control.cc)
  // The job knobs as they are now: UpdateJob changes them between passes.
  for (SchedRequest& r : pending_) {
    auto eit = experiments_.find(r.group_id);
    if (eit != experiments_.end()) SetJobKnobs(*eit->second, &r);
    // A pool declared with preemption: false never preempts for its jobs.
    const ResourcePoolConfig* pool = options_.resource_pools.Find(r.resource_pool);
    r.may_preempt = pool == nullptr || pool->preemption;
  }
  const std::vector<SchedRunning> running = SchedRunningOf(allocations_, experiments_);
  SchedDecision decision = Decide(agents, pending_, running);
  for (const Preemption& p : decision.preempt) {
    auto ait = allocations_.find(p.allocation_id);
    if (ait == allocations_.end()) continue;
    AllocationRuntime& alloc = *ait->second;
    const std::string why = absl::StrCat("preempted for experiment ", p.for_group_id, " (priority ", p.for_priority,
                                         p.fair_share ? ", fair share" : "", ")");
    spdlog::info("trial {}: allocation {} {}", alloc.trial_id, alloc.id, why);
    TrialLogLocked(alloc.trial_id, alloc.id, absl::StrCat("[det-master] trial ", alloc.trial_id, " ", why));
    auto tit = trials_.find(alloc.trial_id);
    if (tit != trials_.end()) {
      tit->second->preemption = absl::StrCat(why, ": checkpoints, then waits for slots to resume from it");
    }
    RequestStopLocked(alloc);
  }
  if (decision.start.empty()) return;
  // One pass over pending_, not a search per start: 4,000 starts among
  // 100,000 requests were 400 million comparisons.
  std::unordered_map<std::string_view, const Assignment*> starting;
  for (const Assignment& a : decision.start) starting.emplace(a.allocation_id, &a);
  std::vector<std::pair<int64_t, const Assignment*>> started;  // (experiment id, assignment)
  ErasePendingIf([&](const SchedRequest& r) {
    auto it = starting.find(r.allocation_id);
    if (it == starting.end()) return false;
    started.emplace_back(r.group_id, it->second);
    return true;
  });
  // In the order decided.
  std::unordered_map<const Assignment*, int64_t> exp_of;
  for (const auto& [exp_id, a] : started) exp_of.emplace(a, exp_id);
  for (const Assignment& a : decision.start) {
    auto e = exp_of.find(&a);
    if (e == exp_of.end()) continue;
    auto eit = experiments_.find(e->second);
    auto tit = trials_.find(TrialIdOfAllocation(a.allocation_id));
    if (eit == experiments_.end() || tit == trials_.end()) continue;
    StartAllocationLocked(*eit->second, *tit->second, a);
  }
}

void MasterCore::StartAllocationLocked(ExperimentRuntime& exp, TrialRuntime& trial, const Assignment& a) {
  const int64_t trial_id = trial.row.id;
  const absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> run_as_or = RunAsOfOwnerLocked(exp.row.owner);
  if (!run_as_or.ok()) return RefuseAllocationLocked(exp, trial, run_as_or.status());
  const std::optional<std::pair<int64_t, int64_t>>& run_as = *run_as_or;
  auto alloc = std::make_unique<AllocationRuntime>();
  alloc->id = a.allocation_id;
  const std::string token = RandomHex(16);
  alloc->token_sha256 = Sha256Hex(token);
  alloc->trial_id = trial_id;
  alloc->experiment_id = exp.row.id;
  alloc->placements = a.placements;
  alloc->created_ms = WallMs();
  alloc->created_mono_ms = MonoMs();
  alloc->start_order = ++submit_order_;
  trial.allocation_id = alloc->id;
  trial.preemption.clear();
  trial.row.run_id += 1;
  trial.current_op.reset();
  trial.exit_completed = false;
  SetTrialState(trial, trial.row.state);
  FillRendezvousLocked(*alloc);
  int rank = 0;
  for (const auto& placement : a.placements) {
    auto ait = agents_.find(placement.agent_id);
    if (ait == agents_.end()) continue;
    AgentRuntime& agent = *ait->second;
    agentv1::MasterMessage msg;
    auto* start = msg.mutable_start_allocation();
    start->set_allocation_id(alloc->id);
    start->set_task_id(absl::StrCat("trial-", trial_id));
    start->set_trial_id(trial_id);
    start->set_experiment_id(exp.row.id);
    start->set_allocation_token(token);
    start->mutable_trial_so()->set_sha256(exp.row.trial_so_sha256);
    start->mutable_trial_so()->set_size_bytes(artifacts_.Size(exp.row.trial_so_sha256).value_or(0));
    start->set_trial_so_name(artifacts_.Name(exp.row.trial_so_sha256));
    start->set_config_yaml(exp.row.config_yaml);
    start->set_master_address(trial_master_address_);
    start->set_checkpoint_storage_path(exp.checkpoint_dir);
    if (run_as) {
      start->set_run_as_uid(static_cast<uint32_t>(run_as->first));
      start->set_run_as_gid(static_cast<uint32_t>(run_as->second));
      start->set_warm_start_source_path(ForeignWarmStartLocked(exp, trial));
    }
    for (const auto& [k, v] : exp.config.environment.environment_variables) (*start->mutable_env())[k] = v;
    int local_rank = 0;
    for (int slot : placement.slots) {
      agent.used_slots.insert(slot);
      agent.slot_allocation[slot] = alloc->id;
      auto* proc = start->add_processes();
      proc->set_rank(rank++);
      proc->set_local_rank(local_rank++);
      proc->add_device_ids(slot);
      alloc->processes++;
    }
    *start->mutable_rendezvous() = alloc->rendezvous;
    // Sent once the allocation is stored (WriteScope).
    SendToAgentLocked(agent.row.id, std::move(msg));
  }
  spdlog::info("trial {}: allocation {} placed on {} process(es)", trial_id, alloc->id, alloc->processes);
  SaveAllocation(*alloc);
  allocations_[alloc->id] = std::move(alloc);
}

absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> MasterCore::RunAsOfOwnerLocked(
    const std::string& owner) {
  const bool range = options_.trial_uid_first > 0;
  if (owner.empty()) {
    if (!range) return std::nullopt;
    return absl::FailedPreconditionError("the experiment has no owner, so no uid of --trial-uid-range to run as");
  }
  absl::StatusOr<std::pair<int64_t, int64_t>> ids =
      store_->AgentIdsOfUser(owner, options_.trial_uid_first, options_.trial_uid_last);
  // Without a range an unknown user (none linked) runs as the agents'
  // --trial-user. Any other failure refuses: the user may be linked or
  // need a range uid, and the agent's fallback may be root.
  if (!range && ids.status().code() == absl::StatusCode::kNotFound) return std::nullopt;
  if (!ids.ok()) return ids.status();
  if (ids->first == 0 && ids->second == 0 && !range) return std::nullopt;
  if (ids->first <= 0 || ids->first >= UINT32_MAX || ids->second <= 0 || ids->second >= UINT32_MAX ||
      ids->first == static_cast<int64_t>(geteuid()) || ids->second == static_cast<int64_t>(getegid())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "user '", owner, "' is recorded with uid ", ids->first, " gid ", ids->second, ", which no trial may run as "
        "(root's, the master's own or out of range): link the user to another uid (det-cli user link-with-agent-user)"));
  }
  return std::optional<std::pair<int64_t, int64_t>>(*ids);
}

// No uid for the owner of `trial` (RunAsOfOwnerLocked failed): the trial is
// not started; it ends in ERROR with `why` in its log and state reason, and
// the experiment goes on as after any trial's error.
void MasterCore::RefuseAllocationLocked(ExperimentRuntime& exp, TrialRuntime& trial, const absl::Status& why) {
  const std::string msg = absl::StrCat("trial ", trial.row.id, " not started: no uid of its own for user '",
                                       exp.row.owner, "': ", why.message(), "; it never runs as the agent's "
                                       "--trial-user or root when a uid range is configured or the user is linked: ERROR");
  spdlog::error("{}", msg);
  TrialLogLocked(trial.row.id, "", absl::StrCat("[det-master] ", msg));
  trial.error_message = msg;
  trial.current_op.reset();
  SetTrialState(trial, kError);
  absl::Status st = ApplySearcherOps(exp, exp.searcher->TrialExitedEarly(trial.row.request_id, ExitedReason::kErrored));
  if (!st.ok()) spdlog::error("experiment {}: {}", exp.row.id, st.ToString());
  MaybeFinishExperiment(exp);
}

std::string MasterCore::ForeignWarmStartLocked(const ExperimentRuntime& exp, const TrialRuntime& trial) {
  if (exp.row.warm_start_checkpoint_uuid.empty() || !trial.row.latest_checkpoint_uuid.empty()) return "";
  auto ck = store_->GetCheckpoint(exp.row.warm_start_checkpoint_uuid);
  if (!ck.ok()) return "";
  auto source = experiments_.find(ck->experiment_id);
  if (source != experiments_.end() && source->second->row.owner == exp.row.owner) return "";
  return ck->storage_path;
}

void MasterCore::KillAllocationLocked(AllocationRuntime& alloc, const std::string& reason) {
  if (alloc.slurm) return CancelSlurmJobLocked(alloc);  // scancel: SIGTERM, then SIGKILL after Slurm's KillWait
  alloc.kill_sent = true;
  if (alloc.stop_requested_mono_ms == 0) alloc.stop_requested_mono_ms = MonoMs();
  for (const auto& placement : alloc.placements) {
    agentv1::MasterMessage msg;
    msg.mutable_kill_allocation()->set_allocation_id(alloc.id);
    msg.mutable_kill_allocation()->set_grace_period_seconds(0);
    msg.mutable_kill_allocation()->set_reason(reason);
    SendToAgentLocked(placement.agent_id, std::move(msg));
  }
}

void MasterCore::RequestStopLocked(AllocationRuntime& alloc) {
  alloc.preempt = true;
  if (alloc.stop_requested_mono_ms == 0) alloc.stop_requested_mono_ms = MonoMs();
  preempt_cv_.notify_all();
}

void MasterCore::SaveAllocation(const AllocationRuntime& alloc) {
  AllocationRow row;
  row.id = alloc.id;
  row.trial_id = alloc.trial_id;
  row.experiment_id = alloc.experiment_id;
  row.token = alloc.token_sha256;
  row.placements_json = PlacementsJson(alloc.placements).dump();
  row.processes = alloc.processes;
  row.terminated = alloc.terminated;
  row.created_ms = alloc.created_ms;
  row.slurm_job_id = alloc.slurm_job_id;
  absl::Status st = store_->UpsertAllocation(row);
  if (!st.ok()) spdlog::error("saving allocation {}: {}", alloc.id, st.ToString());
}

void MasterCore::EndAllocation(AllocationRuntime& alloc) {
  rendezvous_cv_.notify_all();  // its ranks' rendezvous waits end
  for (const auto& placement : alloc.placements) {
    auto ait = agents_.find(placement.agent_id);
    if (ait == agents_.end()) continue;
    // Its last log lines may still be on their way from this agent.
    auto& recent = ait->second->recent_allocations;
    recent.emplace_back(alloc.id, alloc.trial_id);
    if (recent.size() > kRecentAllocations) recent.pop_front();
    for (int slot : placement.slots) {
      ait->second->used_slots.erase(slot);
      ait->second->slot_allocation.erase(slot);
    }
  }
}

void MasterCore::OnProcessTerminated(const std::string& allocation_id, int exit_code, const std::string& why,
                                     bool lost) {
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) return;
  AllocationRuntime& alloc = *it->second;
  alloc.terminated++;
  if (lost || exit_code == kExitMasterUnreachable) alloc.lost = true;
  if (!lost && (exit_code == kExitConfigError || exit_code == kExitLibraryError)) alloc.deterministic = true;
  if (!lost && exit_code == kExitTrialSetupError) alloc.setup_failed = true;
  if (exit_code != 0 && !alloc.failed) {
    alloc.failed = true;
    alloc.failed_unasked = alloc.stop_requested_mono_ms == 0;
    alloc.failure = why;
    if (alloc.terminated < alloc.processes) KillAllocationLocked(alloc, "another rank failed");
  }
  if (alloc.terminated < alloc.processes) {
    SaveAllocation(alloc);
    return;
  }

  EndAllocation(alloc);
  absl::Status deleted = store_->DeleteAllocation(allocation_id);
  if (!deleted.ok()) spdlog::error("deleting allocation {}: {}", allocation_id, deleted.ToString());
  std::unique_ptr<AllocationRuntime> done = std::move(it->second);
  allocations_.erase(it);
  auto tit = trials_.find(done->trial_id);
  auto eit = experiments_.find(done->experiment_id);
  if (tit == trials_.end() || eit == experiments_.end()) return;
  TrialRuntime& trial = *tit->second;
  ExperimentRuntime& exp = *eit->second;
  trial.allocation_id.clear();
  trial.current_op.reset();
  std::vector<SearcherOp> ops = SettleTrialLocked(exp, trial, *done);
  absl::Status st = ApplySearcherOps(exp, std::move(ops));
  if (!st.ok()) spdlog::error("experiment {}: {}", exp.row.id, st.ToString());
  RemoveStaleCheckpointTempsLocked(exp.checkpoint_dir, trial.row.id);  // the run ended: its saves are over
  MaybeFinishExperiment(exp);
}

void MasterCore::RemoveStaleCheckpointTempsLocked(const std::string& dir, int64_t only) {
  if (absl::StartsWith(dir, "s3://")) return;  // s3 storage: trials stage saves in private directories
  auto removable = [&](int64_t id) {
    if (only != 0 && id != only) return false;
    auto t = trials_.find(id);
    return t != trials_.end() && t->second->allocation_id.empty();
  };
  absl::StatusOr<int> removed = checkpoint_roots_.RemoveStaleTemps(dir, removable);
  if (!removed.ok()) {
    spdlog::warn("unfinished checkpoint saves in {} not removed: {}", dir, removed.status().ToString());
  } else if (*removed > 0) {
    spdlog::info("removed {} unfinished checkpoint save(s) (.tmp-t*) of trials not running in {}", *removed, dir);
  }
}

std::vector<SearcherOp> MasterCore::SettleTrialLocked(ExperimentRuntime& exp, TrialRuntime& trial,
                                                      const AllocationRuntime& done) {
  // Asked to stop by the master (pause, preemption, stop timeout): however
  // the processes ended, it is not the trial's failure.
  const bool stopped = (done.preempt || done.force_killed) && !done.failed_unasked;
  auto fail = [&](const std::string& msg) { return FailTrialLocked(exp, trial, done, msg); };
  auto log_end = [&](trialv1::ExitReason reason) { LogRunEndLocked(exp, trial, done, reason); };
  std::vector<SearcherOp> ops;
  if (trial.exit_completed && !done.failed) {
    SetTrialState(trial, kCompleted);
    log_end(trialv1::EXIT_REASON_COMPLETED);
    return exp.searcher->TrialClosed(trial.row.request_id);
  }
  if (trial.killed) {
    SetTrialState(trial, kCanceled);
    log_end(trialv1::EXIT_REASON_STOPPED);
    return exp.searcher->TrialExitedEarly(trial.row.request_id, ExitedReason::kUserCanceled);
  }
  if (trial.invalid_hp) {
    SetTrialState(trial, kError);
    return exp.searcher->TrialExitedEarly(trial.row.request_id, ExitedReason::kInvalidHp);
  }
  if (done.failed && done.deterministic && !done.lost && !stopped) {
    // A bad config or an unusable trial.so fails the same way every time.
    return fail(absl::StrCat("trial ", trial.row.id, " failed (", done.failure,
                             "): a configuration or library error, not retried: ERROR"));
  }
  if (done.failed && done.setup_failed && !done.lost && !stopped) return SettleSetupFailureLocked(exp, trial, done);
  trial.setup_failures = 0;
  if (!done.failed || done.lost || stopped) return ResumeTrialLocked(exp, trial, done);
  if (trial.row.restarts >= exp.config.max_restarts) {
    return fail(absl::StrCat("trial ", trial.row.id, " failed (", done.failure, "); ", trial.row.restarts,
                             " restart(s) used of max_restarts ", exp.config.max_restarts, ": ERROR"));
  }
  trial.row.restarts += 1;
  WarnTrialLocked(trial, done,
                  absl::StrCat("trial ", trial.row.id, " failed (", done.failure, "); restart ", trial.row.restarts,
                               " of ", exp.config.max_restarts, " ", RestartPoint(trial)));
  SetTrialState(trial, trial.row.state);
  if (exp.row.state == kActive) RequestAllocation(exp, trial);
  return ops;
}

// Paused, preempted, or lost with its agent or master: resumes from its
// latest checkpoint without counting a restart.
std::vector<SearcherOp> MasterCore::ResumeTrialLocked(ExperimentRuntime& exp, TrialRuntime& trial,
                                                      const AllocationRuntime& done) {
  if (done.failed) {
    WarnTrialLocked(trial, done,
                    absl::StrCat("trial ", trial.row.id, ": allocation ", done.id, " ended (", done.failure,
                                 "); it resumes ", RestartPoint(trial), " (not counted as a restart)"));
  }
  std::vector<SearcherOp> ops;
  const trialv1::ExitReason reason = StopReason(exp, trial);
  if (exp.row.state == kPaused) {
    SetTrialState(trial, kPaused);
  } else if (exp.row.state == kActive && !CompleteIfCheckpointedLocked(exp, trial, &ops)) {
    SetTrialState(trial, trial.row.state);
    RequestAllocation(exp, trial);
  }
  if (!done.failed) LogRunEndLocked(exp, trial, done, reason);
  return ops;
}

void MasterCore::WarnTrialLocked(const TrialRuntime& trial, const AllocationRuntime& done, const std::string& msg) {
  spdlog::warn("{}", msg);
  TrialLogLocked(trial.row.id, done.id, absl::StrCat("[det-master] ", msg));
}

std::vector<SearcherOp> MasterCore::FailTrialLocked(ExperimentRuntime& exp, TrialRuntime& trial,
                                                    const AllocationRuntime& done, const std::string& msg) {
  WarnTrialLocked(trial, done, msg);
  if (trial.error_message.empty()) trial.error_message = done.failure;
  SetTrialState(trial, kError);
  return exp.searcher->TrialExitedEarly(trial.row.request_id, ExitedReason::kErrored);
}

void MasterCore::LogRunEndLocked(const ExperimentRuntime& exp, const TrialRuntime& trial,
                                 const AllocationRuntime& done, trialv1::ExitReason reason) {
  const std::string line = RunEndLine(exp, trial, trial.row.state, reason);
  if (!line.empty()) TrialLogLocked(trial.row.id, done.id, line);
}

// The trial's constructor or a data loader builder threw (det-trial's exit
// code 5, e.g. a missing data file): retried once, since a file system may
// have been briefly at fault (counted as a restart, within max_restarts);
// the second such failure in a row is final, with the exception's text.
std::vector<SearcherOp> MasterCore::SettleSetupFailureLocked(ExperimentRuntime& exp, TrialRuntime& trial,
                                                             const AllocationRuntime& done) {
  trial.setup_failures += 1;
  const std::string what =
      absl::StrCat("trial ", trial.row.id, " failed (", done.failure, ") in its constructor or a data loader builder");
  if (trial.setup_failures >= 2 || trial.row.restarts >= exp.config.max_restarts) {
    return FailTrialLocked(exp, trial, done,
                           absl::StrCat(what, trial.setup_failures >= 2 ? " again" : "", "; not retried (",
                                        trial.row.restarts, " restart(s) used of max_restarts ",
                                        exp.config.max_restarts, "): ERROR"));
  }
  trial.row.restarts += 1;
  WarnTrialLocked(trial, done,
                  absl::StrCat(what, "; retried once, as a file system may have been briefly at fault: restart ",
                               trial.row.restarts, " of ", exp.config.max_restarts, " ", RestartPoint(trial)));
  SetTrialState(trial, trial.row.state);
  if (exp.row.state == kActive) RequestAllocation(exp, trial);
  return {};
}

void MasterCore::GiveUpAllocationLocked(const std::string& allocation_id, const std::string& except_agent,
                                        const std::string& why) {
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) return;
  AllocationRuntime& alloc = *it->second;
  // Ranks on other agents may still run: kill them and keep those agents'
  // slots taken until their heartbeats stop listing the allocation.
  for (const auto& p : alloc.placements) {
    if (p.agent_id == except_agent) continue;
    auto ait = agents_.find(p.agent_id);
    if (ait == agents_.end()) continue;
    ait->second->zombies.insert(allocation_id);
    agentv1::MasterMessage msg;
    msg.mutable_kill_allocation()->set_allocation_id(allocation_id);
    msg.mutable_kill_allocation()->set_grace_period_seconds(0);
    msg.mutable_kill_allocation()->set_reason(why);
    SendToAgentLocked(p.agent_id, std::move(msg));
  }
  int remaining = alloc.processes - alloc.terminated;
  for (int i = 0; i < std::max(remaining, 1) && allocations_.count(allocation_id); ++i) {
    OnProcessTerminated(allocation_id, 137, why, /*lost=*/true);
  }
}

}  // namespace det::master
