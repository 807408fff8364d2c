#include "master/search/scheduler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <tuple>
#include <utility>

namespace det {
namespace master {
namespace {

struct AgentState {
  std::string id;
  std::string pool;
  std::set<int> free;  // ascending
  int total = 0;
};

using PoolGroup = std::pair<std::string, int64_t>;

std::vector<int> TakeLowest(AgentState* agent, int n) {
  std::vector<int> slots;
  auto it = agent->free.begin();
  for (int i = 0; i < n && it != agent->free.end(); ++i) slots.push_back(*it), it = agent->free.erase(it);
  return slots;
}

// Tries to place `req` on `agents` (the pool's enabled agents, sorted by id).
// On success removes the slots used and returns the placements.
std::optional<std::vector<SlotAssignment>> Place(std::vector<AgentState*>& agents, int n) {
  if (agents.empty()) return std::nullopt;
  if (n == 0) {
    AgentState* best = nullptr;
    for (AgentState* a : agents) {
      if (best == nullptr || a->free.size() > best->free.size()) best = a;
    }
    return std::vector<SlotAssignment>{SlotAssignment{best->id, {}}};
  }
  // Best fit on one agent.
  AgentState* best = nullptr;
  for (AgentState* a : agents) {
    if (static_cast<int>(a->free.size()) >= n && (best == nullptr || a->free.size() < best->free.size())) best = a;
  }
  if (best != nullptr) return std::vector<SlotAssignment>{SlotAssignment{best->id, TakeLowest(best, n)}};

  int max_total = 0;
  for (AgentState* a : agents) max_total = std::max(max_total, a->total);
  if (n <= max_total) return std::nullopt;

  // Spread: whole free agents first (largest first, ties by id).
  std::vector<AgentState*> whole;
  for (AgentState* a : agents) {
    if (a->total > 0 && static_cast<int>(a->free.size()) == a->total) whole.push_back(a);
  }
  std::stable_sort(whole.begin(), whole.end(), [](AgentState* x, AgentState* y) { return x->total > y->total; });
  std::vector<AgentState*> used;
  int remaining = n;
  for (AgentState* a : whole) {
    if (remaining >= a->total) {
      used.push_back(a);
      remaining -= a->total;
    }
    if (remaining == 0) break;
  }
  AgentState* rest = nullptr;
  if (remaining > 0) {
    for (AgentState* a : agents) {
      if (std::find(used.begin(), used.end(), a) != used.end()) continue;
      if (static_cast<int>(a->free.size()) >= remaining && (rest == nullptr || a->free.size() < rest->free.size())) {
        rest = a;
      }
    }
    if (rest == nullptr) return std::nullopt;
  }
  std::vector<SlotAssignment> placements;
  for (AgentState* a : used) placements.push_back(SlotAssignment{a->id, TakeLowest(a, a->total)});
  if (rest != nullptr) placements.push_back(SlotAssignment{rest->id, TakeLowest(rest, remaining)});
  return placements;
}

}  // namespace

std::vector<Assignment> Schedule(const std::vector<SchedAgent>& agents, const std::vector<SchedRequest>& pending,
                                 const std::vector<SchedRunning>& running) {
  // Agents by id; a duplicated id keeps its first entry.
  std::map<std::string, AgentState> states;
  for (const SchedAgent& a : agents) {
    if (!a.enabled || states.count(a.id) != 0) continue;
    AgentState s{a.id, a.resource_pool, {}, a.total_slots};
    for (int slot : a.free_slots) s.free.insert(slot);
    s.total = std::max<int>(a.total_slots, static_cast<int>(s.free.size()));
    states.emplace(a.id, std::move(s));
  }
  std::map<std::string, std::vector<AgentState*>> pools;  // agents sorted by id
  for (auto& [id, s] : states) pools[s.pool].push_back(&s);

  std::map<PoolGroup, double> used;  // slots per (pool, group)
  for (const SchedRunning& r : running) used[{r.resource_pool, r.group_id}] += std::max(0, r.slots);

  std::vector<const SchedRequest*> candidates;
  std::set<std::string> seen;
  for (const SchedRequest& r : pending) {
    if (r.slots < 0 || !(r.weight > 0) || !seen.insert(r.allocation_id).second) continue;
    candidates.push_back(&r);
  }

  // The best remaining request by (priority, share, submit_order,
  // allocation_id), found with a heap of shares as they were when pushed: a
  // share only grows (a group's slots only grow within one call), so a popped
  // request whose share is still current is the true minimum, and one whose
  // share grew goes back in. O(n log n), where a scan per pick was O(n^2): 20
  // ms of every background pass for 10,000 pending trials.
  auto share_of = [&used](const SchedRequest* r) {
    auto it = used.find({r->resource_pool, r->group_id});
    return (it == used.end() ? 0.0 : it->second) / r->weight;
  };
  struct Queued {
    double share;
    const SchedRequest* req;
  };
  auto after = [](const Queued& a, const Queued& b) {
    return std::tie(a.req->priority, a.share, a.req->submit_order, a.req->allocation_id) >
           std::tie(b.req->priority, b.share, b.req->submit_order, b.req->allocation_id);
  };
  std::priority_queue<Queued, std::vector<Queued>, decltype(after)> queue(after);
  for (const SchedRequest* r : candidates) queue.push(Queued{share_of(r), r});

  std::set<PoolGroup> blocked;
  std::vector<Assignment> result;
  while (!queue.empty()) {
    Queued top = queue.top();
    queue.pop();
    const SchedRequest* req = top.req;
    double share = share_of(req);
    if (share != top.share) {
      queue.push(Queued{share, req});
      continue;
    }
    PoolGroup pg{req->resource_pool, req->group_id};
    if (blocked.count(pg) != 0) continue;
    auto pool = pools.find(req->resource_pool);
    std::optional<std::vector<SlotAssignment>> placements;
    if (pool != pools.end()) placements = Place(pool->second, req->slots);
    if (!placements.has_value()) {
      blocked.insert(pg);
      continue;
    }
    used[pg] += req->slots;
    result.push_back(Assignment{req->allocation_id, std::move(*placements)});
  }
  return result;
}

}  // namespace master
}  // namespace det
