// MasterCore: the job queue. GetJobQueue lists every unfinished
// experiment's job per pool in the order the scheduler considers them;
// UpdateJob changes a job's priority, weight, max_slots or place in the
// queue (stored in experiments.job_*, applied at the next scheduling pass,
// which it runs at once).
#include "master/core/job_queue.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <spdlog/spdlog.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"
#include "master/core/proto_convert.h"

namespace det::master {
namespace {

using ExperimentMap = std::map<int64_t, std::unique_ptr<ExperimentRuntime>>;
using AllocationMap = std::map<std::string, std::unique_ptr<AllocationRuntime>>;
using AgentMap = std::map<std::string, std::unique_ptr<AgentRuntime>>;

constexpr int kDefaultLimit = 100;
constexpr int kMaxLimit = 1000;

std::string JobId(int64_t experiment_id) { return absl::StrCat("exp-", experiment_id); }

// Whether the experiment has a job in the queue (not terminal, not deleting).
bool Queued(const ExperimentRuntime& e) { return !Terminal(e.row.state) && e.row.state != kDeleting; }

const std::string& PoolOf(const ExperimentRuntime& e) { return e.config.resources.resource_pool; }

int64_t TrialOfAllocation(const std::string& allocation_id) {
  int64_t trial_id = 0;
  std::sscanf(allocation_id.c_str(), "trial-%ld.", &trial_id);
  return trial_id;
}

apiv1::Job NewJob(const ExperimentRuntime& e) {
  apiv1::Job j;
  j.set_job_id(JobId(e.row.id));
  j.set_experiment_id(e.row.id);
  j.set_name(e.row.name);
  j.set_username(e.row.owner);
  j.set_resource_pool(PoolOf(e));
  j.set_state(apiv1::JOB_STATE_QUEUED);
  j.set_priority(e.priority);
  j.set_weight(e.weight);
  j.set_max_slots(e.max_slots);
  SetTime(j.mutable_submission_time(), e.row.created_ms);
  // Trials checkpoint and give their slots back when asked (preemption).
  j.set_preemptible(true);
  return j;
}

// Every queued experiment's job, in queue order per pool (pools by name),
// with queue_position set (0-based within the pool).
std::vector<apiv1::Job> BuildJobs(const ExperimentMap& experiments, const AllocationMap& allocations,
                                  const std::vector<SchedRequest>& pending) {
  std::map<int64_t, apiv1::Job> jobs;
  for (const auto& [id, e] : experiments) {
    if (Queued(*e)) jobs.emplace(id, NewJob(*e));
  }
  for (const auto& [alloc_id, alloc] : allocations) {
    auto it = jobs.find(alloc->experiment_id);
    if (it == jobs.end()) continue;
    apiv1::Job& j = it->second;
    int slots = 0;
    for (const auto& p : alloc->placements) slots += static_cast<int>(p.slots.size());
    j.set_requested_slots(j.requested_slots() + slots);
    // A Slurm job pending in Slurm holds nothing yet: the job stays QUEUED.
    if (!HoldsSlots(*alloc)) {
      if (j.allocations_size() >= kMaxJobAllocationsListed) continue;
      auto* a = j.add_allocations();
      a->set_allocation_id(alloc_id);
      a->set_trial_id(alloc->trial_id);
      a->set_state(apiv1::ALLOCATION_STATE_PENDING);
      a->set_slots_needed(slots);
      SetTime(a->mutable_request_time(), alloc->created_ms);
      continue;
    }
    j.set_allocated_slots(j.allocated_slots() + slots);
    j.set_state(apiv1::JOB_STATE_SCHEDULED);
    if (j.allocations_size() >= kMaxJobAllocationsListed) continue;
    auto* a = j.add_allocations();
    a->set_allocation_id(alloc_id);
    a->set_trial_id(alloc->trial_id);
    a->set_state(alloc->preempt || alloc->kill_sent ? apiv1::ALLOCATION_STATE_TERMINATING
                                                    : apiv1::ALLOCATION_STATE_RUNNING);
    a->set_slots_needed(slots);
    SetTime(a->mutable_request_time(), alloc->created_ms);
    for (const auto& p : alloc->placements) a->add_agent_ids(p.agent_id);
  }
  for (const auto& p : pending) {
    auto it = jobs.find(p.group_id);
    if (it == jobs.end()) continue;
    apiv1::Job& j = it->second;
    j.set_requested_slots(j.requested_slots() + p.slots);
    if (j.allocations_size() >= kMaxJobAllocationsListed) continue;
    auto* a = j.add_allocations();
    a->set_allocation_id(p.allocation_id);
    a->set_trial_id(TrialOfAllocation(p.allocation_id));
    a->set_state(apiv1::ALLOCATION_STATE_PENDING);
    a->set_slots_needed(p.slots);
  }
  std::vector<std::pair<JobOrderKey, apiv1::Job>> ordered;
  ordered.reserve(jobs.size());
  for (auto& [id, j] : jobs) {
    const ExperimentRuntime& e = *experiments.at(id);
    JobOrderKey key{PoolOf(e), e.priority, j.allocated_slots() / e.weight, e.queue_position, id};
    ordered.emplace_back(std::move(key), std::move(j));
  }
  std::sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) { return JobBefore(a.first, b.first); });
  std::vector<apiv1::Job> out;
  out.reserve(ordered.size());
  std::map<std::string, int> next_position;
  for (auto& [key, j] : ordered) {
    j.set_queue_position(next_position[key.pool]++);
    out.push_back(std::move(j));
  }
  return out;
}

// Whether some agent (connected or not) or some experiment uses `pool`.
bool KnownPool(const std::string& pool, const AgentMap& agents, const ExperimentMap& experiments) {
  for (const auto& [id, a] : agents) {
    if (a->row.resource_pool == pool) return true;
  }
  for (const auto& [id, e] : experiments) {
    if (PoolOf(*e) == pool) return true;
  }
  return false;
}

// The queued jobs of `pool` with priority `priority`, `except` left out,
// by (position, id).
std::vector<QueuedJob> Level(const ExperimentMap& experiments, const std::string& pool, int priority,
                             int64_t except) {
  std::vector<QueuedJob> level;
  for (const auto& [id, e] : experiments) {
    if (id != except && Queued(*e) && PoolOf(*e) == pool && e->priority == priority) {
      level.push_back({id, e->queue_position});
    }
  }
  std::sort(level.begin(), level.end(), [](const QueuedJob& a, const QueuedJob& b) {
    return std::tie(a.position, a.id) < std::tie(b.position, b.id);
  });
  return level;
}

// Gives the queued jobs of `pool` the positions 1, 2, ... in their current
// (position, id) order, storing each one that changes.
absl::Status RenumberPool(ExperimentMap& experiments, const std::string& pool, Store* store) {
  std::vector<ExperimentRuntime*> jobs;
  for (auto& [id, e] : experiments) {
    if (Queued(*e) && PoolOf(*e) == pool) jobs.push_back(e.get());
  }
  std::sort(jobs.begin(), jobs.end(), [](const ExperimentRuntime* a, const ExperimentRuntime* b) {
    return std::tie(a->queue_position, a->row.id) < std::tie(b->queue_position, b->row.id);
  });
  double next = 1;
  for (ExperimentRuntime* e : jobs) {
    const double position = next++;
    if (e->queue_position == position && e->row.job_queue_position == position) continue;
    e->queue_position = position;
    e->row.job_queue_position = position;
    DET_RETURN_IF_ERROR(store->UpdateExperiment(e->row));
  }
  spdlog::info("resource pool '{}': {} job positions renumbered", pool, jobs.size());
  return absl::OkStatus();
}

// The job `ref` (field `field`) that `exp` moves next to: InvalidArgument for
// a malformed id, itself or another pool's job; NotFound for an unknown one;
// FailedPrecondition for a finished one.
absl::StatusOr<ExperimentRuntime*> MoveTarget(ExperimentMap& experiments, const ExperimentRuntime& exp,
                                              const std::string& ref, const std::string& field) {
  DET_ASSIGN_OR_RETURN(int64_t id, ParseJobRef(ref, field));
  if (id == exp.row.id) return absl::InvalidArgumentError(absl::StrCat(field, ": a job cannot move next to itself"));
  auto it = experiments.find(id);
  if (it == experiments.end()) return absl::NotFoundError(absl::StrCat(field, ": job ", JobId(id), " not found"));
  ExperimentRuntime& target = *it->second;
  if (!Queued(target)) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": job ", JobId(id), " is ", target.row.state, ", no longer in the queue"));
  }
  if (PoolOf(target) != PoolOf(exp)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": job ", JobId(id), " is in resource pool '",
                                                   PoolOf(target), "', not '", PoolOf(exp), "'"));
  }
  return &target;
}

// Moves `exp` just ahead of / behind `target` (same pool, both queued):
// it takes the target's priority and a position next to it.
absl::Status MoveJob(ExperimentMap& experiments, ExperimentRuntime& exp, const ExperimentRuntime& target, bool ahead,
                     Store* store) {
  const int priority = target.priority;
  auto find_target = [&](const std::vector<QueuedJob>& level) {
    return static_cast<size_t>(std::find_if(level.begin(), level.end(),
                                            [&](const QueuedJob& j) { return j.id == target.row.id; }) -
                               level.begin());
  };
  std::vector<QueuedJob> level = Level(experiments, PoolOf(exp), priority, exp.row.id);
  std::optional<double> position = PositionNextTo(level, find_target(level), ahead);
  if (!position) {
    DET_RETURN_IF_ERROR(RenumberPool(experiments, PoolOf(exp), store));
    level = Level(experiments, PoolOf(exp), priority, exp.row.id);
    position = PositionNextTo(level, find_target(level), ahead);
    if (!position) return absl::InternalError("no queue position after renumbering");
  }
  exp.priority = priority;
  exp.row.job_priority = priority;
  exp.queue_position = *position;
  exp.row.job_queue_position = *position;
  return absl::OkStatus();
}

}  // namespace

bool JobBefore(const JobOrderKey& a, const JobOrderKey& b) {
  return std::tie(a.pool, a.priority, a.share, a.queue_position, a.id) <
         std::tie(b.pool, b.priority, b.share, b.queue_position, b.id);
}

std::optional<double> PositionNextTo(const std::vector<QueuedJob>& level, size_t target, bool ahead) {
  const double at = level[target].position;
  const bool has_neighbour = ahead ? target > 0 : target + 1 < level.size();
  if (!has_neighbour) return ahead ? at - 1 : at + 1;
  const double other = level[ahead ? target - 1 : target + 1].position;
  const double mid = at + (other - at) / 2;
  // Too close (or equal: then the id decides): no room in between.
  if (std::abs(other - at) < kMinQueuePositionGap || mid == at || mid == other) return std::nullopt;
  return mid;
}

absl::Status ValidateUpdateJob(const apiv1::UpdateJobRequest& req) {
  if (req.has_priority() && (req.priority() < kMinJobPriority || req.priority() > kMaxJobPriority)) {
    return absl::InvalidArgumentError(absl::StrCat("priority: must be ", kMinJobPriority, " to ", kMaxJobPriority,
                                                   ", not ", req.priority()));
  }
  if (req.has_weight() && !(req.weight() > 0 && std::isfinite(req.weight()))) {
    return absl::InvalidArgumentError(absl::StrCat("weight: must be a finite number > 0, not ", req.weight()));
  }
  if (req.has_max_slots() && (req.max_slots() < 0 || req.max_slots() > kMaxJobMaxSlots)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_slots: must be 0 (no cap) to ", kMaxJobMaxSlots, ", not ", req.max_slots()));
  }
  if (!req.ahead_of().empty() && !req.behind().empty()) {
    return absl::InvalidArgumentError("ahead_of, behind: give at most one of the two");
  }
  if (req.has_priority() && (!req.ahead_of().empty() || !req.behind().empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat(req.ahead_of().empty() ? "behind" : "ahead_of",
                     ": takes the other job's priority; priority may not be given with it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseJobRef(const std::string& ref, const std::string& field) {
  absl::string_view rest = ref;
  absl::ConsumePrefix(&rest, "exp-");
  int64_t id = 0;
  if (!absl::SimpleAtoi(rest, &id) || id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", ref.substr(0, 64), "' is not a job id (exp-<experiment id>)"));
  }
  return id;
}

void ApplyStoredJobKnobs(ExperimentRuntime& e) {
  const ExperimentRow& r = e.row;
  if (r.job_priority) e.priority = static_cast<int>(std::clamp<int64_t>(*r.job_priority, kMinJobPriority, kMaxJobPriority));
  if (r.job_weight && *r.job_weight > 0 && std::isfinite(*r.job_weight)) e.weight = *r.job_weight;
  if (r.job_max_slots) e.max_slots = static_cast<int>(std::clamp<int64_t>(*r.job_max_slots, 0, kMaxJobMaxSlots));
  if (r.job_queue_position && std::isfinite(*r.job_queue_position)) e.queue_position = *r.job_queue_position;
}

absl::StatusOr<apiv1::GetJobQueueResponse> MasterCore::GetJobQueue(const apiv1::GetJobQueueRequest& req) {
  if (req.offset() < 0) return absl::InvalidArgumentError(absl::StrCat("offset: must be >= 0, not ", req.offset()));
  if (req.limit() < 0) return absl::InvalidArgumentError(absl::StrCat("limit: must be >= 0, not ", req.limit()));
  const std::set<int> states(req.states().begin(), req.states().end());
  std::lock_guard<std::mutex> l(mu_);
  const std::string& pool = req.resource_pool();
  if (!pool.empty() && !KnownPool(pool, agents_, experiments_)) {
    return absl::NotFoundError(absl::StrCat("resource_pool: no resource pool '", pool.substr(0, 128),
                                            "' (no agent and no experiment uses it)"));
  }
  std::vector<apiv1::Job> jobs;
  for (apiv1::Job& j : BuildJobs(experiments_, allocations_, pending_)) {
    if (!pool.empty() && j.resource_pool() != pool) continue;
    if (!states.empty() && states.count(j.state()) == 0) continue;
    jobs.push_back(std::move(j));
  }
  if (req.order_by() == apiv1::ORDER_BY_DESC) {
    // Each pool's jobs last position first; pools stay in name order.
    for (size_t begin = 0; begin < jobs.size();) {
      size_t end = begin;
      while (end < jobs.size() && jobs[end].resource_pool() == jobs[begin].resource_pool()) ++end;
      std::reverse(jobs.begin() + begin, jobs.begin() + end);
      begin = end;
    }
  }
  const int total = static_cast<int>(jobs.size());
  const int limit = req.limit() == 0 ? kDefaultLimit : std::min(req.limit(), kMaxLimit);
  const int offset = std::min(req.offset(), total);
  const int end = std::min(total, offset + limit);
  apiv1::GetJobQueueResponse resp;
  for (int i = offset; i < end; ++i) *resp.add_jobs() = std::move(jobs[i]);
  auto* page = resp.mutable_pagination();
  page->set_offset(req.offset());
  page->set_limit(limit);
  page->set_start_index(offset);
  page->set_end_index(end);
  page->set_total(total);
  return resp;
}

absl::StatusOr<apiv1::UpdateJobResponse> MasterCore::UpdateJob(const apiv1::UpdateJobRequest& req) {
  DET_ASSIGN_OR_RETURN(const int64_t id, ExperimentOfJob(req.job_id()));
  DET_RETURN_IF_ERROR(ValidateUpdateJob(req));
  std::lock_guard<std::mutex> l(mu_);
  WriteScope w(this);
  auto found = experiments_.find(id);
  if (found == experiments_.end()) return absl::NotFoundError(absl::StrCat("job_id: job ", JobId(id), " not found"));
  ExperimentRuntime& exp = *found->second;
  DET_RETURN_IF_ERROR(CheckNotDeletingLocked(exp));
  if (Terminal(exp.row.state)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", JobId(id), ": experiment ", id, " is ", exp.row.state,
                                                      "; only a queued or running job can be changed"));
  }
  // Every check before any change: an error leaves the job as it was.
  const bool ahead = !req.ahead_of().empty();
  ExperimentRuntime* target = nullptr;
  if (ahead || !req.behind().empty()) {
    DET_ASSIGN_OR_RETURN(target, MoveTarget(experiments_, exp, ahead ? req.ahead_of() : req.behind(),
                                            ahead ? "ahead_of" : "behind"));
  }
  if (req.has_priority()) {
    exp.priority = req.priority();
    exp.row.job_priority = req.priority();
  }
  if (req.has_weight()) {
    exp.weight = req.weight();
    exp.row.job_weight = req.weight();
  }
  if (req.has_max_slots()) {
    exp.max_slots = req.max_slots();
    exp.row.job_max_slots = req.max_slots();
  }
  if (target != nullptr) DET_RETURN_IF_ERROR(MoveJob(experiments_, exp, *target, ahead, store_.get()));
  DET_RETURN_IF_ERROR(store_->UpdateExperiment(exp.row));
  // Its queued requests carry copies of the knobs the scheduler sorts by.
  for (SchedRequest& p : pending_) {
    if (p.group_id != id) continue;
    p.priority = exp.priority;
    p.weight = exp.weight;
  }
  spdlog::info("job {}: priority {}, weight {}, max_slots {}, queue position {}", JobId(id), exp.priority,
               exp.weight, exp.max_slots, exp.queue_position);
  ScheduleLocked();
  apiv1::UpdateJobResponse resp;
  for (apiv1::Job& j : BuildJobs(experiments_, allocations_, pending_)) {
    if (j.experiment_id() == id) *resp.mutable_job() = std::move(j);
  }
  return Committed(w, resp);
}

}  // namespace det::master
