// MasterCore: allocations run as Slurm jobs (resource_manager type slurm).
// No agents: each allocation becomes one batch job of slots_per_trial tasks
// (slurm_jobs.h writes its script), submitted by the Slurm pass
// (RunSlurmPass, outside the core's lock, slurm_driver.h), which also polls
// squeue: a job pending in Slurm is a queued job, a running one holds its
// slots, and an ended one ends its ranks with the exit status each left, so
// that pause, preemption, failures and restarts take the agents' paths
// (OnProcessTerminated, SettleTrialLocked). The job id is stored with the
// allocation, and the job's name carries the allocation id, so a restarted
// master finds its jobs again.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/safe_path.h"
#include "common/sha256.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"
#include "nlohmann/json.hpp"

namespace det::master {
namespace {

// A chief port of the configured range that no other live Slurm allocation
// of this master uses, starting at a point derived from the id.
int PickChiefPort(const SlurmConfig& c, const std::map<std::string, std::unique_ptr<AllocationRuntime>>& allocations,
                  const std::string& id) {
  std::set<int> taken;
  for (const auto& [other_id, other] : allocations) {
    if (other->slurm) taken.insert(other->rendezvous.chief_port());
  }
  const int n = c.rendezvous_last - c.rendezvous_first + 1;
  const int start = static_cast<int>(std::hash<std::string>()(id) % static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int port = c.rendezvous_first + (start + i) % n;
    if (taken.count(port) == 0) return port;
  }
  return c.rendezvous_first + start;
}

}  // namespace

void MasterCore::StartSlurmAllocationsLocked() {
  std::vector<SchedRequest> pending;
  pending.swap(pending_);
  pending_trials_.clear();  // every request leaves the queue (ErasePendingIf's index)
  for (const SchedRequest& r : pending) {
    int64_t trial_id = 0;
    std::sscanf(r.allocation_id.c_str(), "trial-%ld.", &trial_id);
    auto eit = experiments_.find(r.group_id);
    auto tit = trials_.find(trial_id);
    if (eit == experiments_.end() || tit == trials_.end()) continue;
    StartSlurmAllocationLocked(*eit->second, *tit->second, r);
  }
}

void MasterCore::StartSlurmAllocationLocked(ExperimentRuntime& exp, TrialRuntime& trial, const SchedRequest& req) {
  const SlurmConfig& cfg = options_.resource_manager.slurm;
  auto alloc = std::make_unique<AllocationRuntime>();
  alloc->id = req.allocation_id;
  const std::string token = RandomHex(16);
  alloc->token_sha256 = Sha256Hex(token);
  alloc->trial_id = trial.row.id;
  alloc->experiment_id = exp.row.id;
  const int ntasks = std::max(1, req.slots);
  SlotAssignment placement;
  placement.agent_id = kSlurmAgentId;
  for (int i = 0; i < ntasks; ++i) placement.slots.push_back(i);
  alloc->placements = {placement};
  alloc->processes = ntasks;
  alloc->created_ms = WallMs();
  alloc->created_mono_ms = MonoMs();
  alloc->start_order = ++submit_order_;
  alloc->slurm = true;
  alloc->slurm_state = "PENDING";
  trial.allocation_id = alloc->id;
  trial.preemption.clear();
  trial.row.run_id += 1;
  trial.current_op.reset();
  trial.exit_completed = false;
  SetTrialState(trial, trial.row.state);
  // Ranks as Slurm numbers them (SLURM_PROCID); the chief's address comes
  // from the job's first node when it runs.
  apiv1::RendezvousInfo& rdv = alloc->rendezvous;
  for (int i = 0; i < ntasks; ++i) {
    auto* r = rdv.add_ranks();
    r->set_rank(i);
    r->set_agent_id(kSlurmAgentId);
  }
  rdv.set_world_size(ntasks);
  rdv.set_num_nodes(1);
  if (ntasks > 1) rdv.set_chief_port(PickChiefPort(cfg, allocations_, alloc->id));

  auto partition = cfg.partition_pools.find(exp.config.resources.resource_pool);
  SlurmJobSpec spec;
  spec.allocation_id = alloc->id;
  spec.partition = partition != cfg.partition_pools.end() ? partition->second : "";
  spec.ntasks = ntasks;
  spec.gpus = std::find(cfg.gpu_partitions.begin(), cfg.gpu_partitions.end(), spec.partition) !=
              cfg.gpu_partitions.end();
  spec.gpus_per_node = cfg.gpus_per_node;
  spec.time_limit_minutes = cfg.time_limit_minutes;
  spec.det_trial = cfg.det_trial;
  absl::StatusOr<std::string> dir = JoinUnder(cfg.job_storage_root, alloc->id, "allocation_id");
  absl::StatusOr<std::string> so = artifacts_.FilePath(exp.row.trial_so_sha256);
  absl::StatusOr<std::string> script = absl::InternalError("no job directory");
  if (dir.ok()) {
    spec.job_dir = *dir;
    script = SlurmBatchScript(spec);
  } else {
    script = dir.status();
  }
  if (script.ok() && !so.ok()) script = so.status();
  const std::string id = alloc->id;
  alloc->slurm_job_dir = dir.ok() ? *dir : "";
  SlurmSubmission sub;
  if (script.ok()) {
    sub.allocation_id = id;
    sub.job_dir = *dir;
    sub.script = *script;
    sub.trial_so_path = *so;
    sub.ntasks = ntasks;
    nlohmann::json job = {{"master", cfg.master_address.empty() ? trial_master_address_ : cfg.master_address},
                          {"allocation_id", id},
                          {"token", token},
                          {"chief_port", rdv.chief_port()},
                          {"debug", exp.config.debug}};
    sub.job_json = job.dump();
    alloc->slurm_submit_queued = true;
  }
  spdlog::info("trial {}: allocation {} ({} task(s)) queued for sbatch", trial.row.id, id, ntasks);
  SaveAllocation(*alloc);
  allocations_[id] = std::move(alloc);
  if (!script.ok()) {
    TrialLogLocked(trial.row.id, id, absl::StrCat("[det-master] cannot submit to Slurm: ", script.status().message()));
    EndSlurmAllocationLocked(id, std::vector<RankEnd>(ntasks, RankEnd{3, std::string(script.status().message())}));
    return;
  }
  slurm_submit_.push_back(std::move(sub));
}

void MasterCore::CancelSlurmJobLocked(AllocationRuntime& alloc) {
  alloc.kill_sent = true;
  if (alloc.stop_requested_mono_ms == 0) alloc.stop_requested_mono_ms = MonoMs();
  // Still waiting for sbatch: the next pass drops the submission instead.
  if (alloc.slurm_submit_queued || alloc.slurm_cancel_queued) return;
  alloc.slurm_cancel_queued = true;
  slurm_cancel_.push_back(SlurmJobName(alloc.id));
}

void MasterCore::EndSlurmAllocationLocked(const std::string& id, std::vector<RankEnd> ends) {
  // The rank that failed on its own comes first: its message is the
  // allocation's failure.
  std::stable_sort(ends.begin(), ends.end(), [](const RankEnd& a, const RankEnd& b) {
    auto key = [](const RankEnd& e) { return e.exit_code == 0 ? 2 : (e.lost || e.exit_code == 1 ? 1 : 0); };
    return key(a) < key(b);
  });
  auto first = allocations_.find(id);
  if (first != allocations_.end()) first->second->slurm_cancel_queued = true;  // nothing left to scancel
  for (const RankEnd& e : ends) {
    auto it = allocations_.find(id);
    if (it == allocations_.end()) return;
    OnProcessTerminated(id, e.exit_code, e.why, e.lost);
  }
}

SlurmWork MasterCore::TakeSlurmWorkLocked() {
  SlurmWork work;
  std::vector<SlurmSubmission> submit;
  submit.swap(slurm_submit_);
  std::vector<std::string> dropped;
  for (SlurmSubmission& s : submit) {
    auto it = allocations_.find(s.allocation_id);
    if (it == allocations_.end()) continue;
    it->second->slurm_submit_queued = false;
    // Stopped before it was submitted: it never ran.
    if (it->second->kill_sent || it->second->preempt) {
      dropped.push_back(s.allocation_id);
      continue;
    }
    work.submit.push_back(std::move(s));
  }
  for (auto& [id, alloc] : allocations_) {
    if (!alloc->slurm || alloc->slurm_submit_queued) continue;
    bool submitting = false;
    for (const auto& s : work.submit) submitting |= s.allocation_id == id;
    if (submitting) continue;
    // A job still pending in Slurm has nothing to checkpoint: a stop
    // cancels it at once.
    if ((alloc->preempt || alloc->kill_sent) && alloc->slurm_state == "PENDING" && !alloc->slurm_cancel_queued) {
      alloc->slurm_cancel_queued = true;
      slurm_cancel_.push_back(SlurmJobName(id));
    }
    work.poll[id] = SlurmWork::Poll{alloc->slurm_job_dir, alloc->processes};
  }
  work.cancel_job_names.swap(slurm_cancel_);
  for (const std::string& id : dropped) {
    auto it = allocations_.find(id);
    if (it == allocations_.end()) continue;
    EndSlurmAllocationLocked(id, std::vector<RankEnd>(it->second->processes, RankEnd{143, "stopped before Slurm ran it"}));
  }
  return work;
}

void MasterCore::ApplySlurmResultsLocked(const SlurmWork& work, const SlurmResults& res) {
  for (const auto& [id, job_id] : res.submitted) {
    auto it = allocations_.find(id);
    if (it == allocations_.end()) continue;
    AllocationRuntime& alloc = *it->second;
    alloc.slurm_job_id = job_id;
    SaveAllocation(alloc);
    // What Slurm says of it at once: pending, and why (Resources, Priority...).
    std::string now;
    if (auto listed = res.listed.find(id); listed != res.listed.end()) {
      now = absl::StrCat(" (", listed->second.state,
                         listed->second.reason.empty() || listed->second.reason == "None" ? "" : ": ",
                         listed->second.reason == "None" ? "" : listed->second.reason, ")");
    }
    TrialLogLocked(alloc.trial_id, id,
                   absl::StrCat("[det-master] allocation ", id, " submitted as Slurm job ", job_id, now));
    // Asked to stop while sbatch ran: cancel it now.
    if ((alloc.kill_sent || alloc.preempt) && !alloc.slurm_cancel_queued) {
      alloc.slurm_cancel_queued = true;
      slurm_cancel_.push_back(SlurmJobName(id));
    }
  }
  for (const auto& [id, error] : res.submit_errors) {
    auto it = allocations_.find(id);
    if (it == allocations_.end()) continue;
    TrialLogLocked(it->second->trial_id, id, absl::StrCat("[det-master] sbatch failed: ", error));
    EndSlurmAllocationLocked(id, std::vector<RankEnd>(it->second->processes, RankEnd{1, "sbatch failed: " + error}));
  }
  if (!res.squeue_ok) return;
  for (const auto& [id, poll] : work.poll) {
    auto it = allocations_.find(id);
    if (it == allocations_.end()) continue;
    AllocationRuntime& alloc = *it->second;
    auto listed = res.listed.find(id);
    if (listed != res.listed.end() && alloc.slurm_job_id.empty()) {
      alloc.slurm_job_id = listed->second.job_id;  // found again by name after a restart
      SaveAllocation(alloc);
    }
    auto codes = res.exit_codes.find(id);
    if (codes == res.exit_codes.end()) {
      if (listed == res.listed.end()) continue;
      const std::string& state = listed->second.state;
      if (state != alloc.slurm_state && PhaseOfState(state) == SlurmPhase::kRunning && alloc.slurm_state == "PENDING") {
        TrialLogLocked(alloc.trial_id, id, absl::StrCat("[det-master] Slurm job ", listed->second.job_id, " is running"));
      }
      alloc.slurm_state = PhaseOfState(state) == SlurmPhase::kPending ? "PENDING" : state;
      continue;
    }
    std::optional<SqueueJob> job;
    if (listed != res.listed.end()) job = listed->second;
    spdlog::info("trial {}: Slurm job {} of allocation {} ended ({})", alloc.trial_id, alloc.slurm_job_id, id,
                 job ? job->state : "no longer in squeue");
    EndSlurmAllocationLocked(id, DecideRankEnds(job, codes->second));
  }
}

void MasterCore::RunSlurmPass() {
  if (!slurm_driver_) return;
  std::lock_guard<std::mutex> pass(slurm_pass_mu_);
  SlurmWork work;
  {
    std::lock_guard<std::mutex> l(mu_);
    WriteScope w(this);
    const int64_t now = MonoMs();
    if (now < slurm_next_poll_mono_ms_ && slurm_submit_.empty() && slurm_cancel_.empty()) return;
    slurm_next_poll_mono_ms_ = now + options_.resource_manager.slurm.poll_interval_ms;
    work = TakeSlurmWorkLocked();
  }
  if (work.submit.empty() && work.cancel_job_names.empty() && work.poll.empty()) return;
  SlurmResults res = slurm_driver_->Run(work);
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  ApplySlurmResultsLocked(work, res);
}

}  // namespace det::master
