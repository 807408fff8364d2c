// A checkpoint the master owes a trial after a validation (checkpoint_policy,
// and pbt's round end, where a child waits for its parent's state at that
// validation) is still asked for after a master restart. It was kept in
// memory only: a parent whose round-end validation was reported just before
// kill -9 got TRAIN to the next round from the restarted master, and its
// waiting child started from the parent's checkpoint of the NEXT round
// (PbtTest.MasterKillMidSearchResumesEverySearcher, flaky under load).
#include <string>

#include <gtest/gtest.h>

#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

class PolicyCheckpointRestartCoreTest : public MasterCoreFixture {};

TEST_F(PolicyCheckpointRestartCoreTest, AValidationsOwedCheckpointIsStillAskedForAfterARestart) {
  std::shared_ptr<AgentSession> session;
  ASSERT_NO_FATAL_FAILURE(AttachOneSlotAgent(&session));
  // checkpoint_policy best (the default): the first validation is the best.
  ASSERT_GT(CreateActiveExperiment(det::testing::SingleTrialConfig("owed", dir_ / "checkpoints", 1)), 0);
  core_->RunBackgroundPass();
  agentv1::StartAllocation start;
  for (const auto& s : Starts(*session)) start = s;
  ASSERT_FALSE(start.allocation_id().empty());
  trialv1::ReportValidationMetricsRequest val;
  val.set_allocation_id(start.allocation_id());
  auto* row = val.add_rows();
  row->set_total_batches(10);
  (*row->mutable_metrics())["validation_loss"] = 0.5;
  ASSERT_TRUE(core_->ReportValidationMetrics(val, start.allocation_token()).ok());

  Restart();  // before the trial asked for its next operation
  trialv1::GetNextOperationRequest next;
  next.set_allocation_id(start.allocation_id());
  next.set_total_batches(10);
  auto op = core_->GetNextOperation(next, start.allocation_token());
  ASSERT_TRUE(op.ok()) << op.status();
  EXPECT_EQ(op->operation().kind(), trialv1::OPERATION_KIND_CHECKPOINT) << op->operation().DebugString();
}

}  // namespace
}  // namespace det::master
