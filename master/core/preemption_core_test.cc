// MasterCore's wiring of the scheduler's preemptions, with no processes: a
// better-priority experiment preempts a worse one's trial only once that
// trial made progress, exactly once, through the usual preemption path
// (ShouldPreempt), with a trial log line and Trial.preemption; the freed
// slot goes to the urgent trial; max_slots is read from the experiment.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "master/core/master_core.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

class PreemptionCoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(ResourcePoolsConfig()); }

  void Start(ResourcePoolsConfig pools) {
    core_.reset();
    MasterOptions options;
    options.resource_pools = std::move(pools);
    options.data_dir = dir_.path();
    options.clock = clock_;
    options.background_thread = false;
    auto core = MasterCore::Create(options);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = *std::move(core);
  }

  std::shared_ptr<AgentSession> Agent(const std::string& id, int slots) {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_hostname("localhost");
    req.set_resource_pool(pool_);
    for (int i = 0; i < slots; ++i) req.add_devices()->set_id(i);
    auto resp = core_->RegisterAgent(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return nullptr;
    auto session = core_->AttachAgent(resp->session_token());
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *session : nullptr;
  }

  // A one-trial experiment with `resources` lines added (e.g. "priority: 1").
  int64_t CreateExperiment(const std::string& resources, const std::string& searcher = "") {
    std::string yaml = det::testing::SingleTrialConfig("preempt", dir_ / "checkpoints", 1);
    yaml = absl::StrReplaceAll(yaml, {{"resources:\n", absl::StrCat("resources:\n  ", resources, "\n")}});
    if (!searcher.empty()) yaml = absl::StrReplaceAll(yaml, {{"  name: single\n", searcher}});
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(yaml);
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(true);
    auto resp = core_->CreateExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->experiment().id() : 0;
  }

  static std::vector<agentv1::StartAllocation> Starts(AgentSession& session) {
    std::vector<agentv1::StartAllocation> out;
    agentv1::MasterMessage msg;
    while (session.Pop(&msg, std::chrono::milliseconds(0))) {
      if (msg.has_start_allocation()) out.push_back(msg.start_allocation());
    }
    return out;
  }

  void ReportTraining(const agentv1::StartAllocation& start, int64_t batches) {
    trialv1::ReportTrainingMetricsRequest req;
    req.set_allocation_id(start.allocation_id());
    auto* row = req.add_rows();
    row->set_total_batches(batches);
    (*row->mutable_metrics())["loss"] = 1.0;
    auto resp = core_->ReportTrainingMetrics(req, start.allocation_token());
    ASSERT_TRUE(resp.ok()) << resp.status();
  }

  bool Preempted(const agentv1::StartAllocation& start) {
    trialv1::ShouldPreemptRequest req;
    req.set_allocation_id(start.allocation_id());
    req.set_timeout_ms(0);
    auto resp = core_->ShouldPreempt(req, start.allocation_token());
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() && resp->preempt();
  }

  void Exited(const std::string& agent_id, const std::string& allocation_id) {
    agentv1::AgentMessage msg;
    auto* ps = msg.mutable_process_state();
    ps->set_allocation_id(allocation_id);
    ps->set_rank(0);
    ps->set_state(agentv1::PROCESS_STATE_TERMINATED);
    ps->set_exit_code(0);
    core_->HandleAgentMessage(agent_id, msg);
  }

  apiv1::Trial Trial(int64_t id) {
    apiv1::GetTrialRequest req;
    req.set_trial_id(id);
    auto resp = core_->GetTrial(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->trial() : apiv1::Trial();
  }

  std::string TrialLogs(int64_t trial_id) {
    apiv1::TrialLogsRequest req;
    req.set_trial_id(trial_id);
    auto batch = core_->ReadTrialLogs(req, 0, 1000);
    EXPECT_TRUE(batch.ok()) << batch.status();
    std::string out;
    if (batch.ok()) {
      for (const auto& l : batch->logs.logs()) absl::StrAppend(&out, l.message(), "\n");
    }
    return out;
  }

  std::string pool_;
  det::testing::TempDir dir_;
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::unique_ptr<MasterCore> core_;
};

TEST_F(PreemptionCoreTest, BetterPriorityPreemptsOnceAfterProgressAndTakesTheSlot) {
  auto a = Agent("a", 1);
  const int64_t low = CreateExperiment("priority: 50");
  core_->RunBackgroundPass();
  auto starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
  const agentv1::StartAllocation low_start = starts[0];
  const int64_t low_trial = low_start.trial_id();

  const int64_t urgent = CreateExperiment("priority: 1");
  core_->RunBackgroundPass();
  // No progress yet since it started: not preempted.
  EXPECT_FALSE(Preempted(low_start));
  EXPECT_EQ(Trial(low_trial).preemption(), "");

  ReportTraining(low_start, 10);
  core_->RunBackgroundPass();
  EXPECT_TRUE(Preempted(low_start));
  const std::string why = absl::StrCat("preempted for experiment ", urgent, " (priority 1)");
  EXPECT_THAT(Trial(low_trial).preemption(), HasSubstr(why));
  const std::string line = absl::StrCat("[det-master] trial ", low_trial, " ", why);
  EXPECT_THAT(TrialLogs(low_trial), HasSubstr(line));
  // The decision is not repeated at later passes.
  core_->RunBackgroundPass();
  core_->RunBackgroundPass();
  const std::string logs = TrialLogs(low_trial);
  EXPECT_EQ(logs.find(line), logs.rfind(line)) << logs;
  EXPECT_TRUE(Starts(*a).empty());

  // The low trial exits (checkpointed): the urgent trial gets the slot, the
  // low one waits, still saying why.
  Exited("a", low_start.allocation_id());
  starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].experiment_id(), urgent);
  EXPECT_EQ(Trial(low_trial).allocation_id(), "");
  EXPECT_EQ(Trial(low_trial).restarts(), 0);
  EXPECT_THAT(Trial(low_trial).preemption(), HasSubstr(why));
  EXPECT_EQ(low, Trial(low_trial).experiment_id());

  // The urgent trial ends (killed here): the low one resumes, and the note
  // is gone.
  apiv1::KillExperimentRequest kill;
  kill.set_experiment_id(urgent);
  ASSERT_TRUE(core_->KillExperiment(kill).ok());
  Exited("a", starts[0].allocation_id());
  core_->RunBackgroundPass();
  starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
  EXPECT_EQ(starts[0].trial_id(), low_trial);
  EXPECT_EQ(Trial(low_trial).preemption(), "");
}

// A pool declared with `preemption: false` never preempts for its jobs: the
// urgent trial waits for the slot.
TEST_F(PreemptionCoreTest, PoolWithPreemptionOffNeverPreempts) {
  auto pools = ParseResourcePools("resource_pools:\n  - pool_name: calm\n    preemption: false\n", "pools.yaml");
  ASSERT_TRUE(pools.ok()) << pools.status();
  Start(*pools);
  pool_ = "calm";
  auto a = Agent("a", 1);
  CreateExperiment("priority: 50");
  core_->RunBackgroundPass();
  auto starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
  CreateExperiment("priority: 1");
  ReportTraining(starts[0], 10);
  core_->RunBackgroundPass();
  core_->RunBackgroundPass();
  EXPECT_FALSE(Preempted(starts[0]));
  EXPECT_EQ(Trial(starts[0].trial_id()).preemption(), "");
  EXPECT_TRUE(Starts(*a).empty());
}

TEST_F(PreemptionCoreTest, MaxSlotsHoldsBackTheSecondTrial) {
  auto a = Agent("a", 2);
  CreateExperiment("max_slots: 1", "  name: random\n  max_trials: 2\n");
  core_->RunBackgroundPass();
  auto starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
  core_->RunBackgroundPass();
  EXPECT_TRUE(Starts(*a).empty());
  Exited("a", starts[0].allocation_id());
  core_->RunBackgroundPass();
  starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
}

}  // namespace
}  // namespace det::master
