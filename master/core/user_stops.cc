// MasterCore: pause, cancel and kill by the user when the database cannot
// be written (issue 46, finding 6: a trial filled the disk, and the
// flooding experiment could not be stopped through the API). The state
// change is committed as always; when the commit fails, the experiment's
// processes are killed at once through their agents anyway (they are what
// fills the disk), the stop is remembered, and every background pass
// retries committing it until the database takes writes again. The reply
// says honestly that the state is not recorded yet.
#include <spdlog/spdlog.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/core/agent_session.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"

namespace det::master {
namespace {

constexpr size_t kMaxUnrecordedStops = 10000;

const char* StopName(int how) {
  switch (how) {
    case 0: return "paused";
    case 1: return "canceled";
    default: return "killed";
  }
}

}  // namespace

absl::Status MasterCore::ApplyUserStopLocked(int64_t id, UserStop how) {
  if (how == UserStop::kPause) return PauseExperimentLocked(id);
  return StopExperimentLocked(id, /*kill=*/how == UserStop::kKill);
}

int MasterCore::KillExperimentProcessesNowLocked(int64_t id) {
  auto exp = experiments_.find(id);
  if (exp == experiments_.end()) return 0;
  int told = 0;
  for (const auto& [request, tid] : exp->second->trial_by_request) {
    auto trial = trials_.find(tid);
    if (trial == trials_.end()) continue;
    auto alloc = allocations_.find(trial->second->allocation_id);
    if (alloc == allocations_.end()) continue;
    if (alloc->second->slurm) {
      // scancel by the next Slurm pass: the driver needs no database write.
      CancelSlurmJobLocked(*alloc->second);
      ++told;
      continue;
    }
    for (const auto& placement : alloc->second->placements) {
      auto agent = agents_.find(placement.agent_id);
      if (agent == agents_.end() || !agent->second->session) continue;
      // Straight to the agent: the outbox is only sent after a commit.
      agentv1::MasterMessage msg;
      msg.mutable_kill_allocation()->set_allocation_id(alloc->second->id);
      msg.mutable_kill_allocation()->set_grace_period_seconds(0);
      msg.mutable_kill_allocation()->set_reason("stopped by the user (the master's database cannot be written)");
      agent->second->session->Push(std::move(msg));
      ++told;
    }
  }
  return told;
}

absl::Status MasterCore::UserStopLocked(int64_t id, UserStop how) {
  absl::Status committed;
  {
    WriteScope w(this);
    DET_RETURN_IF_ERROR(ApplyUserStopLocked(id, how));
    committed = w.Commit();  // on failure the state was reloaded from the store
  }
  if (committed.ok()) {
    if (unrecorded_stops_.erase(id) > 0) {
      spdlog::info("experiment {}: recorded as {} by the user now that the database can be written", id,
                   StopName(static_cast<int>(how)));
    }
    return absl::OkStatus();
  }
  const int told = KillExperimentProcessesNowLocked(id);
  if (unrecorded_stops_.size() < kMaxUnrecordedStops || unrecorded_stops_.count(id) > 0) unrecorded_stops_[id] = how;
  const char* name = StopName(static_cast<int>(how));
  spdlog::error("experiment {} {} by the user: {} process group(s) killed, the state not recorded yet: {}", id, name,
                told, committed.ToString());
  return absl::UnavailableError(absl::StrCat(
      "experiment ", id, ": its running trials were killed (", told, " process group(s) told to stop), but the ",
      "master could not record it as ", name, ": ", committed.message(),
      ". The master records it as soon as its database can be written again (free space on its disk); if the "
      "master restarts before that, run this command again"));
}

bool MasterCore::UserStopInEffectLocked(int64_t id, UserStop how) {
  auto it = experiments_.find(id);
  if (it == experiments_.end()) return true;  // gone: nothing to record
  const std::string& state = it->second->row.state;
  if (Terminal(state) || state == kStoppingKilled || state == kStoppingCanceled) return true;
  return how == UserStop::kPause && state == kPaused;
}

void MasterCore::ApplyUnrecordedStopsLocked() {
  for (const auto& [id, how] : unrecorded_stops_) {
    if (!UserStopInEffectLocked(id, how)) ApplyUserStopLocked(id, how).IgnoreError();
  }
}

void MasterCore::RetryUnrecordedStopsLocked() {
  const std::vector<std::pair<int64_t, UserStop>> stops(unrecorded_stops_.begin(), unrecorded_stops_.end());
  for (const auto& [id, how] : stops) {
    // The in-memory state is the stored one outside a write: in effect means
    // recorded (by the exit that ended it, say).
    if (UserStopInEffectLocked(id, how)) {
      unrecorded_stops_.erase(id);
      spdlog::info("experiment {}: recorded as {} by the user now that the database can be written", id,
                   StopName(static_cast<int>(how)));
      continue;
    }
    absl::Status applied, committed;
    {
      WriteScope w(this);
      applied = ApplyUserStopLocked(id, how);
      committed = w.Commit();
    }
    if (!applied.ok()) {  // the experiment is gone, or the stop no longer applies
      spdlog::warn("experiment {}: not recording it as {}: {}", id, StopName(static_cast<int>(how)),
                   applied.ToString());
      unrecorded_stops_.erase(id);
      continue;
    }
    if (!committed.ok()) {
      KillExperimentProcessesNowLocked(id);  // still not writable: keep its processes stopped
      return;                                // the next pass tries again
    }
    unrecorded_stops_.erase(id);
    spdlog::info("experiment {}: recorded as {} by the user now that the database can be written", id,
                 StopName(static_cast<int>(how)));
  }
}

}  // namespace det::master
