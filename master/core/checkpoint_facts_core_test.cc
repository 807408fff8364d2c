// The facts MasterCore reports about checkpoints and validations (issue 45):
// a checkpoint's size, epochs and the validation at its batches whichever of
// the two was reported first; a trial's and an experiment's best and latest
// checkpoint; the best validation with its batch; and all of it again after
// a master restart (computed from the store, not remembered).
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "master/core/core_test_fixture.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

constexpr char kEarly[] = "0f3c9a1e-5b2d-4c6e-8f10-000000000010";
constexpr char kBest[] = "0f3c9a1e-5b2d-4c6e-8f10-000000000020";
constexpr char kLate[] = "0f3c9a1e-5b2d-4c6e-8f10-000000000030";

class CheckpointFactsCoreTest : public MasterCoreFixture {
 protected:
  // One agent of one slot; an experiment of one trial (global_batch_size 16,
  // searcher metric validation_loss, smaller is better) with `extra` config
  // lines; its first allocation.
  void Start(const std::string& extra = "") {
    std::shared_ptr<AgentSession> session;
    ASSERT_NO_FATAL_FAILURE(AttachOneSlotAgent(&session));
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(det::testing::SingleTrialConfig("facts", dir_ / "checkpoints", 1) + extra);
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(true);
    auto created = core_->CreateExperiment(req);
    ASSERT_TRUE(created.ok()) << created.status();
    experiment_ = created->experiment().id();
    core_->RunBackgroundPass();
    agentv1::MasterMessage msg;
    while (session->Pop(&msg, std::chrono::milliseconds(0))) {
      if (msg.has_start_allocation()) start_ = msg.start_allocation();
    }
    ASSERT_FALSE(start_.allocation_id().empty());
  }
  void Checkpoint(const std::string& uuid, int64_t batches, std::map<std::string, int64_t> files) {
    trialv1::ReportCheckpointRequest req;
    req.set_allocation_id(start_.allocation_id());
    req.set_uuid(uuid);
    req.set_total_batches(batches);
    for (const auto& [k, v] : files) (*req.mutable_resources())[k] = v;
    ASSERT_TRUE(core_->ReportCheckpoint(req, start_.allocation_token()).ok());
  }
  void Validation(int64_t batches, double loss) {
    trialv1::ReportValidationMetricsRequest req;
    req.set_allocation_id(start_.allocation_id());
    auto* row = req.add_rows();
    row->set_total_batches(batches);
    row->set_total_epochs(static_cast<double>(batches) / 7);  // the runtime's loader epochs
    (*row->mutable_metrics())["validation_loss"] = loss;
    (*row->mutable_metrics())["accuracy"] = 1 - loss;
    ASSERT_TRUE(core_->ReportValidationMetrics(req, start_.allocation_token()).ok());
  }
  apiv1::Checkpoint Get(const std::string& uuid) {
    apiv1::GetCheckpointRequest req;
    req.set_checkpoint_uuid(uuid);
    auto resp = core_->GetCheckpoint(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->checkpoint() : apiv1::Checkpoint();
  }
  apiv1::Experiment Experiment() {
    apiv1::GetExperimentRequest req;
    req.set_experiment_id(experiment_);
    auto resp = core_->GetExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->experiment() : apiv1::Experiment();
  }
  // kEarly: validated, then checkpointed; kBest: checkpointed, then
  // validated (the best loss); kLate: checkpointed, never validated.
  void ReportThree() {
    Validation(10, 0.5);
    Checkpoint(kEarly, 10, {{"model.pt", 1000}, {"optimizer.pt", 24}});
    Checkpoint(kBest, 20, {{"model.pt", 2000}});
    Validation(20, 0.25);
    Validation(30, 0.4);
    Checkpoint(kLate, 40, {{"model.pt", 3000}});
  }
  void ExpectFacts() {
    apiv1::Checkpoint early = Get(kEarly), best = Get(kBest), late = Get(kLate);
    EXPECT_EQ(early.size_bytes(), 1024);
    EXPECT_EQ(best.size_bytes(), 2000);
    EXPECT_EQ(early.total_batches(), 10);
    EXPECT_EQ(early.total_records(), 160);  // global_batch_size 16
    ASSERT_TRUE(early.has_searcher_metric());
    EXPECT_DOUBLE_EQ(early.searcher_metric(), 0.5);
    EXPECT_DOUBLE_EQ(early.validation_metrics().at("accuracy"), 0.5);
    ASSERT_TRUE(best.has_searcher_metric()) << "a validation reported after its checkpoint";
    EXPECT_DOUBLE_EQ(best.searcher_metric(), 0.25);
    EXPECT_DOUBLE_EQ(best.validation_metrics().at("validation_loss"), 0.25);
    EXPECT_DOUBLE_EQ(best.validation_metrics().at("accuracy"), 0.75);
    EXPECT_FALSE(late.has_searcher_metric());
    EXPECT_TRUE(late.validation_metrics().empty());
    // The stored row too (checkpoint GC reads it).
    auto row = core_->store()->GetCheckpoint(kBest);
    ASSERT_TRUE(row.ok() && row->searcher_metric.has_value());
    EXPECT_DOUBLE_EQ(*row->searcher_metric, 0.25);

    apiv1::Trial t = Trial();
    EXPECT_EQ(t.best_checkpoint_uuid(), kBest);
    EXPECT_EQ(t.latest_checkpoint_uuid(), kLate);
    EXPECT_EQ(t.best_validation().total_batches(), 20);
    EXPECT_DOUBLE_EQ(t.best_validation().metrics().at("validation_loss"), 0.25);
    EXPECT_DOUBLE_EQ(t.best_validation().metrics().at("accuracy"), 0.75);
    EXPECT_EQ(t.latest_validation().total_batches(), 30);

    apiv1::Experiment e = Experiment();
    EXPECT_EQ(e.best_checkpoint_uuid(), kBest);
    EXPECT_EQ(e.latest_checkpoint_uuid(), kLate);
  }

  // Kills the experiment and ends its run: CANCELED, checkpoint GC done.
  void KillAndEnd() {
    apiv1::KillExperimentRequest kill;
    kill.set_experiment_id(experiment_);
    ASSERT_TRUE(core_->KillExperiment(kill).ok());
    Exited("a", start_.allocation_id());
    core_->RunBackgroundPass();
  }

  int64_t experiment_ = 0;
  agentv1::StartAllocation start_;
};

TEST_F(CheckpointFactsCoreTest, CheckpointsCarryTheirValidationWhicheverCameFirst) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ReportThree();
  ExpectFacts();
  // Without records_per_epoch the epoch length is unknown: 0.
  EXPECT_EQ(Get(kBest).total_epochs(), 0);
}

TEST_F(CheckpointFactsCoreTest, TheFactsSurviveAMasterRestart) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ReportThree();
  Restart();
  ExpectFacts();
}

TEST_F(CheckpointFactsCoreTest, EpochsFollowRecordsPerEpoch) {
  ASSERT_NO_FATAL_FAILURE(Start("records_per_epoch: 160\n"));  // 10 batches of 16
  Checkpoint(kEarly, 15, {{"model.pt", 1}});
  EXPECT_DOUBLE_EQ(Get(kEarly).total_epochs(), 1.5);
}

TEST_F(CheckpointFactsCoreTest, DeletingTheBestCheckpointNamesTheNextBest) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ReportThree();
  ASSERT_EQ(Trial().best_checkpoint_uuid(), kBest);
  apiv1::DeleteCheckpointsRequest del;
  del.add_checkpoint_uuids(kBest);
  ASSERT_TRUE(core_->DeleteCheckpoints(del).ok());
  EXPECT_EQ(Trial().best_checkpoint_uuid(), kEarly);
  EXPECT_EQ(Experiment().best_checkpoint_uuid(), kEarly);
}

// A finished experiment's trial summary is kept between reads (its trials
// no longer change) and still follows deleted checkpoints.
TEST_F(CheckpointFactsCoreTest, AFinishedExperimentsSummaryFollowsDeletedCheckpoints) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ReportThree();
  ASSERT_NO_FATAL_FAILURE(KillAndEnd());  // checkpoint GC keeps the trial's best and latest
  ASSERT_EQ(Experiment().state(), apiv1::STATE_CANCELED);
  for (int read = 0; read < 2; ++read) {  // the second read: the kept summary
    apiv1::Experiment e = Experiment();
    EXPECT_EQ(e.best_checkpoint_uuid(), kBest);
    EXPECT_EQ(e.latest_checkpoint_uuid(), kLate);
    EXPECT_EQ(e.num_trials_by_state().at("CANCELED"), 1);
  }
  auto remove = [&](const std::string& uuid) {
    apiv1::DeleteCheckpointsRequest del;
    del.add_checkpoint_uuids(uuid);
    ASSERT_TRUE(core_->DeleteCheckpoints(del).ok());
  };
  remove(kBest);  // kLate has no validation: no best checkpoint is left
  apiv1::Experiment e = Experiment();
  EXPECT_EQ(e.best_checkpoint_uuid(), "");
  EXPECT_EQ(e.latest_checkpoint_uuid(), kLate);
  EXPECT_DOUBLE_EQ(e.best_validation_metric(), 0.25);
  remove(kLate);
  EXPECT_EQ(Experiment().latest_checkpoint_uuid(), "");
}

// Checkpoint GC after a policy change drops the kept summary too.
TEST_F(CheckpointFactsCoreTest, AFinishedExperimentsSummaryFollowsCheckpointGc) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ReportThree();
  ASSERT_NO_FATAL_FAILURE(KillAndEnd());
  ASSERT_EQ(Experiment().best_checkpoint_uuid(), kBest);
  ASSERT_EQ(Experiment().best_checkpoint_uuid(), kBest);  // the kept summary
  apiv1::PatchExperimentRequest patch;
  patch.set_experiment_id(experiment_);
  patch.mutable_checkpoint_gc_policy();  // keep nothing
  ASSERT_TRUE(core_->PatchExperiment(patch).ok());
  core_->RunBackgroundPass();
  EXPECT_EQ(Experiment().best_checkpoint_uuid(), "");
}

// Progress moves with the training reports, not only with finished trials.
TEST_F(CheckpointFactsCoreTest, ProgressCountsTheBatchesTrainedSoFar) {
  ASSERT_NO_FATAL_FAILURE(Start());  // single, max_length 100 batches
  EXPECT_DOUBLE_EQ(Experiment().progress(), 0);
  trialv1::ReportTrainingMetricsRequest req;
  req.set_allocation_id(start_.allocation_id());
  auto* row = req.add_rows();
  row->set_total_batches(60);
  (*row->mutable_metrics())["loss"] = 1;
  ASSERT_TRUE(core_->ReportTrainingMetrics(req, start_.allocation_token()).ok());
  EXPECT_DOUBLE_EQ(Experiment().progress(), 0.6);
}

TEST_F(CheckpointFactsCoreTest, NegativeFileSizesAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  trialv1::ReportCheckpointRequest req;
  req.set_allocation_id(start_.allocation_id());
  req.set_uuid(kEarly);
  req.set_total_batches(10);
  (*req.mutable_resources())["model.pt"] = -1;
  absl::Status st = core_->ReportCheckpoint(req, start_.allocation_token()).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("model.pt"));
}

}  // namespace
}  // namespace det::master
