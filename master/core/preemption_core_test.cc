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
#include "common/det_version.h"
#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

class PreemptionCoreTest : public MasterCoreFixture {
 protected:
  void Customize(MasterOptions* options) override { options->resource_pools = pools_; }

  // Restarts the master with `pools` as its resource pools.
  void Start(ResourcePoolsConfig pools) {
    pools_ = std::move(pools);
    Restart();
  }

  std::shared_ptr<AgentSession> Agent(const std::string& id, int slots) {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_version(det::kDetVersion);
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
    return CreateActiveExperiment(yaml);
  }

  bool Preempted(const agentv1::StartAllocation& start) {
    trialv1::ShouldPreemptRequest req;
    req.set_allocation_id(start.allocation_id());
    req.set_timeout_ms(0);
    auto resp = core_->ShouldPreempt(req, start.allocation_token());
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() && resp->preempt();
  }

  ResourcePoolsConfig pools_;
  std::string pool_;
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

  Train(low_start, 10);
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
  Train(starts[0], 10);
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
