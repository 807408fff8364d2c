#include "master/search/scheduler.h"

#include <algorithm>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_set>
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

// One call of Decide: the agents' slots as this call hands them out, the
// slots about to free, and each (pool, group)'s slots.
class Pass {
 public:
  Pass(const std::vector<SchedAgent>& agents, const std::vector<SchedRequest>& pending,
       const std::vector<SchedRunning>& running);
  SchedDecision Run();

 private:
  using Victims = std::vector<const SchedRunning*>;

  double ShareOf(const SchedRequest* r) const {
    auto it = used_.find({r->resource_pool, r->group_id});
    return (it == used_.end() ? 0.0 : it->second) / r->weight;
  }
  // Whether `req` may take more slots under its group's max_slots.
  bool UnderCap(const SchedRequest& req) const;
  // Places n slots of `pool` as if the freeing slots and the victims' slots
  // were free too; changes nothing.
  std::optional<std::vector<SlotAssignment>> Simulate(const std::string& pool, int n, const Victims& victims) const;
  // Reserves what a simulated placement uses; the victims' other slots join
  // the freeing slots.
  void Claim(const std::vector<SlotAssignment>& placements, const Victims& victims);
  // Steps 1-3 of the contract for a request that does not fit now.
  bool MakeRoom(const SchedRequest& req);
  Victims PickVictims(const SchedRequest& req) const;
  const SchedRunning* PickFairShareVictim(const SchedRequest& req) const;

  std::map<std::string, AgentState> states_;
  std::map<std::string, std::vector<AgentState*>> pools_;  // agents sorted by id
  std::map<std::string, std::set<int>> freeing_;  // agent -> slots about to free, unclaimed
  std::map<PoolGroup, double> used_;   // fair share: held and not stopping, plus this call's
  std::map<PoolGroup, int64_t> held_;  // max_slots: held (stopping too) plus this call's starts
  std::vector<const SchedRunning*> running_;  // one entry per allocation id
  std::vector<const SchedRequest*> candidates_;
  std::set<std::string> victims_;
  // (pool, priority, slots) for which step 2 found nothing: stays so for
  // the rest of the call (what is available only shrinks).
  std::set<std::tuple<std::string, int, int>> no_victims_;
  SchedDecision out_;
};

Pass::Pass(const std::vector<SchedAgent>& agents, const std::vector<SchedRequest>& pending,
           const std::vector<SchedRunning>& running) {
  // Agents by id; a duplicated id keeps its first entry.
  for (const SchedAgent& a : agents) {
    if (!a.enabled || states_.count(a.id) != 0) continue;
    AgentState s{a.id, a.resource_pool, {}, a.total_slots};
    for (int slot : a.free_slots) s.free.insert(slot);
    s.total = std::max<int>(a.total_slots, static_cast<int>(s.free.size()));
    states_.emplace(a.id, std::move(s));
  }
  for (auto& [id, s] : states_) pools_[s.pool].push_back(&s);
  std::set<std::string> seen_running;
  for (const SchedRunning& r : running) {
    if (!seen_running.insert(r.allocation_id).second) continue;
    running_.push_back(&r);
    const int slots = std::max(0, r.slots);
    held_[{r.resource_pool, r.group_id}] += slots;
    if (!r.stopping) {
      used_[{r.resource_pool, r.group_id}] += slots;
      continue;
    }
    for (const SlotAssignment& p : r.placements) {
      auto it = states_.find(p.agent_id);
      if (it == states_.end() || it->second.pool != r.resource_pool) continue;
      freeing_[p.agent_id].insert(p.slots.begin(), p.slots.end());
    }
  }
  std::unordered_set<std::string_view> seen;
  seen.reserve(pending.size());
  for (const SchedRequest& r : pending) {
    if (r.slots < 0 || !(r.weight > 0) || !seen.insert(r.allocation_id).second) continue;
    candidates_.push_back(&r);
  }
}

bool Pass::UnderCap(const SchedRequest& req) const {
  if (req.max_slots <= 0) return true;
  auto it = held_.find({req.resource_pool, req.group_id});
  const int64_t held = it == held_.end() ? 0 : it->second;
  return held + req.slots <= req.max_slots;
}

std::optional<std::vector<SlotAssignment>> Pass::Simulate(const std::string& pool, int n,
                                                          const Victims& victims) const {
  auto it = pools_.find(pool);
  if (it == pools_.end()) return std::nullopt;
  std::vector<AgentState> copies;
  copies.reserve(it->second.size());
  for (const AgentState* a : it->second) {
    AgentState c = *a;
    auto f = freeing_.find(a->id);
    if (f != freeing_.end()) c.free.insert(f->second.begin(), f->second.end());
    for (const SchedRunning* v : victims) {
      for (const SlotAssignment& p : v->placements) {
        if (p.agent_id == a->id) c.free.insert(p.slots.begin(), p.slots.end());
      }
    }
    c.total = std::max<int>(c.total, static_cast<int>(c.free.size()));
    copies.push_back(std::move(c));
  }
  std::vector<AgentState*> ptrs;
  for (AgentState& c : copies) ptrs.push_back(&c);
  return Place(ptrs, n);
}

void Pass::Claim(const std::vector<SlotAssignment>& placements, const Victims& victims) {
  for (const SchedRunning* v : victims) {
    for (const SlotAssignment& p : v->placements) {
      if (states_.count(p.agent_id) != 0) freeing_[p.agent_id].insert(p.slots.begin(), p.slots.end());
    }
  }
  for (const SlotAssignment& p : placements) {
    AgentState& agent = states_.at(p.agent_id);
    for (int slot : p.slots) {
      if (agent.free.erase(slot) == 0) freeing_[p.agent_id].erase(slot);
    }
  }
}

Pass::Victims Pass::PickVictims(const SchedRequest& req) const {
  Victims candidates;
  for (const SchedRunning* r : running_) {
    if (r->resource_pool != req.resource_pool || r->priority <= req.priority || !r->preemptible || r->stopping ||
        victims_.count(r->allocation_id) != 0) {
      continue;
    }
    candidates.push_back(r);
  }
  std::sort(candidates.begin(), candidates.end(), [](const SchedRunning* a, const SchedRunning* b) {
    return std::tie(a->start_order, a->allocation_id) > std::tie(b->start_order, b->allocation_id);
  });
  if (candidates.empty() || !Simulate(req.resource_pool, req.slots, candidates)) return {};
  for (const SchedRunning* c : candidates) {
    if (Simulate(req.resource_pool, req.slots, {c})) return {c};
  }
  Victims chosen;
  for (const SchedRunning* c : candidates) {
    chosen.push_back(c);
    if (Simulate(req.resource_pool, req.slots, chosen)) break;
  }
  for (size_t i = chosen.size(); i-- > 0;) {  // oldest chosen first
    Victims without = chosen;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
    if (Simulate(req.resource_pool, req.slots, without)) chosen = std::move(without);
  }
  return chosen;
}

const SchedRunning* Pass::PickFairShareVictim(const SchedRequest& req) const {
  std::map<int64_t, const SchedRunning*> newest;  // per other group of the same priority
  std::map<int64_t, double> weight;
  for (const SchedRunning* r : running_) {
    if (r->resource_pool != req.resource_pool || r->priority != req.priority || r->group_id == req.group_id ||
        !r->preemptible || r->stopping || victims_.count(r->allocation_id) != 0) {
      continue;
    }
    const SchedRunning*& n = newest[r->group_id];
    if (n == nullptr || std::tie(r->start_order, r->allocation_id) > std::tie(n->start_order, n->allocation_id)) n = r;
    weight[r->group_id] = r->weight > 0 ? r->weight : 1;
  }
  auto used = [this, &req](int64_t group) {
    auto it = used_.find({req.resource_pool, group});
    return it == used_.end() ? 0.0 : it->second;
  };
  int64_t over = 0;
  double over_share = -1;
  for (const auto& [group, r] : newest) {
    const double share = used(group) / weight[group];
    if (share > over_share) over = group, over_share = share;
  }
  if (newest.empty()) return nullptr;
  const SchedRunning* victim = newest[over];
  const double mine_after = (used(req.group_id) + req.slots) / req.weight;
  const double theirs_after = (used(over) - std::max(0, victim->slots)) / weight[over];
  if (mine_after > theirs_after || !Simulate(req.resource_pool, req.slots, {victim})) return nullptr;
  return victim;
}

bool Pass::MakeRoom(const SchedRequest& req) {
  if (req.slots == 0) return false;
  Victims victims;
  bool fair_share = false;
  // With nothing about to free, the simulation is the placement that just
  // failed: skip it (it copies every agent of the pool).
  std::optional<std::vector<SlotAssignment>> placed;
  if (!freeing_.empty()) placed = Simulate(req.resource_pool, req.slots, {});
  if (placed) {
    Claim(*placed, {});
  } else {
    if (!req.may_preempt) return false;
    auto key = std::make_tuple(req.resource_pool, req.priority, req.slots);
    if (no_victims_.count(key) == 0) victims = PickVictims(req);
    if (victims.empty()) no_victims_.insert(key);
    if (victims.empty()) {
      if (const SchedRunning* v = PickFairShareVictim(req)) victims = {v}, fair_share = true;
    }
    if (victims.empty()) return false;
    Claim(*Simulate(req.resource_pool, req.slots, victims), victims);
  }
  for (const SchedRunning* v : victims) {
    victims_.insert(v->allocation_id);
    used_[{v->resource_pool, v->group_id}] -= std::max(0, v->slots);
    out_.preempt.push_back(Preemption{v->allocation_id, req.allocation_id, req.group_id, req.priority, fair_share});
  }
  used_[{req.resource_pool, req.group_id}] += req.slots;
  return true;
}

SchedDecision Pass::Run() {
  // The best remaining request by (priority, share, queue_position,
  // submit_order, allocation_id). Requests with the same (pool, group,
  // priority, queue_position) form a bucket already in (submit_order,
  // allocation_id) order, so only each bucket's head competes, in a heap
  // whose keys are snapshots: whenever a (pool, group)'s share or a bucket's
  // head changes, its buckets are pushed again with a new version and the
  // old entries are skipped. O(n log n) in pending requests, where a
  // per-request heap re-pushed every request of a group after each start.
  struct Bucket {
    std::vector<const SchedRequest*> reqs;
    size_t next = 0;
    uint64_t version = 0;
  };
  std::map<std::tuple<std::string, int64_t, int, double>, Bucket> by_key;
  Bucket* last = nullptr;  // requests of one job usually come together
  const SchedRequest* last_req = nullptr;
  for (const SchedRequest* r : candidates_) {
    if (last == nullptr || r->group_id != last_req->group_id || r->priority != last_req->priority ||
        r->queue_position != last_req->queue_position || r->resource_pool != last_req->resource_pool) {
      last = &by_key[{r->resource_pool, r->group_id, r->priority, r->queue_position}];
    }
    last->reqs.push_back(r);
    last_req = r;
  }
  std::map<PoolGroup, std::vector<Bucket*>> buckets_of;
  auto before = [](const SchedRequest* x, const SchedRequest* y) {
    return std::tie(x->submit_order, x->allocation_id) < std::tie(y->submit_order, y->allocation_id);
  };
  for (auto& [key, b] : by_key) {
    if (!std::is_sorted(b.reqs.begin(), b.reqs.end(), before)) std::sort(b.reqs.begin(), b.reqs.end(), before);
    buckets_of[{std::get<0>(key), std::get<1>(key)}].push_back(&b);
  }
  struct Entry {
    double share;
    const SchedRequest* head;
    Bucket* bucket;
    uint64_t version;
  };
  auto after = [](const Entry& a, const Entry& b) {
    return std::tie(a.head->priority, a.share, a.head->queue_position, a.head->submit_order,
                    a.head->allocation_id) > std::tie(b.head->priority, b.share, b.head->queue_position,
                                                      b.head->submit_order, b.head->allocation_id);
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(after)> queue(after);
  std::set<PoolGroup> blocked;
  auto push = [&](const PoolGroup& pg) {
    if (blocked.count(pg) != 0) return;
    auto it = buckets_of.find(pg);
    if (it == buckets_of.end()) return;
    for (Bucket* b : it->second) {
      ++b->version;
      if (b->next < b->reqs.size()) queue.push(Entry{ShareOf(b->reqs[b->next]), b->reqs[b->next], b, b->version});
    }
  };
  for (const auto& [pg, list] : buckets_of) push(pg);

  while (!queue.empty()) {
    Entry top = queue.top();
    queue.pop();
    if (top.version != top.bucket->version) continue;
    const SchedRequest* req = top.head;
    PoolGroup pg{req->resource_pool, req->group_id};
    if (blocked.count(pg) != 0) continue;
    if (!UnderCap(*req)) {
      blocked.insert(pg);
      continue;
    }
    auto pool = pools_.find(req->resource_pool);
    std::optional<std::vector<SlotAssignment>> placements;
    if (pool != pools_.end()) placements = Place(pool->second, req->slots);
    if (!placements.has_value()) {
      blocked.insert(pg);
      const size_t victims_before = out_.preempt.size();
      MakeRoom(*req);
      // The victims' groups hold less now: their shares changed.
      std::set<PoolGroup> touched;
      for (size_t i = victims_before; i < out_.preempt.size(); ++i) {
        for (const SchedRunning* r : running_) {
          if (r->allocation_id == out_.preempt[i].allocation_id) touched.insert({r->resource_pool, r->group_id});
        }
      }
      for (const PoolGroup& t : touched) push(t);
      continue;
    }
    used_[pg] += req->slots;
    held_[pg] += req->slots;
    out_.start.push_back(Assignment{req->allocation_id, std::move(*placements)});
    ++top.bucket->next;
    push(pg);
  }
  return std::move(out_);
}

}  // namespace

SchedDecision Decide(const std::vector<SchedAgent>& agents, const std::vector<SchedRequest>& pending,
                     const std::vector<SchedRunning>& running) {
  return Pass(agents, pending, running).Run();
}

std::vector<Assignment> Schedule(const std::vector<SchedAgent>& agents, const std::vector<SchedRequest>& pending,
                                 const std::vector<SchedRunning>& running) {
  return Decide(agents, pending, running).start;
}

}  // namespace master
}  // namespace det
