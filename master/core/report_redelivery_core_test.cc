// A trial runtime redelivers a report whose reply it did not get (a
// partition, a master restart: trial_runtime/runtime/report_queue.h). The
// master must store each report once however often it arrives, and refuse
// every report of an allocation it gave up (a lost agent's trial process
// that comes back never writes into the restarted run).
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

constexpr char kUuid[] = "0f3c9a1e-5b2d-4c6e-8f10-000000000047";

class ReportRedeliveryCoreTest : public MasterCoreFixture {
 protected:
  // One agent of one slot and an active experiment of one trial; its first
  // allocation in start_.
  void Start() {
    ASSERT_NO_FATAL_FAILURE(AttachOneSlotAgent(&session_));
    ASSERT_GT(CreateActiveExperiment(det::testing::SingleTrialConfig("redelivery", dir_ / "checkpoints", 1)), 0);
    core_->RunBackgroundPass();
    for (const auto& s : Starts(*session_)) start_ = s;
    ASSERT_FALSE(start_.allocation_id().empty());
  }
  // Sends the same training, validation, custom-group and checkpoint
  // reports of start_ (all at batch 10); the first error, else OK.
  absl::Status ReportAll() {
    const std::string& token = start_.allocation_token();
    trialv1::MetricsRow row;
    row.set_total_batches(10);
    (*row.mutable_metrics())["loss"] = 0.5;
    (*row.mutable_metrics())["validation_loss"] = 0.5;
    trialv1::ReportTrainingMetricsRequest train;
    train.set_allocation_id(start_.allocation_id());
    *train.add_rows() = row;
    trialv1::ReportValidationMetricsRequest val;
    val.set_allocation_id(start_.allocation_id());
    *val.add_rows() = row;
    trialv1::ReportMetricsRequest custom;
    custom.set_allocation_id(start_.allocation_id());
    custom.set_group("inference");
    *custom.add_rows() = row;
    trialv1::ReportCheckpointRequest ck;
    ck.set_allocation_id(start_.allocation_id());
    ck.set_uuid(kUuid);
    ck.set_total_batches(10);
    (*ck.mutable_resources())["model.pt"] = 100;
    absl::Status st = core_->ReportTrainingMetrics(train, token).status();
    if (st.ok()) st = core_->ReportValidationMetrics(val, token).status();
    if (st.ok()) st = core_->ReportMetrics(custom, token).status();
    if (st.ok()) st = core_->ReportCheckpoint(ck, token).status();
    return st;
  }
  size_t Rows(const std::string& group) {
    auto rows = core_->store()->ListMetrics(1, group, /*include_archived=*/true);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? rows->size() : 0;
  }

  std::shared_ptr<AgentSession> session_;
  agentv1::StartAllocation start_;
};

TEST_F(ReportRedeliveryCoreTest, EachReportIsStoredOnceHoweverOftenItArrives) {
  ASSERT_NO_FATAL_FAILURE(Start());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ReportAll().ok()) << "delivery " << i;
  EXPECT_EQ(Rows("training"), 1u);
  EXPECT_EQ(Rows("validation"), 1u);
  EXPECT_EQ(Rows("inference"), 1u);
  auto checkpoints = core_->store()->ListCheckpoints(std::nullopt, 1);
  ASSERT_TRUE(checkpoints.ok()) << checkpoints.status();
  EXPECT_EQ(checkpoints->size(), 1u);
  EXPECT_EQ(Trial().latest_checkpoint_uuid(), kUuid);
}

TEST_F(ReportRedeliveryCoreTest, AGivenUpAllocationsReportsAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const agentv1::StartAllocation old = start_;
  // Its process lost the master (exit code 4): the trial is placed again.
  Exited("a", old.allocation_id(), 0, 4);
  core_->RunBackgroundPass();
  for (const auto& s : Starts(*session_)) start_ = s;
  ASSERT_NE(start_.allocation_id(), old.allocation_id());
  // The old process's buffered reports arrive late: refused, nothing stored.
  agentv1::StartAllocation current = start_;
  start_ = old;
  absl::Status st = ReportAll();
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr(old.allocation_id()));
  EXPECT_EQ(Rows("training"), 0u);
  EXPECT_EQ(Rows("validation"), 0u);
  start_ = current;
  EXPECT_TRUE(ReportAll().ok());
  EXPECT_EQ(Rows("training"), 1u);
}

}  // namespace
}  // namespace det::master
