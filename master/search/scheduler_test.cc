#include "master/search/scheduler.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace master {
namespace {

SchedAgent Agent(std::string id, int total, std::string pool = "default") {
  SchedAgent a;
  a.id = std::move(id);
  a.resource_pool = std::move(pool);
  a.total_slots = total;
  for (int i = 0; i < total; ++i) a.free_slots.push_back(i);
  return a;
}

SchedRequest Req(std::string id, int64_t group, int slots, int64_t order, std::string pool = "default") {
  SchedRequest r;
  r.allocation_id = std::move(id);
  r.group_id = group;
  r.resource_pool = std::move(pool);
  r.slots = slots;
  r.submit_order = order;
  return r;
}

std::vector<std::string> Ids(const std::vector<Assignment>& as) {
  std::vector<std::string> out;
  for (const Assignment& a : as) out.push_back(a.allocation_id);
  return out;
}

// Every (agent, slot) is assigned at most once and was free.
void ExpectNoDoubleAssignment(const std::vector<SchedAgent>& agents, const std::vector<Assignment>& as) {
  std::set<std::pair<std::string, int>> free, used;
  for (const SchedAgent& a : agents) {
    for (int s : a.free_slots) free.insert({a.id, s});
  }
  for (const Assignment& a : as) {
    for (const SlotAssignment& p : a.placements) {
      for (int s : p.slots) {
        EXPECT_TRUE(free.count({p.agent_id, s})) << p.agent_id << ":" << s;
        EXPECT_TRUE(used.insert({p.agent_id, s}).second) << "twice: " << p.agent_id << ":" << s;
      }
    }
  }
}

TEST(SchedulerTest, FillsFreeSlots) {
  std::vector<SchedAgent> agents = {Agent("a", 2), Agent("b", 1)};
  std::vector<SchedRequest> pending;
  for (int i = 0; i < 5; ++i) pending.push_back(Req("r" + std::to_string(i), 1, 1, i));
  auto as = Schedule(agents, pending, {});
  EXPECT_EQ(Ids(as), (std::vector<std::string>{"r0", "r1", "r2"}));
  // Best fit: the first goes to b (1 free), then a twice.
  EXPECT_EQ(as[0].placements[0].agent_id, "b");
  EXPECT_EQ(as[1].placements[0].agent_id, "a");
  EXPECT_EQ(as[1].placements[0].slots, std::vector<int>{0});
  EXPECT_EQ(as[2].placements[0].slots, std::vector<int>{1});
  ExpectNoDoubleAssignment(agents, as);
}

TEST(SchedulerTest, RespectsPoolsAndDisabledAgents) {
  std::vector<SchedAgent> agents = {Agent("a", 1, "cpu"), Agent("b", 1, "gpu"), Agent("c", 4, "gpu")};
  agents[2].enabled = false;
  std::vector<SchedRequest> pending = {Req("g1", 1, 1, 0, "gpu"), Req("g2", 2, 1, 1, "gpu"),
                                       Req("c1", 3, 1, 2, "cpu"), Req("x", 4, 1, 3, "nowhere")};
  auto as = Schedule(agents, pending, {});
  ASSERT_EQ(Ids(as), (std::vector<std::string>{"g1", "c1"}));
  EXPECT_EQ(as[0].placements[0].agent_id, "b");
  EXPECT_EQ(as[1].placements[0].agent_id, "a");
}

TEST(SchedulerTest, FairShareByWeight) {
  std::vector<SchedAgent> agents = {Agent("a", 8)};
  std::vector<SchedRequest> pending;
  for (int i = 0; i < 10; ++i) pending.push_back(Req("A" + std::to_string(i), 1, 1, i));
  for (int i = 0; i < 10; ++i) {
    SchedRequest r = Req("B" + std::to_string(i), 2, 1, 10 + i);
    r.weight = 3;
    pending.push_back(r);
  }
  auto as = Schedule(agents, pending, {});
  std::map<char, int> per_group;
  for (const Assignment& a : as) per_group[a.allocation_id[0]]++;
  EXPECT_EQ(per_group['A'], 2);
  EXPECT_EQ(per_group['B'], 6);
  ExpectNoDoubleAssignment(agents, as);
}

TEST(SchedulerTest, FairShareCountsRunning) {
  std::vector<SchedAgent> agents = {Agent("a", 4)};
  agents[0].free_slots = {2, 3};
  std::vector<SchedRequest> pending = {Req("A", 1, 1, 0), Req("A2", 1, 1, 1), Req("B", 2, 1, 2),
                                       Req("B2", 2, 1, 3)};
  std::vector<SchedRunning> running = {{"old1", 1, "default", 1}, {"old2", 1, "default", 1}};
  EXPECT_EQ(Ids(Schedule(agents, pending, running)), (std::vector<std::string>{"B", "B2"}));
}

TEST(SchedulerTest, PriorityFirst) {
  std::vector<SchedAgent> agents = {Agent("a", 2)};
  std::vector<SchedRequest> pending = {Req("low", 1, 1, 0), Req("high", 2, 1, 1), Req("mid", 3, 1, 2)};
  pending[0].priority = 50;
  pending[1].priority = 1;
  pending[2].priority = 42;
  EXPECT_EQ(Ids(Schedule(agents, pending, {})), (std::vector<std::string>{"high", "mid"}));
}

TEST(SchedulerTest, MultiSlotBestFit) {
  std::vector<SchedAgent> agents = {Agent("big", 8), Agent("mid", 4), Agent("small", 2)};
  agents[0].free_slots = {0, 1, 2, 3, 4, 5};
  agents[1].free_slots = {1, 2, 3};
  std::vector<SchedRequest> pending = {Req("r3", 1, 3, 0), Req("r2", 2, 2, 1), Req("r4", 3, 4, 2)};
  auto as = Schedule(agents, pending, {});
  ASSERT_EQ(Ids(as), (std::vector<std::string>{"r3", "r2", "r4"}));
  EXPECT_EQ(as[0].placements[0].agent_id, "mid");
  EXPECT_EQ(as[0].placements[0].slots, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(as[1].placements[0].agent_id, "small");
  EXPECT_EQ(as[2].placements[0].agent_id, "big");
  EXPECT_EQ(as[2].placements[0].slots, (std::vector<int>{0, 1, 2, 3}));
  ExpectNoDoubleAssignment(agents, as);
}

TEST(SchedulerTest, SpreadsLargeRequestsWholeAgentFirst) {
  std::vector<SchedAgent> agents = {Agent("a", 4), Agent("b", 4), Agent("c", 4), Agent("d", 4)};
  agents[2].free_slots = {2, 3};  // partly busy: not a whole agent
  agents[3].free_slots = {0, 1, 2};
  std::vector<SchedRequest> pending = {Req("r10", 1, 10, 0), Req("r12", 2, 12, 1), Req("r3", 3, 3, 2)};
  auto as = Schedule(agents, pending, {});
  ASSERT_EQ(Ids(as), (std::vector<std::string>{"r10", "r3"}));  // r12: no two whole agents left
  ASSERT_EQ(as[0].placements.size(), 3u);
  EXPECT_EQ(as[0].placements[0].agent_id, "a");
  EXPECT_EQ(as[0].placements[0].slots, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(as[0].placements[1].agent_id, "b");
  EXPECT_EQ(as[0].placements[2].agent_id, "c");  // remainder 2: best fit (c: 2 free, d: 3)
  EXPECT_EQ(as[0].placements[2].slots, (std::vector<int>{2, 3}));
  EXPECT_EQ(as[1].placements[0].agent_id, "d");
  ExpectNoDoubleAssignment(agents, as);
}

TEST(SchedulerTest, UnfittableBlocksOwnGroupButOthersBackfill) {
  std::vector<SchedAgent> agents = {Agent("a", 4)};
  agents[0].free_slots = {0, 1};
  std::vector<SchedRequest> pending = {Req("big", 1, 3, 0), Req("small1", 1, 1, 1), Req("other", 2, 1, 2)};
  EXPECT_EQ(Ids(Schedule(agents, pending, {})), (std::vector<std::string>{"other"}));
}

TEST(SchedulerTest, NoDoubleAssignmentWithDuplicates) {
  std::vector<SchedAgent> agents = {Agent("a", 2), Agent("a", 2)};  // duplicated agent id
  agents[0].free_slots = {0, 0, 1};
  std::vector<SchedRequest> pending = {Req("r", 1, 1, 0), Req("r", 1, 1, 1), Req("s", 1, 1, 2),
                                       Req("t", 1, 1, 3)};
  auto as = Schedule(agents, pending, {});
  EXPECT_EQ(Ids(as), (std::vector<std::string>{"r", "s"}));
  ExpectNoDoubleAssignment(agents, as);
}


// A running allocation of `slots` slots on agent `agent` (slots first..).
SchedRunning Running(std::string id, int64_t group, std::string agent, std::vector<int> slots, int priority,
                 int64_t start_order, bool preemptible = true) {
  SchedRunning r;
  r.allocation_id = std::move(id);
  r.group_id = group;
  r.resource_pool = "default";
  r.slots = static_cast<int>(slots.size());
  r.placements = {SlotAssignment{std::move(agent), std::move(slots)}};
  r.priority = priority;
  r.start_order = start_order;
  r.preemptible = preemptible;
  return r;
}

std::vector<std::string> Victims(const SchedDecision& d) {
  std::vector<std::string> out;
  for (const Preemption& p : d.preempt) out.push_back(p.allocation_id);
  return out;
}

TEST(SchedulerTest, QueuePositionOrdersWithinPriorityAfterFairShare) {
  std::vector<SchedAgent> agents = {Agent("a", 1)};
  std::vector<SchedRequest> pending = {Req("first", 1, 1, 0), Req("moved", 2, 1, 1)};
  pending[0].queue_position = 10;
  pending[1].queue_position = 5;  // job update --ahead-of
  EXPECT_EQ(Ids(Schedule(agents, pending, {})), (std::vector<std::string>{"moved"}));
  // Fair share comes before queue_position: group 2 already holds a slot.
  agents = {Agent("a", 2)};
  agents[0].free_slots = {1};
  std::vector<SchedRunning> running = {Running("held", 2, "a", {0}, 42, 1)};
  EXPECT_EQ(Ids(Schedule(agents, pending, running)), (std::vector<std::string>{"first"}));
}

TEST(SchedulerTest, MaxSlotsCapsAGroupWithoutBlockingOthers) {
  std::vector<SchedAgent> agents = {Agent("a", 4)};
  agents[0].free_slots = {1, 2, 3};
  std::vector<SchedRequest> pending = {Req("A1", 1, 1, 0), Req("A2", 1, 1, 1), Req("B1", 2, 1, 2)};
  for (auto& r : pending) r.max_slots = r.group_id == 1 ? 2 : 0;
  std::vector<SchedRunning> running = {Running("A0", 1, "a", {0}, 42, 1)};
  // A holds 1 of its 2: A1 starts, A2 waits; B1 still starts.
  EXPECT_EQ(Ids(Schedule(agents, pending, running)), (std::vector<std::string>{"B1", "A1"}));
  // A stopping allocation still holds its slot.
  running[0].stopping = true;
  pending[0].max_slots = pending[1].max_slots = 1;
  EXPECT_EQ(Ids(Schedule(agents, pending, running)), (std::vector<std::string>{"B1"}));
  // A request bigger than the cap never starts and preempts nothing.
  std::vector<SchedRequest> big = {Req("big", 3, 2, 0)};
  big[0].max_slots = 1;
  big[0].priority = 1;
  std::vector<SchedRunning> low = {Running("low", 4, "a", {0, 1, 2, 3}, 50, 1)};
  agents[0].free_slots.clear();
  auto d = Decide(agents, big, low);
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.preempt.empty());
}

TEST(SchedulerTest, DisabledOrDrainingAgentsGetNothingAndFreeNothing) {
  std::vector<SchedAgent> agents = {Agent("a", 1), Agent("b", 1)};
  agents[0].enabled = false;  // disabled or draining
  agents[1].free_slots.clear();
  std::vector<SchedRequest> pending = {Req("urgent", 1, 1, 0)};
  pending[0].priority = 1;
  // The only lower-priority allocation runs on the disabled agent: preempting
  // it would not make room.
  std::vector<SchedRunning> running = {Running("low", 2, "a", {0}, 50, 1), Running("same", 3, "b", {0}, 1, 2)};
  auto d = Decide(agents, pending, running);
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.preempt.empty());
}

TEST(SchedulerTest, PreemptsTheNewestLowerPriorityAllocationAndOnlyOnce) {
  std::vector<SchedAgent> agents = {Agent("a", 2)};
  agents[0].free_slots.clear();
  std::vector<SchedRequest> pending = {Req("urgent", 9, 1, 5), Req("low-next", 1, 1, 6)};
  pending[0].priority = 1;
  pending[1].priority = 50;
  std::vector<SchedRunning> running = {Running("low-old", 1, "a", {0}, 50, 1), Running("low-new", 1, "a", {1}, 50, 2)};
  auto d = Decide(agents, pending, running);
  EXPECT_TRUE(d.start.empty());
  ASSERT_EQ(Victims(d), (std::vector<std::string>{"low-new"}));
  EXPECT_EQ(d.preempt[0].for_allocation_id, "urgent");
  EXPECT_EQ(d.preempt[0].for_group_id, 9);
  EXPECT_EQ(d.preempt[0].for_priority, 1);
  EXPECT_FALSE(d.preempt[0].fair_share);
  // Next pass: the victim is stopping; no second victim.
  running[1].stopping = true;
  d = Decide(agents, pending, running);
  EXPECT_TRUE(d.start.empty());
  EXPECT_TRUE(d.preempt.empty());
  // Its slot freed: the urgent request starts there, before the low one.
  running.pop_back();
  agents[0].free_slots = {1};
  d = Decide(agents, pending, running);
  EXPECT_EQ(Ids(d.start), (std::vector<std::string>{"urgent"}));
  EXPECT_TRUE(d.preempt.empty());
}

TEST(SchedulerTest, PreemptsTheFewestAllocations) {
  std::vector<SchedAgent> agents = {Agent("a", 2), Agent("b", 2)};
  agents[0].free_slots.clear();
  agents[1].free_slots.clear();
  std::vector<SchedRequest> pending = {Req("urgent", 9, 2, 0)};
  pending[0].priority = 1;
  // Two newer one-slot allocations on a, one older two-slot one on b.
  std::vector<SchedRunning> running = {Running("b-pair", 1, "b", {0, 1}, 50, 1), Running("a0", 2, "a", {0}, 50, 2),
                                       Running("a1", 3, "a", {1}, 50, 3)};
  EXPECT_EQ(Victims(Decide(agents, pending, running)), (std::vector<std::string>{"b-pair"}));
  // Three slots on one agent: no single victim suffices; newest first, pruned.
  agents = {Agent("c", 4)};
  agents[0].free_slots.clear();
  pending[0].slots = 3;
  running = {Running("c0", 1, "c", {0}, 50, 1), Running("c1", 2, "c", {1}, 50, 2),
             Running("c23", 3, "c", {2, 3}, 50, 3)};
  EXPECT_EQ(Victims(Decide(agents, pending, running)), (std::vector<std::string>{"c23", "c1"}));
  // The prune drops a victim the others made unnecessary: newest first takes
  // z, y and x (5 slots for 4); without z, y and x still make room.
  agents = {Agent("d", 5)};
  agents[0].free_slots.clear();
  running = {Running("x", 1, "d", {0, 1}, 50, 1), Running("y", 2, "d", {2, 3}, 50, 2),
             Running("z", 3, "d", {4}, 50, 3)};
  pending[0].slots = 4;
  EXPECT_EQ(Victims(Decide(agents, pending, running)), (std::vector<std::string>{"y", "x"}));
}

TEST(SchedulerTest, OnlyStrictlyLowerPriorityAndOnlyAfterProgress) {
  std::vector<SchedAgent> agents = {Agent("a", 2)};
  agents[0].free_slots.clear();
  std::vector<SchedRequest> pending = {Req("urgent", 9, 1, 0)};
  pending[0].priority = 10;
  std::vector<SchedRunning> running = {Running("same", 1, "a", {0}, 10, 1),
                                       Running("fresh", 2, "a", {1}, 50, 2, false)};
  running[0].preemptible = true;
  // "same" has the same priority (and its group holds no more than the fair
  // share), "fresh" made no progress since it started (no thrashing).
  EXPECT_TRUE(Decide(agents, pending, running).preempt.empty());
  running[1].preemptible = true;
  EXPECT_EQ(Victims(Decide(agents, pending, running)), (std::vector<std::string>{"fresh"}));
}

TEST(SchedulerTest, NeverPreemptsWhenEveryCandidateWouldNotMakeRoom) {
  std::vector<SchedAgent> agents = {Agent("a", 2)};
  agents[0].free_slots.clear();
  std::vector<SchedRequest> pending = {Req("huge", 9, 3, 0)};  // more than the pool has
  pending[0].priority = 1;
  std::vector<SchedRunning> running = {Running("l0", 1, "a", {0}, 50, 1), Running("l1", 2, "a", {1}, 50, 2)};
  EXPECT_TRUE(Decide(agents, pending, running).preempt.empty());
  // Two slots, but one holder is of a higher priority than the request.
  pending[0].slots = 2;
  running[0].priority = 1;
  EXPECT_TRUE(Decide(agents, pending, running).preempt.empty());
}

TEST(SchedulerTest, StoppingAllocationsCountAsFreeingAndReserve) {
  std::vector<SchedAgent> agents = {Agent("a", 3)};
  agents[0].free_slots = {2};
  std::vector<SchedRequest> pending = {Req("urgent", 9, 2, 0), Req("low", 1, 1, 1)};
  pending[0].priority = 1;
  pending[1].priority = 50;
  std::vector<SchedRunning> running = {Running("leaving", 1, "a", {0}, 50, 1), Running("staying", 2, "a", {1}, 50, 2)};
  running[0].stopping = true;
  // urgent fits on the free slot plus the one on its way out: no victim,
  // and the free slot is kept for it.
  auto d = Decide(agents, pending, running);
  EXPECT_TRUE(d.preempt.empty());
  EXPECT_TRUE(d.start.empty());
}

TEST(SchedulerTest, DistributedAllocationIsPreemptedWhole) {
  std::vector<SchedAgent> agents = {Agent("a", 1), Agent("b", 1)};
  agents[0].free_slots.clear();
  agents[1].free_slots.clear();
  SchedRunning dist = Running("dist", 1, "a", {0}, 50, 1);
  dist.slots = 2;
  dist.placements.push_back(SlotAssignment{"b", {0}});
  std::vector<SchedRequest> pending = {Req("u1", 8, 1, 0), Req("u2", 9, 1, 1)};
  pending[0].priority = pending[1].priority = 1;
  auto d = Decide(agents, pending, {dist});
  // One victim for u1; u2 waits for the victim's other slot (no second pick).
  EXPECT_EQ(Victims(d), (std::vector<std::string>{"dist"}));
  EXPECT_EQ(d.preempt[0].for_allocation_id, "u1");
  EXPECT_TRUE(d.start.empty());
}

TEST(SchedulerTest, PreemptionCanBeTurnedOff) {
  std::vector<SchedAgent> agents = {Agent("a", 1)};
  agents[0].free_slots.clear();
  std::vector<SchedRequest> pending = {Req("urgent", 9, 1, 0)};
  pending[0].priority = 1;
  pending[0].may_preempt = false;
  EXPECT_TRUE(Decide(agents, pending, {Running("low", 1, "a", {0}, 50, 1)}).preempt.empty());
}

TEST(SchedulerTest, FairShareRebalancesWithinAPriorityWithHysteresis) {
  std::vector<SchedAgent> agents = {Agent("a", 4)};
  agents[0].free_slots.clear();
  std::vector<SchedRunning> running;
  for (int i = 0; i < 4; ++i) running.push_back(Running("A" + std::to_string(i), 1, "a", {i}, 42, i + 1));
  std::vector<SchedRequest> pending = {Req("B0", 2, 1, 10), Req("B1", 2, 1, 11)};
  // B holds nothing, A all 4: A's newest is preempted for B0; B1 waits its turn.
  auto d = Decide(agents, pending, running);
  ASSERT_EQ(Victims(d), (std::vector<std::string>{"A3"}));
  EXPECT_TRUE(d.preempt[0].fair_share);
  EXPECT_EQ(d.preempt[0].for_allocation_id, "B0");
  // Settled at 2 and 2: A's pending trial does not take a slot back.
  running.resize(2);
  running.push_back(Running("B0", 2, "a", {2}, 42, 5));
  running.push_back(Running("B1", 2, "a", {3}, 42, 6));
  pending = {Req("A2", 1, 1, 12), Req("A3", 1, 1, 13)};
  EXPECT_TRUE(Decide(agents, pending, running).preempt.empty());
  // Weights: B (weight 3) may take a third slot from A (weight 1): after it,
  // B's share 3/3 = 1 <= A's 1/1 = 1.
  pending = {Req("B2", 2, 1, 14)};
  pending[0].weight = 3;
  for (auto& r : running) r.weight = r.group_id == 2 ? 3 : 1;
  EXPECT_EQ(Victims(Decide(agents, pending, running)), (std::vector<std::string>{"A1"}));
  // Other priorities are not fair-share peers.
  for (auto& r : running) r.priority = r.group_id == 1 ? 10 : 42;
  EXPECT_TRUE(Decide(agents, pending, running).preempt.empty());
}

TEST(SchedulerTest, DecisionsAreDeterministic) {
  std::vector<SchedAgent> agents = {Agent("a", 2), Agent("b", 2)};
  agents[0].free_slots = {1};
  agents[1].free_slots.clear();
  std::vector<SchedRequest> pending = {Req("u", 9, 2, 0), Req("x", 3, 1, 1)};
  pending[0].priority = 1;
  std::vector<SchedRunning> running = {Running("l0", 1, "a", {0}, 50, 1), Running("l1", 2, "b", {0, 1}, 50, 2)};
  auto d1 = Decide(agents, pending, running);
  auto d2 = Decide(agents, pending, running);
  EXPECT_EQ(Ids(d1.start), Ids(d2.start));
  EXPECT_EQ(Victims(d1), Victims(d2));
  // The newest single victim that makes room: l1's two slots on b; a's
  // free slot is not needed by u and goes to x.
  EXPECT_EQ(Victims(d1), (std::vector<std::string>{"l1"}));
  EXPECT_EQ(Ids(d1.start), (std::vector<std::string>{"x"}));
}

}  // namespace
}  // namespace master
}  // namespace det
