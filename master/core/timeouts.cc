// MasterCore: the background pass. Every time-based policy is here and reads
// the injected clock (MasterOptions::clock): agents that missed their
// heartbeats are lost, stops that take too long become SIGKILLs, rendezvous
// that never complete fail; then pending allocations are scheduled and the
// checkpoint GC policy (checkpoint_gc.h) is applied.
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "master/core/checkpoint_gc.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/store/store_events.h"

namespace det::master {

void MasterCore::BackgroundLoop() {
  std::unique_lock<std::mutex> l(mu_);
  bool deleting = false;
  while (!stop_) {
    // While an experiment is being deleted, its next step follows at once.
    if (!deleting) stop_cv_.wait_for(l, std::chrono::milliseconds(500));
    if (stop_) break;
    std::vector<CheckpointRow> doomed;
    RetryUnrecordedStopsLocked();  // before scheduling: a stopped trial is never restarted
    {
      WriteScope w(this);
      doomed = BackgroundPassLocked();
    }
    // Deleting checkpoint files is slow disk work: not under the lock. Their
    // rows are already DELETED, so a crash here only leaves files behind.
    l.unlock();
    DeleteCheckpointDirs(doomed, CheckpointDeletion::kGc, "checkpoint GC");
    RetryS3Deletes();
    deleting = DeletionStep();
    RunSlurmPass();
    l.lock();
  }
}

void MasterCore::RunBackgroundPass() {
  std::vector<CheckpointRow> doomed;
  {
    std::lock_guard<std::mutex> l(mu_);
    RetryUnrecordedStopsLocked();  // before scheduling: a stopped trial is never restarted
    WriteScope w(this);
    doomed = BackgroundPassLocked();
  }
  DeleteCheckpointDirs(doomed, CheckpointDeletion::kGc, "checkpoint GC");
  RetryS3Deletes();
  while (DeletionStep()) {
  }
  RunSlurmPass();
}

std::vector<CheckpointRow> MasterCore::BackgroundPassLocked() {
  const int64_t now = MonoMs();
  CheckHeartbeatsLocked(now);
  CheckStopTimeoutsLocked(now);
  CheckRendezvousTimeoutsLocked(now);
  ScheduleLocked();
  std::vector<CheckpointRow> doomed;
  for (auto& [id, exp] : experiments_) {
    if (!exp->gc_pending || exp->row.state == kDeleting) continue;
    exp->gc_pending = false;
    auto paths = CollectGarbageLocked(*exp);
    doomed.insert(doomed.end(), paths.begin(), paths.end());
  }
  return doomed;
}

void MasterCore::CheckHeartbeatsLocked(int64_t now) {
  for (auto& [id, agent] : agents_) {
    if (now - agent->last_heartbeat_mono_ms <= options_.heartbeat_timeout_ms) continue;
    bool has_allocations = false;
    for (const auto& [aid, alloc] : allocations_) has_allocations |= RunsOn(*alloc, id);
    if (agent->connected || has_allocations) {
      LoseAgent(*agent, agent->connected ? "missed heartbeats" : "did not reconnect in time");
    }
  }
}

void MasterCore::CheckStopTimeoutsLocked(int64_t now) {
  // A stop (pause, cancel, kill, preemption) that is not done in time becomes
  // a SIGKILL, so that nothing hangs in STOPPING and slots come back.
  for (auto& [id, alloc] : allocations_) {
    if (alloc->stop_requested_mono_ms == 0 || alloc->force_killed ||
        now - alloc->stop_requested_mono_ms <= options_.stop_timeout_ms) {
      continue;
    }
    std::string why = absl::StrCat("did not stop within ", options_.stop_timeout_ms / 1000.0, " s; killing it");
    spdlog::warn("trial {}: allocation {} {}", alloc->trial_id, id, why);
    TrialLogLocked(alloc->trial_id, id, absl::StrCat("[det-master] allocation ", id, " ", why));
    alloc->force_killed = true;
    KillAllocationLocked(*alloc, "stop timeout");
  }
}

void MasterCore::CheckRendezvousTimeoutsLocked(int64_t now) {
  // Ranks that never reach the rendezvous (a node that cannot start its
  // process, a network that drops them) would hold every slot of the
  // allocation for ever: it fails, counted as a restart, and is killed.
  bool any = false;
  for (auto& [id, alloc] : allocations_) {
    if (alloc->rendezvous_started_mono_ms == 0 || alloc->rendezvous_timed_out ||
        static_cast<int>(alloc->rendezvous_reported.size()) >= alloc->rendezvous.ranks_size() ||
        now - alloc->rendezvous_started_mono_ms <= options_.rendezvous_timeout_ms) {
      continue;
    }
    alloc->rendezvous_timed_out = true;
    any = true;
    std::string why = absl::StrCat("only ", alloc->rendezvous_reported.size(), " of ", alloc->rendezvous.ranks_size(),
                                   " ranks reached the rendezvous within ", options_.rendezvous_timeout_ms / 1000.0,
                                   " s");
    spdlog::warn("trial {}: allocation {}: {}; killing it", alloc->trial_id, id, why);
    TrialLogLocked(alloc->trial_id, id, absl::StrCat("[det-master] allocation ", id, ": ", why, "; killing it"));
    if (!alloc->failed) {
      alloc->failed = true;
      alloc->failed_unasked = alloc->stop_requested_mono_ms == 0;
      alloc->failure = why;
    }
    KillAllocationLocked(*alloc, "rendezvous timeout");
  }
  if (any) rendezvous_cv_.notify_all();  // its waiting ranks answer at once
}

std::vector<CheckpointRow> MasterCore::CollectGarbageLocked(ExperimentRuntime& exp) {
  std::vector<CheckpointRow> doomed;
  auto rows = store_->ListCheckpoints(exp.row.id, std::nullopt);
  if (!rows.ok()) {
    spdlog::error("experiment {}: checkpoint GC: {}", exp.row.id, rows.status().ToString());
    return doomed;
  }
  CompleteCheckpointRowsLocked(&*rows);  // the searcher metric of a validation reported after its checkpoint
  const std::set<std::string> keep =
      CheckpointsToKeep(*rows, EffectiveGcPolicy(exp.config, exp.row.checkpoint_gc_policy_json),
                        exp.config.searcher.smaller_is_better);
  for (const CheckpointRow& c : *rows) {
    if (c.state != "COMPLETED" || keep.count(c.uuid)) continue;
    // Only trials that have ended: the others may still resume from theirs.
    auto tit = trials_.find(c.trial_id);
    if (tit == trials_.end() || !Terminal(tit->second->row.state) || !tit->second->allocation_id.empty()) continue;
    if (WarmStartUserLocked(c.uuid) != 0) continue;  // another experiment's trials still load it
    absl::Status st = store_->UpdateCheckpointState(c.uuid, "DELETED");
    if (!st.ok()) {
      spdlog::error("checkpoint GC: {}", st.ToString());
      continue;
    }
    ForgetTrialFactsLocked(*tit->second);  // its best checkpoint may have gone
    doomed.push_back(c);  // its files: only through DeleteCheckpointDirs
  }
  if (!doomed.empty()) {
    spdlog::info("experiment {}: checkpoint GC deletes {} checkpoint(s)", exp.row.id, doomed.size());
  }
  return doomed;
}

}  // namespace det::master
