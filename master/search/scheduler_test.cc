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

}  // namespace
}  // namespace master
}  // namespace det
