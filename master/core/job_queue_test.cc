// The job queue in process: the pure order and position rules
// (job_queue.h), and MasterCore's GetJobQueue / UpdateJob with agents
// played by calling the det.agent.v1 entry points (no processes, no
// sleeps; the background pass runs when a test says so).
#include "master/core/job_queue.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/det_version.h"
#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---- pure rules

TEST(JobOrderTest, PriorityThenShareThenPositionThenId) {
  JobOrderKey a{"default", 10, 5, 9, 9};
  JobOrderKey b{"default", 20, 0, 1, 1};
  EXPECT_TRUE(JobBefore(a, b)) << "lower priority number first, whatever the share";
  b.priority = 10;
  EXPECT_TRUE(JobBefore(b, a)) << "then the smaller share";
  b.share = 5;
  EXPECT_TRUE(JobBefore(b, a)) << "then the smaller position";
  b.queue_position = 9;
  EXPECT_TRUE(JobBefore(b, a)) << "then the smaller id";
  EXPECT_FALSE(JobBefore(a, a));
  JobOrderKey other{"a-pool", 99, 100, 100, 100};
  EXPECT_TRUE(JobBefore(other, b)) << "pools by name";
}

TEST(JobOrderTest, PositionNextToGoesMidwayOrOnePastTheEnd) {
  const std::vector<QueuedJob> level = {{1, 1.0}, {2, 2.0}, {3, 4.0}};
  EXPECT_EQ(PositionNextTo(level, 1, /*ahead=*/true), 1.5);
  EXPECT_EQ(PositionNextTo(level, 1, /*ahead=*/false), 3.0);
  EXPECT_EQ(PositionNextTo(level, 0, /*ahead=*/true), 0.0);
  EXPECT_EQ(PositionNextTo(level, 2, /*ahead=*/false), 5.0);
  const std::vector<QueuedJob> tight = {{1, 1.0}, {2, 1.0 + 1e-7}};
  EXPECT_EQ(PositionNextTo(tight, 1, true), std::nullopt) << "no room: renumber first";
  EXPECT_EQ(PositionNextTo(tight, 0, false), std::nullopt);
  const std::vector<QueuedJob> equal = {{1, 3.0}, {2, 3.0}};
  EXPECT_EQ(PositionNextTo(equal, 1, true), std::nullopt);
}

TEST(JobOrderTest, ValidateUpdateJobNamesTheField) {
  auto check = [](auto fill, const std::string& field) {
    apiv1::UpdateJobRequest req;
    req.set_job_id("exp-1");
    fill(req);
    absl::Status st = ValidateUpdateJob(req);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(st.message()), HasSubstr(field));
  };
  check([](auto& r) { r.set_priority(0); }, "priority");
  check([](auto& r) { r.set_priority(100); }, "priority");
  check([](auto& r) { r.set_weight(0); }, "weight");
  check([](auto& r) { r.set_weight(-1); }, "weight");
  check([](auto& r) { r.set_weight(std::numeric_limits<double>::quiet_NaN()); }, "weight");
  check([](auto& r) { r.set_weight(std::numeric_limits<double>::infinity()); }, "weight");
  check([](auto& r) { r.set_max_slots(-1); }, "max_slots");
  check([](auto& r) { r.set_max_slots(1000001); }, "max_slots");
  check(
      [](auto& r) {
        r.set_ahead_of("exp-2");
        r.set_behind("exp-3");
      },
      "ahead_of, behind");
  check(
      [](auto& r) {
        r.set_behind("exp-2");
        r.set_priority(5);
      },
      "behind");
  apiv1::UpdateJobRequest ok;
  ok.set_priority(1);
  ok.set_weight(0.5);
  ok.set_max_slots(0);
  EXPECT_TRUE(ValidateUpdateJob(ok).ok());
  ok.set_priority(99);
  ok.set_max_slots(1000000);
  EXPECT_TRUE(ValidateUpdateJob(ok).ok());
}

TEST(JobOrderTest, ParseJobRef) {
  EXPECT_EQ(ParseJobRef("exp-7", "ahead_of").value(), 7);
  EXPECT_EQ(ParseJobRef("7", "ahead_of").value(), 7);
  for (const char* bad : {"", "exp-", "exp-0", "exp--1", "job-7", "exp-7x", "99999999999999999999"}) {
    auto r = ParseJobRef(bad, "behind");
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("behind")) << bad;
  }
}

// ---- MasterCore

class JobQueueTest : public MasterCoreFixture {
 protected:

  std::shared_ptr<AgentSession> Agent(const std::string& id, int slots, const std::string& pool = "") {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_version(det::kDetVersion);
    req.set_hostname("localhost");
    req.set_resource_pool(pool);
    for (int i = 0; i < slots; ++i) req.add_devices()->set_id(i);
    auto resp = core_->RegisterAgent(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return nullptr;
    auto session = core_->AttachAgent(resp->session_token());
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *session : nullptr;
  }

  int64_t Create(const std::string& name, int priority, const std::string& pool = "") {
    std::string resources = absl::StrCat("resources:\n  priority: ", priority, "\n");
    if (!pool.empty()) absl::StrAppend(&resources, "  resource_pool: ", pool, "\n");
    return CreateActiveExperiment(absl::StrReplaceAll(det::testing::SingleTrialConfig(name, dir_ / "checkpoints"),
                                                      {{"resources:\n", resources}}));
  }

  std::vector<std::string> Queue(const std::string& pool = "") {
    apiv1::GetJobQueueRequest req;
    req.set_resource_pool(pool);
    auto resp = core_->GetJobQueue(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    std::vector<std::string> out;
    if (!resp.ok()) return out;
    for (const auto& j : resp->jobs()) out.push_back(j.job_id());
    return out;
  }
  apiv1::Job JobOf(int64_t id) {
    auto resp = core_->GetJobQueue(apiv1::GetJobQueueRequest());
    if (resp.ok()) {
      for (const auto& j : resp->jobs()) {
        if (j.experiment_id() == id) return j;
      }
    }
    ADD_FAILURE() << "no job for experiment " << id;
    return apiv1::Job();
  }
  absl::StatusOr<apiv1::UpdateJobResponse> Update(int64_t id, const std::function<void(apiv1::UpdateJobRequest&)>& fill) {
    apiv1::UpdateJobRequest req;
    req.set_job_id(absl::StrCat("exp-", id));
    fill(req);
    return core_->UpdateJob(req);
  }
  apiv1::Experiment Experiment(int64_t id) {
    apiv1::GetExperimentRequest req;
    req.set_experiment_id(id);
    auto resp = core_->GetExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->experiment() : apiv1::Experiment();
  }
  // Kills experiment `id` whose one allocation runs on agent `agent`, and
  // reports its process gone.
  void KillRunning(int64_t id, const std::string& agent, const std::string& allocation_id) {
    apiv1::KillExperimentRequest kill;
    kill.set_experiment_id(id);
    ASSERT_TRUE(core_->KillExperiment(kill).ok());
    agentv1::AgentMessage msg;
    auto* ps = msg.mutable_process_state();
    ps->set_allocation_id(allocation_id);
    ps->set_rank(0);
    ps->set_state(agentv1::PROCESS_STATE_TERMINATED);
    ps->set_exit_code(137);
    core_->HandleAgentMessage(agent, msg);
  }
};

TEST_F(JobQueueTest, ListsJobsInSchedulingOrderAndPlacesTheRaisedOneFirst) {
  auto agent = Agent("a", 1);
  const int64_t a = Create("a", 10);
  const int64_t b = Create("b", 50);
  const int64_t c = Create("c", 50);
  core_->RunBackgroundPass();
  auto starts = Starts(*agent);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].experiment_id(), a);
  EXPECT_THAT(Queue(), ElementsAre(absl::StrCat("exp-", a), absl::StrCat("exp-", b), absl::StrCat("exp-", c)));
  apiv1::Job ja = JobOf(a);
  EXPECT_EQ(ja.state(), apiv1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(ja.queue_position(), 0);
  EXPECT_EQ(ja.priority(), 10);
  EXPECT_EQ(ja.requested_slots(), 1);
  EXPECT_EQ(ja.allocated_slots(), 1);
  ASSERT_EQ(ja.allocations_size(), 1);
  EXPECT_EQ(ja.allocations(0).state(), apiv1::ALLOCATION_STATE_RUNNING);
  EXPECT_THAT(ja.allocations(0).agent_ids(), ElementsAre("a"));
  apiv1::Job jc = JobOf(c);
  EXPECT_EQ(jc.state(), apiv1::JOB_STATE_QUEUED);
  EXPECT_EQ(jc.queue_position(), 2);
  EXPECT_EQ(jc.requested_slots(), 1);
  EXPECT_EQ(jc.allocated_slots(), 0);
  ASSERT_EQ(jc.allocations_size(), 1);
  EXPECT_EQ(jc.allocations(0).state(), apiv1::ALLOCATION_STATE_PENDING);
  EXPECT_EQ(jc.resource_pool(), "default");
  EXPECT_EQ(jc.weight(), 1);

  // C moves ahead of B: it takes B's priority and a place before it.
  auto moved = Update(c, [&](auto& r) { r.set_ahead_of(absl::StrCat("exp-", b)); });
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->job().queue_position(), 1);
  EXPECT_EQ(moved->job().priority(), 50);
  EXPECT_THAT(Queue(), ElementsAre(absl::StrCat("exp-", a), absl::StrCat("exp-", c), absl::StrCat("exp-", b)));
  // And back behind it ("<id>" works too).
  ASSERT_TRUE(Update(c, [&](auto& r) { r.set_behind(absl::StrCat(b)); }).ok());
  EXPECT_THAT(Queue(), ElementsAre(absl::StrCat("exp-", a), absl::StrCat("exp-", b), absl::StrCat("exp-", c)));

  // A more urgent priority puts C before B; A still runs (no preemption).
  auto raised = Update(c, [](auto& r) { r.set_priority(40); });
  ASSERT_TRUE(raised.ok()) << raised.status();
  EXPECT_EQ(raised->job().priority(), 40);
  EXPECT_THAT(Queue(), ElementsAre(absl::StrCat("exp-", a), absl::StrCat("exp-", c), absl::StrCat("exp-", b)));
  EXPECT_TRUE(Starts(*agent).empty());

  // When A's slot frees, C is placed, not B.
  KillRunning(a, "a", starts[0].allocation_id());
  core_->RunBackgroundPass();
  auto next = Starts(*agent);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].experiment_id(), c);
  EXPECT_EQ(JobOf(b).state(), apiv1::JOB_STATE_QUEUED);
  EXPECT_EQ(JobOf(c).state(), apiv1::JOB_STATE_SCHEDULED);
  EXPECT_THAT(Queue(), ElementsAre(absl::StrCat("exp-", c), absl::StrCat("exp-", b))) << "A ended: no job";

  // States filter and pagination.
  apiv1::GetJobQueueRequest queued;
  queued.add_states(apiv1::JOB_STATE_QUEUED);
  auto only = core_->GetJobQueue(queued);
  ASSERT_TRUE(only.ok());
  ASSERT_EQ(only->jobs_size(), 1);
  EXPECT_EQ(only->jobs(0).experiment_id(), b);
  EXPECT_EQ(only->jobs(0).queue_position(), 1) << "the position in the pool, not in the filtered list";
  apiv1::GetJobQueueRequest page;
  page.set_offset(1);
  page.set_limit(5000);
  auto paged = core_->GetJobQueue(page);
  ASSERT_TRUE(paged.ok());
  ASSERT_EQ(paged->jobs_size(), 1);
  EXPECT_EQ(paged->pagination().total(), 2);
  EXPECT_EQ(paged->pagination().limit(), 1000);
  EXPECT_EQ(paged->pagination().start_index(), 1);
  EXPECT_EQ(paged->pagination().end_index(), 2);
}

TEST_F(JobQueueTest, BadRequestsAreRefusedAndChangeNothing) {
  Agent("a", 1);
  Agent("g", 1, "other");
  const int64_t a = Create("a", 10);
  const int64_t b = Create("b", 50);
  const int64_t g = Create("g", 50, "other");
  core_->RunBackgroundPass();
  auto code = [&](int64_t id, const std::function<void(apiv1::UpdateJobRequest&)>& fill) {
    return Update(id, fill).status().code();
  };
  EXPECT_EQ(code(b, [](auto& r) { r.set_priority(0); }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(b, [](auto& r) { r.set_weight(-2); }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(b, [](auto& r) { r.set_max_slots(-1); }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(b, [&](auto& r) { r.set_ahead_of(absl::StrCat("exp-", b)); }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(b, [](auto& r) { r.set_ahead_of("exp-999"); }), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(b, [](auto& r) { r.set_ahead_of("nonsense"); }), absl::StatusCode::kInvalidArgument);
  // Another pool's job; a weight given with it is not applied either.
  auto other_pool = Update(b, [&](auto& r) {
    r.set_weight(3);
    r.set_behind(absl::StrCat("exp-", g));
  });
  EXPECT_EQ(other_pool.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(other_pool.status().message()), HasSubstr("'other'"));
  EXPECT_EQ(JobOf(b).weight(), 1);
  EXPECT_EQ(code(999, [](auto& r) { r.set_priority(5); }), absl::StatusCode::kNotFound);
  apiv1::UpdateJobRequest malformed;
  malformed.set_job_id("exp-x");
  malformed.set_priority(5);
  EXPECT_EQ(core_->UpdateJob(malformed).status().code(), absl::StatusCode::kInvalidArgument);

  // A terminal experiment's job: FailedPrecondition, for it and as a target.
  apiv1::KillExperimentRequest kill;
  kill.set_experiment_id(a);
  ASSERT_TRUE(core_->KillExperiment(kill).ok());
  apiv1::Job ja = JobOf(a);  // still stopping: its allocation runs
  ASSERT_EQ(ja.allocations_size(), 1);
  EXPECT_EQ(ja.allocations(0).state(), apiv1::ALLOCATION_STATE_TERMINATING);
  agentv1::AgentMessage gone;
  gone.mutable_process_state()->set_allocation_id(ja.allocations(0).allocation_id());
  gone.mutable_process_state()->set_state(agentv1::PROCESS_STATE_TERMINATED);
  gone.mutable_process_state()->set_exit_code(137);
  core_->HandleAgentMessage("a", gone);
  ASSERT_EQ(Experiment(a).state(), apiv1::STATE_CANCELED);
  auto terminal = Update(a, [](auto& r) { r.set_priority(5); });
  EXPECT_EQ(terminal.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(terminal.status().message()), HasSubstr("CANCELED"));
  EXPECT_EQ(code(b, [&](auto& r) { r.set_ahead_of(absl::StrCat("exp-", a)); }),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(JobOf(b).priority(), 50);

  // Listing: bad paging and unknown pools.
  apiv1::GetJobQueueRequest bad;
  bad.set_offset(-1);
  auto st = core_->GetJobQueue(bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("offset"));
  bad.set_offset(0);
  bad.set_limit(-1);
  st = core_->GetJobQueue(bad).status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("limit"));
  apiv1::GetJobQueueRequest unknown;
  unknown.set_resource_pool("nowhere");
  st = core_->GetJobQueue(unknown).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr("nowhere"));
  EXPECT_THAT(Queue("other"), ElementsAre(absl::StrCat("exp-", g)));
}

TEST_F(JobQueueTest, ChangesAreStoredAndSurviveARestart) {
  Agent("a", 1);
  const int64_t a = Create("a", 10);
  const int64_t b = Create("b", 50);
  const int64_t c = Create("c", 50);
  core_->RunBackgroundPass();
  ASSERT_TRUE(Update(c, [&](auto& r) { r.set_ahead_of(absl::StrCat("exp-", b)); }).ok());
  auto set = Update(b, [](auto& r) {
    r.set_weight(2.5);
    r.set_max_slots(3);
  });
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->job().max_slots(), 3);
  apiv1::Experiment eb = Experiment(b);
  EXPECT_EQ(eb.priority(), 50);
  EXPECT_EQ(eb.weight(), 2.5);
  EXPECT_EQ(eb.max_slots(), 3);
  EXPECT_EQ(eb.job_id(), absl::StrCat("exp-", b));
  EXPECT_EQ(Experiment(a).priority(), 10) << "the config's";

  Restart();
  EXPECT_THAT(Queue(), ElementsAre(absl::StrCat("exp-", a), absl::StrCat("exp-", c), absl::StrCat("exp-", b)));
  eb = Experiment(b);
  EXPECT_EQ(eb.weight(), 2.5);
  EXPECT_EQ(eb.max_slots(), 3);
  // max_slots 0 removes the cap.
  ASSERT_TRUE(Update(b, [](auto& r) { r.set_max_slots(0); }).ok());
  Restart();
  EXPECT_EQ(Experiment(b).max_slots(), 0);
}

TEST_F(JobQueueTest, MovesThatRunOutOfRoomRenumberThePool) {
  Agent("a", 1);
  const int64_t first = Create("first", 10);  // runs (and stays first: more urgent)
  const int64_t b = Create("b", 50);
  const int64_t c = Create("c", 50);
  const int64_t d = Create("d", 50);
  core_->RunBackgroundPass();
  // Moving C and D ahead of each other in turn halves the gap after B each
  // time: after ~20 moves there is no room left and the pool is renumbered.
  for (int i = 0; i < 60; ++i) {
    const int64_t mover = i % 2 == 0 ? d : c;
    const int64_t target = i % 2 == 0 ? c : d;
    auto r = Update(mover, [&](auto& req) { req.set_ahead_of(absl::StrCat("exp-", target)); });
    ASSERT_TRUE(r.ok()) << i << ": " << r.status();
    EXPECT_THAT(Queue(), ElementsAre(absl::StrCat("exp-", first), absl::StrCat("exp-", b),
                                     absl::StrCat("exp-", mover), absl::StrCat("exp-", target)))
        << "move " << i;
  }
  Restart();
  EXPECT_THAT(Queue(), ElementsAre(absl::StrCat("exp-", first), absl::StrCat("exp-", b), absl::StrCat("exp-", c),
                                   absl::StrCat("exp-", d)));
}

}  // namespace
}  // namespace det::master
