// A pure priority scheduler with preemption and fair share: given the
// agents' free slots, the pending requests and what is running, decides
// which pending requests start now (and on which slots) and which running
// allocations to preempt. No I/O, no locks, no clock; deterministic.
#ifndef DET_MASTER_SEARCH_SCHEDULER_H_
#define DET_MASTER_SEARCH_SCHEDULER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace det {
namespace master {

struct SchedAgent {
  std::string id;
  std::string resource_pool;
  std::vector<int> free_slots;  // slot indices free now (duplicates ignored)
  int total_slots = 0;
  bool enabled = true;          // false (disabled or draining): gets nothing new
};

struct SlotAssignment {
  std::string agent_id;
  std::vector<int> slots;  // ascending
};

struct SchedRequest {
  std::string allocation_id;
  int64_t group_id = 0;  // the experiment id
  std::string resource_pool;
  int slots = 1;  // 0: a slot-less (CPU) task
  double weight = 1;
  int priority = 42;  // lower number = scheduled first (Determined's priority scheduler)
  int64_t submit_order = 0;
  // The job's place within its priority after fair share (lower first;
  // the caller's default is the experiment id).
  double queue_position = 0;
  // The most slots the group may hold at once (running, stopping and
  // started in this call); 0: no cap. Every request of a group carries the
  // same value.
  int max_slots = 0;
  // Whether this request may preempt running allocations (false: a pool
  // with preemption off).
  bool may_preempt = true;
};

struct SchedRunning {
  std::string allocation_id;
  int64_t group_id = 0;
  std::string resource_pool;
  int slots = 0;  // slots it holds (fair share and max_slots count these)
  // Where it runs: the slots its end frees (empty: frees nothing placeable).
  std::vector<SlotAssignment> placements = {};
  int priority = 42;  // its group's priority now
  double weight = 1;  // its group's weight now
  int64_t start_order = 0;  // larger: started later ("newer")
  // It has made progress since it started (trained, validated or
  // checkpointed): only such an allocation may be preempted, so that nothing
  // is preempted again before it made progress.
  bool preemptible = false;
  // Already asked to stop (pause, preemption, completion, kill): its slots
  // are about to free; it is never picked as a victim.
  bool stopping = false;
};

struct Assignment {
  std::string allocation_id;
  std::vector<SlotAssignment> placements;
};

// A running allocation to stop (checkpoint and exit) so that a pending
// request fits once it has ended.
struct Preemption {
  std::string allocation_id;      // the running allocation to preempt
  std::string for_allocation_id;  // the pending request it makes room for
  int64_t for_group_id = 0;
  int for_priority = 0;
  bool fair_share = false;  // a rebalance within one priority, not a higher priority
};

struct SchedDecision {
  std::vector<Assignment> start;     // in the order decided
  std::vector<Preemption> preempt;   // each allocation at most once
};

// Decides one scheduling pass. Pure and thread-safe.
//
// Order: repeatedly the best remaining request by (priority ascending; fair
// share: the group's slots in that pool — running and not stopping, plus
// assigned or reserved earlier in this call, less victims chosen in this
// call — divided by the request's weight, ascending; queue_position;
// submit_order; allocation_id). Pools are independent: a request only uses
// enabled agents of its own resource_pool.
//
// max_slots: a request that would take its group over max_slots (counting
// running and stopping allocations and this call's starts) waits; it blocks
// its own group's later requests in the pool, never other groups'.
//
// Placement of n slots:
//  - n == 0: one placement with no slots on the enabled agent of the pool
//    with the most free slots (ties by id);
//  - an agent with >= n free slots exists: best fit, the one with the fewest
//    free slots that fits (ties by id), its n lowest free slots;
//  - otherwise, only when n exceeds every agent's total_slots in the pool: it
//    is spread across agents, whole free agents first (largest first, ties by
//    id) and the remainder best fit on another agent;
//  - otherwise it does not fit now.
//
// A request that does not fit blocks the later requests of its group in the
// pool (one experiment's small requests cannot starve its own big one);
// other groups may still use the free slots (backfill), except for slots the
// request reserves while it makes room:
//  1. It fits once the stopping allocations' slots (and victims' slots not
//     yet claimed) free: it reserves the free and freeing slots it would use
//     and waits; no new victim is picked.
//  2. Else, with may_preempt, lower-priority allocations (strictly larger
//     priority number) of the pool that are preemptible and not stopping are
//     the candidates, newest (start_order) first: when it would fit once all
//     of them ended, the victims are the newest single candidate that
//     suffices, else the newest-first prefix that suffices pruned (oldest
//     first) to a minimal set. An allocation is the unit: a distributed one
//     is preempted whole. Nothing is preempted when even every candidate
//     would not make room.
//  3. Else, with may_preempt, fair share within its priority: the newest
//     preemptible, not stopping allocation of the other group of the same
//     priority in the pool with the largest share (slots / weight; ties: the
//     lower group id) is preempted, only when afterwards the request's group
//     share (with this request) is still <= that group's share (without the
//     victim), and the request fits once it ended. Hysteresis: two equal
//     groups settle and never swap back and forth.
// A request that made room (1-3) reserves the slots it will use: they are
// not given to other requests in this call.
// A slot is never assigned twice; a duplicated allocation_id, a request of
// negative slots or of weight <= 0 is skipped; a running entry with a
// duplicated allocation_id is counted once.
SchedDecision Decide(const std::vector<SchedAgent>& agents, const std::vector<SchedRequest>& pending,
                     const std::vector<SchedRunning>& running);

// Decide(...).start: the requests to start now, with their placements.
std::vector<Assignment> Schedule(const std::vector<SchedAgent>& agents, const std::vector<SchedRequest>& pending,
                                 const std::vector<SchedRunning>& running);

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_SEARCH_SCHEDULER_H_
