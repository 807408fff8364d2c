// A pure fair-share slot scheduler: given the agents' free slots, the pending
// requests and what is running, decides which pending requests start now and
// on which slots. No I/O, no locks, no clock; deterministic.
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
  bool enabled = true;          // a disabled agent gets nothing
};

struct SchedRequest {
  std::string allocation_id;
  int64_t group_id = 0;  // the experiment id
  std::string resource_pool;
  int slots = 1;  // 0: a slot-less (CPU) task
  double weight = 1;
  int priority = 42;  // lower number = scheduled first (Determined's priority scheduler)
  int64_t submit_order = 0;
};

struct SchedRunning {
  std::string allocation_id;
  int64_t group_id = 0;
  std::string resource_pool;
  int slots = 0;
};

struct SlotAssignment {
  std::string agent_id;
  std::vector<int> slots;  // ascending
};

struct Assignment {
  std::string allocation_id;
  std::vector<SlotAssignment> placements;
};

// Returns the pending requests to start now, in the order decided, each with
// its placements. Pure and thread-safe.
//
// Order: repeatedly the best remaining request by (priority ascending; fair
// share: the group's slots in that pool — running plus assigned earlier in
// this call — divided by the request's weight, ascending; submit_order;
// allocation_id). Pools are independent: a request only uses enabled agents
// of its own resource_pool.
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
// Blocking (our choice): a request that does not fit is skipped, and so are
// the later requests of the same group in the same pool (a group's requests
// start in order, so one experiment's small requests cannot starve its own
// big one); other groups' requests may still use the free slots (backfill).
// A slot is never assigned twice; a duplicated allocation_id, a request of
// negative slots or of weight <= 0 is skipped.
std::vector<Assignment> Schedule(const std::vector<SchedAgent>& agents, const std::vector<SchedRequest>& pending,
                                 const std::vector<SchedRunning>& running);

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_SEARCH_SCHEDULER_H_
