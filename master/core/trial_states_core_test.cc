// Trial and exit states that say what happened (issue 45), with no
// processes: the test plays the agent and the trial runtime through the
// det.agent.v1 and det.trial.v1 entry points. For each of waiting for
// promotion, paused by the user, preempted and completed: the exit reason the
// runtime is given (Operation.exit_reason, ShouldPreemptResponse.reason),
// Trial.state and Trial.state_reason (what REST and det-cli show), and the
// trial's log line.
#include <cstdio>
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

using ::testing::HasSubstr;
using ::testing::Not;

// async_halving, 3 trials, rungs at 50 and 100 batches, divisor 2: the first
// trial's rung-0 result promotes nobody (floor(1/2) = 0), so it waits.
std::string AshaConfig(const std::string& checkpoint_dir) {
  return absl::StrReplaceAll(det::testing::SingleTrialConfig("states", checkpoint_dir, 1),
                             {{"  name: single\n", "  name: async_halving\n  num_rungs: 2\n  divisor: 2\n"
                                                   "  max_trials: 3\n"}});
}

class TrialStatesTest : public MasterCoreFixture {
 protected:
  // Registers agent `id` (again after a restart, still running `running`).
  std::shared_ptr<AgentSession> Agent(const std::string& id, int slots, const std::vector<std::string>& running = {}) {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_version(det::kDetVersion);
    req.set_hostname("localhost");
    for (int i = 0; i < slots; ++i) req.add_devices()->set_id(i);
    for (const auto& r : running) req.add_running_allocation_ids(r);
    req.set_agent_credential(credential_);
    auto resp = core_->RegisterAgent(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    if (!resp.ok()) return nullptr;
    if (!resp->agent_credential().empty()) credential_ = resp->agent_credential();
    auto session = core_->AttachAgent(resp->session_token());
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? *session : nullptr;
  }

  // The background pass, then the StartAllocations queued for `session`.
  std::vector<agentv1::StartAllocation> Starts(AgentSession& session) {
    core_->RunBackgroundPass();
    return MasterCoreFixture::Starts(session);
  }

  trialv1::Operation Next(const agentv1::StartAllocation& s, int64_t completed_op, int64_t batches) {
    trialv1::GetNextOperationRequest req;
    req.set_allocation_id(s.allocation_id());
    req.set_completed_op_id(completed_op);
    req.set_total_batches(batches);
    auto resp = core_->GetNextOperation(req, s.allocation_token());
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->operation() : trialv1::Operation();
  }

  void Validate(const agentv1::StartAllocation& s, const trialv1::Operation& op, int64_t batches, double metric) {
    trialv1::ReportValidationMetricsRequest v;
    v.set_allocation_id(s.allocation_id());
    auto* row = v.add_rows();
    row->set_total_batches(batches);
    (*row->mutable_metrics())["validation_loss"] = metric;
    ASSERT_TRUE(core_->ReportValidationMetrics(v, s.allocation_token()).ok());
    trialv1::CompleteSearcherOperationRequest done;
    done.set_allocation_id(s.allocation_id());
    done.set_op_id(op.op_id());
    done.set_searcher_metric(metric);
    ASSERT_TRUE(core_->CompleteSearcherOperation(done, s.allocation_token()).ok());
  }

  void Checkpoint(const agentv1::StartAllocation& s, int64_t batches) {
    char uuid[40];
    std::snprintf(uuid, sizeof(uuid), "00000000-0000-4000-8000-%012d", ++checkpoints_);
    trialv1::ReportCheckpointRequest req;
    req.set_allocation_id(s.allocation_id());
    req.set_uuid(uuid);
    req.set_total_batches(batches);
    ASSERT_TRUE(core_->ReportCheckpoint(req, s.allocation_token()).ok());
  }

  // Plays the runtime: runs the master's operations after op `done`, from
  // `batches` (TRAIN
  // reports the target, VALIDATE reports `metric`, CHECKPOINT writes one)
  // until EXIT, and returns that EXIT. A WAIT is a failure (the trial would
  // hold its slot).
  trialv1::Operation RunToExit(const agentv1::StartAllocation& s, int64_t batches, double metric,
                               int64_t done = 0) {
    for (int i = 0; i < 50; ++i) {
      trialv1::Operation op = Next(s, done, batches);
      done = op.op_id();
      switch (op.kind()) {
        case trialv1::OPERATION_KIND_TRAIN:
          batches = op.target_total_batches();
          Train(s, batches);
          break;
        case trialv1::OPERATION_KIND_VALIDATE:
          Validate(s, op, batches, metric);
          break;
        case trialv1::OPERATION_KIND_CHECKPOINT:
          Checkpoint(s, batches);
          break;
        case trialv1::OPERATION_KIND_EXIT:
          return op;
        default:
          ADD_FAILURE() << "operation " << op.ShortDebugString() << " at " << batches << " batches";
          return op;
      }
    }
    ADD_FAILURE() << "no EXIT after 50 operations";
    return trialv1::Operation();
  }

  // The one start for `agent`, its first operation (a TRAIN) asked for and
  // 10 batches of it trained: sets `start` and `train`.
  void StartAndTrain10(AgentSession& agent, agentv1::StartAllocation* start, trialv1::Operation* train) {
    auto starts = Starts(agent);
    ASSERT_EQ(starts.size(), 1u);
    *start = starts[0];
    *train = Next(*start, 0, 0);
    EXPECT_EQ(train->kind(), trialv1::OPERATION_KIND_TRAIN);
    Train(*start, 10);
  }

  trialv1::ShouldPreemptResponse ShouldPreempt(const agentv1::StartAllocation& s) {
    trialv1::ShouldPreemptRequest req;
    req.set_allocation_id(s.allocation_id());
    req.set_timeout_ms(0);
    auto resp = core_->ShouldPreempt(req, s.allocation_token());
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? *resp : trialv1::ShouldPreemptResponse();
  }

  apiv1::State ExperimentState(int64_t id) {
    apiv1::GetExperimentRequest req;
    req.set_experiment_id(id);
    auto resp = core_->GetExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->experiment().state() : apiv1::STATE_UNSPECIFIED;
  }

  int checkpoints_ = 0;
  std::string credential_;
};

// Waiting for promotion (3 trials, one slot): the first trial's rung is done
// and it is not promoted: it checkpoints, exits with EXIT_REASON_WAITING,
// gives its slot to the next trial and is shown WAITING (through a master
// restart too). The second trial's worse result promotes the first, which
// resumes from its checkpoint; the second waits until the third's result
// ends rung 0, and is COMPLETED while waiting, saying so.
TEST_F(TrialStatesTest, AshaTrialWaitsForPromotionWithoutASlotThenResumesOrCompletes) {
  auto a = Agent("a", 1);
  const int64_t exp = CreateActiveExperiment(AshaConfig(dir_ / "checkpoints"));
  auto starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
  const agentv1::StartAllocation first = starts[0];
  const int64_t t1 = first.trial_id();
  EXPECT_EQ(Trial(t1).state(), apiv1::STATE_ACTIVE);

  const trialv1::Operation exit1 = RunToExit(first, 0, /*metric=*/0.5);
  EXPECT_EQ(exit1.exit_reason(), trialv1::EXIT_REASON_WAITING) << exit1.ShortDebugString();
  Exited("a", first.allocation_id());
  const apiv1::Trial waiting = Trial(t1);
  EXPECT_EQ(waiting.state(), apiv1::STATE_WAITING);
  EXPECT_EQ(waiting.total_batches_processed(), 50);
  EXPECT_EQ(waiting.allocation_id(), "");
  EXPECT_THAT(waiting.state_reason(), HasSubstr("waiting for promotion: its rung is done at 50 batches"));
  EXPECT_THAT(waiting.state_reason(), HasSubstr("it holds no slot"));
  EXPECT_THAT(TrialLogs(t1), HasSubstr(absl::StrCat("[det-master] trial ", t1, " is waiting for promotion: its rung is "
                                               "done at 50 batches")));
  EXPECT_EQ(ExperimentState(exp), apiv1::STATE_ACTIVE);

  // Its slot went to the next trial; the waiting one is neither queued nor
  // holding slots.
  starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
  const agentv1::StartAllocation second = starts[0];
  const int64_t t2 = second.trial_id();
  EXPECT_NE(t2, t1);
  auto queue = core_->GetJobQueue(apiv1::GetJobQueueRequest());
  ASSERT_TRUE(queue.ok()) << queue.status();
  for (const auto& job : queue->jobs()) {
    for (const auto& alloc : job.allocations()) EXPECT_NE(alloc.trial_id(), t1) << job.ShortDebugString();
  }
  // A master restart: the agent reattaches the second trial's run; the
  // first trial still waits and is not scheduled.
  Restart();
  EXPECT_EQ(Trial(t1).state(), apiv1::STATE_WAITING) << "after a master restart";
  a = Agent("a", 1, {second.allocation_id()});
  EXPECT_TRUE(Starts(*a).empty());
  EXPECT_EQ(Trial(t2).allocation_id(), second.allocation_id());

  // The second trial's result is worse: the first one is promoted, the
  // second waits.
  const trialv1::Operation exit2 = RunToExit(second, 0, /*metric=*/0.9);
  EXPECT_EQ(exit2.exit_reason(), trialv1::EXIT_REASON_WAITING);
  EXPECT_EQ(Trial(t1).state(), apiv1::STATE_ACTIVE) << "promoted";
  Exited("a", second.allocation_id());
  EXPECT_EQ(Trial(t2).state(), apiv1::STATE_WAITING);

  // The third trial (queued first) and the promoted first one run, in the
  // queue's order.
  int64_t t3 = 0;
  for (int run = 0; run < 2; ++run) {
    starts = Starts(*a);
    ASSERT_EQ(starts.size(), 1u) << "run " << run;
    const agentv1::StartAllocation& s = starts[0];
    if (s.trial_id() == t1) {
      trialv1::GetTrialContextRequest ctx_req;
      ctx_req.set_allocation_id(s.allocation_id());
      auto ctx = core_->GetTrialContext(ctx_req, s.allocation_token());
      ASSERT_TRUE(ctx.ok()) << ctx.status();
      EXPECT_EQ(ctx->latest_checkpoint().total_batches(), 50) << "resumes from its checkpoint";
      EXPECT_EQ(RunToExit(s, 50, /*metric=*/0.05).exit_reason(), trialv1::EXIT_REASON_COMPLETED);
    } else {
      t3 = s.trial_id();
      // Rung 0 is complete: it is closed, and so is the second trial.
      EXPECT_EQ(RunToExit(s, 0, /*metric=*/0.95).exit_reason(), trialv1::EXIT_REASON_COMPLETED);
      const apiv1::Trial closed = Trial(t2);
      EXPECT_EQ(closed.state(), apiv1::STATE_COMPLETED);
      EXPECT_EQ(closed.state_reason(), "completed at 50 batches: the searcher is done with it");
      EXPECT_THAT(TrialLogs(t2), HasSubstr(absl::StrCat("[det-master] trial ", t2, " completed at 50 batches: the "
                                                        "search ended without promoting it further")));
    }
    Exited("a", s.allocation_id());
  }
  ASSERT_NE(t3, 0);
  const apiv1::Trial done1 = Trial(t1);
  EXPECT_EQ(done1.state(), apiv1::STATE_COMPLETED);
  EXPECT_EQ(done1.state_reason(), "completed at 100 batches: the searcher is done with it");
  EXPECT_THAT(TrialLogs(t1), HasSubstr(absl::StrCat("[det-master] trial ", t1, " completed at 100 batches")));
  EXPECT_EQ(Trial(t3).state(), apiv1::STATE_COMPLETED);
  EXPECT_EQ(ExperimentState(exp), apiv1::STATE_COMPLETED);
  EXPECT_TRUE(Starts(*a).empty());
}

// Paused by the user (the experiment, then one trial): the runtime is told
// EXIT_REASON_PAUSED, never PREEMPTED, and the trial says who paused it.
TEST_F(TrialStatesTest, PauseByTheUserIsPausedNotPreempted) {
  auto a = Agent("a", 1);
  const int64_t exp = CreateActiveExperiment(det::testing::SingleTrialConfig("states", dir_ / "checkpoints", 1));
  agentv1::StartAllocation s;
  trialv1::Operation train;
  ASSERT_NO_FATAL_FAILURE(StartAndTrain10(*a, &s, &train));
  const int64_t t = s.trial_id();
  EXPECT_FALSE(ShouldPreempt(s).preempt());

  apiv1::PauseExperimentRequest pause;
  pause.set_experiment_id(exp);
  ASSERT_TRUE(core_->PauseExperiment(pause).ok());
  const trialv1::ShouldPreemptResponse asked = ShouldPreempt(s);
  EXPECT_TRUE(asked.preempt());
  EXPECT_EQ(asked.reason(), trialv1::EXIT_REASON_PAUSED);
  EXPECT_THAT(Trial(t).state_reason(), HasSubstr(absl::StrCat("pausing: experiment ", exp, " paused by the user")));
  // The runtime stops its TRAIN at batch 10 and asks for the next operation.
  const trialv1::Operation exit = RunToExit(s, 10, 0.5, train.op_id());
  EXPECT_EQ(exit.exit_reason(), trialv1::EXIT_REASON_PAUSED) << exit.ShortDebugString();
  Exited("a", s.allocation_id());
  apiv1::Trial paused = Trial(t);
  EXPECT_EQ(paused.state(), apiv1::STATE_PAUSED);
  EXPECT_EQ(paused.state_reason(), absl::StrCat("experiment ", exp, " paused by the user; resumes from its latest "
                                                "checkpoint when activated"));
  EXPECT_THAT(TrialLogs(t), HasSubstr(absl::StrCat("[det-master] trial ", t, " paused by the user at 10 batches")));
  EXPECT_THAT(TrialLogs(t), Not(HasSubstr("preempt")));

  // Activated, then the one trial paused on its own.
  apiv1::ActivateExperimentRequest activate;
  activate.set_experiment_id(exp);
  ASSERT_TRUE(core_->ActivateExperiment(activate).ok());
  auto starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
  const trialv1::Operation train2 = Next(starts[0], 0, 10);
  EXPECT_EQ(train2.kind(), trialv1::OPERATION_KIND_TRAIN);
  Train(starts[0], 20);
  apiv1::PauseTrialRequest pause_trial;
  pause_trial.set_trial_id(t);
  ASSERT_TRUE(core_->PauseTrial(pause_trial).ok());
  EXPECT_EQ(ShouldPreempt(starts[0]).reason(), trialv1::EXIT_REASON_PAUSED);
  EXPECT_EQ(RunToExit(starts[0], 20, 0.5, train2.op_id()).exit_reason(), trialv1::EXIT_REASON_PAUSED);
  Exited("a", starts[0].allocation_id());
  paused = Trial(t);
  EXPECT_EQ(paused.state(), apiv1::STATE_PAUSED);
  EXPECT_EQ(paused.state_reason(), "paused by the user; resumes from its latest checkpoint when activated");
  EXPECT_THAT(TrialLogs(t), HasSubstr(absl::StrCat("[det-master] trial ", t, " paused by the user at 20 batches")));
  EXPECT_THAT(TrialLogs(t), Not(HasSubstr("preempt")));
}

// Preempted by the scheduler for a better-priority experiment: the runtime
// is told EXIT_REASON_PREEMPTED, and the trial waits saying for whom.
TEST_F(TrialStatesTest, SchedulerPreemptionIsPreempted) {
  auto a = Agent("a", 1);
  const std::string config = det::testing::SingleTrialConfig("states", dir_ / "checkpoints", 1);
  CreateActiveExperiment(absl::StrReplaceAll(config, {{"resources:\n", "resources:\n  priority: 50\n"}}));
  agentv1::StartAllocation s;
  trialv1::Operation train;
  ASSERT_NO_FATAL_FAILURE(StartAndTrain10(*a, &s, &train));
  const int64_t t = s.trial_id();
  const int64_t urgent =
      CreateActiveExperiment(absl::StrReplaceAll(config, {{"resources:\n", "resources:\n  priority: 1\n"}}));
  core_->RunBackgroundPass();
  const trialv1::ShouldPreemptResponse asked = ShouldPreempt(s);
  EXPECT_TRUE(asked.preempt());
  EXPECT_EQ(asked.reason(), trialv1::EXIT_REASON_PREEMPTED);
  EXPECT_EQ(RunToExit(s, 10, 0.5, train.op_id()).exit_reason(), trialv1::EXIT_REASON_PREEMPTED);
  Exited("a", s.allocation_id());
  const apiv1::Trial preempted = Trial(t);
  EXPECT_EQ(preempted.state(), apiv1::STATE_ACTIVE);
  const std::string why = absl::StrCat("preempted for experiment ", urgent, " (priority 1)");
  EXPECT_THAT(preempted.state_reason(), HasSubstr(why));
  EXPECT_THAT(TrialLogs(t), HasSubstr(absl::StrCat("[det-master] trial ", t, " stopped at 10 batches: ", why,
                                                   "; it resumes from its latest checkpoint when slots are free")));
  EXPECT_THAT(TrialLogs(t), Not(HasSubstr("paused")));
}

// Completed: the searcher is done with the trial.
TEST_F(TrialStatesTest, CompletedTrialIsCompleted) {
  auto a = Agent("a", 1);
  const int64_t exp = CreateActiveExperiment(det::testing::SingleTrialConfig("states", dir_ / "checkpoints", 1));
  auto starts = Starts(*a);
  ASSERT_EQ(starts.size(), 1u);
  const int64_t t = starts[0].trial_id();
  const trialv1::Operation exit = RunToExit(starts[0], 0, 0.5);
  EXPECT_EQ(exit.exit_reason(), trialv1::EXIT_REASON_COMPLETED) << exit.ShortDebugString();
  Exited("a", starts[0].allocation_id());
  const apiv1::Trial done = Trial(t);
  EXPECT_EQ(done.state(), apiv1::STATE_COMPLETED);
  EXPECT_EQ(done.state_reason(), "completed at 100 batches: the searcher is done with it");
  EXPECT_THAT(TrialLogs(t), HasSubstr(absl::StrCat("[det-master] trial ", t, " completed at 100 batches: the searcher "
                                                   "is done with it")));
  EXPECT_THAT(TrialLogs(t), Not(HasSubstr("preempt")));
  EXPECT_EQ(ExperimentState(exp), apiv1::STATE_COMPLETED);
}

}  // namespace
}  // namespace det::master
