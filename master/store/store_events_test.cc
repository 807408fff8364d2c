// The Store's /metrics events (store_events.h) count only what was committed
// (review finding 3 of issue 48): a row INSERT OR IGNORE skips is not
// counted, a rolled-back Store::Transaction or savepoint reports nothing,
// and a transaction reports one figure per kind, not one per row (12d).
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "master/store/store.h"
#include "master/store/store_events.h"
#include "master/store/store_internal.h"
#include "master/store/store_test_fixture.h"

namespace det {
namespace master {
namespace {

// Records every call it gets.
class SpyEvents : public StoreEvents {
 public:
  void WriteTransactionDone(double) override {}
  void MetricRowsStored(int kind, int64_t rows) override {
    rows_[kMetricRowKindNames[kind]] += rows;
    ++row_calls_;
  }
  void LogLinesStored(int64_t lines) override { log_lines_ += lines; }
  void CheckpointBytesStored(int64_t bytes) override { checkpoint_bytes_ += bytes; }
  void CheckpointBytesDeleted(CheckpointDeletion, int64_t) override {}

  std::map<std::string, int64_t> rows_;
  int row_calls_ = 0;
  int64_t log_lines_ = 0;
  int64_t checkpoint_bytes_ = 0;
};

class StoreEventsTest : public TempStoreTest {
 protected:
  StoreEventsTest() : TempStoreTest("det_store_events_test") {}
  void SetUp() override {
    TempStoreTest::SetUp();
    ExperimentRow e;
    e.name = "exp";
    e.state = "ACTIVE";
    exp_ = store_->InsertExperiment(e).value_or(0);
    TrialRow t;
    t.experiment_id = exp_;
    t.state = "ACTIVE";
    trial_ = store_->InsertTrial(t).value_or(0);
    ASSERT_GT(trial_, 0);
    SetStoreEvents(&spy_);
  }
  void TearDown() override {
    SetStoreEvents(nullptr);
    TempStoreTest::TearDown();
  }
  MetricRow Row(int64_t batches, const std::string& group = "training") const {
    MetricRow m;
    m.trial_id = trial_;
    m.group = group;
    m.total_batches = batches;
    m.metrics = {{"loss", 0.5}};
    return m;
  }
  CheckpointRow Checkpoint(const std::string& uuid, int64_t bytes) const {
    CheckpointRow c;
    c.uuid = uuid;
    c.trial_id = trial_;
    c.experiment_id = exp_;
    c.trial_run_id = 1;
    c.state = "COMPLETED";
    c.total_batches = 10;
    c.resources = {{"model.pt", bytes}};
    c.storage_path = "/checkpoints/" + uuid;
    return c;
  }

  SpyEvents spy_;
  int64_t exp_ = 0;
  int64_t trial_ = 0;
};

TEST_F(StoreEventsTest, TheSameRowTwiceIsCountedOnce) {
  ASSERT_TRUE(store_->InsertMetrics({Row(10)}).ok());
  ASSERT_TRUE(store_->InsertMetrics({Row(10)}).ok());  // a re-sent report: INSERT OR IGNORE
  EXPECT_EQ(store_->ListMetrics(trial_, "training", true).value().size(), 1u);
  EXPECT_EQ(spy_.rows_["training"], 1);
  // The grouped path (the metric writer's savepoints) too.
  ASSERT_TRUE(store_->InsertMetricsGrouped({Row(10), Row(20)}).ok());
  EXPECT_EQ(spy_.rows_["training"], 2);
}

TEST_F(StoreEventsTest, ARolledBackTransactionReportsNothing) {
  {
    Store::Transaction txn(store_.get());
    ASSERT_TRUE(store_->InsertMetrics({Row(10), Row(20, "validation")}).ok());
    ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("c1", 1000)).ok());
    ASSERT_TRUE(store_->InsertTaskLogs({TaskLogRow{0, trial_, "a", 0, 1, "INFO", "stdout", "hi"}}).ok());
    EXPECT_TRUE(spy_.rows_.empty()) << "nothing is reported before the commit";
    EXPECT_EQ(spy_.checkpoint_bytes_, 0);
  }  // no Commit(): rolled back
  EXPECT_TRUE(store_->ListMetrics(trial_, "", true).value().empty());
  EXPECT_TRUE(spy_.rows_.empty());
  EXPECT_EQ(spy_.checkpoint_bytes_, 0);
  EXPECT_EQ(spy_.log_lines_, 0);
  // A failing write fails the Transaction: its earlier writes are not counted.
  {
    Store::Transaction txn(store_.get());
    ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("c2", 500)).ok());
    EXPECT_FALSE(store_->InsertCheckpoint(Checkpoint("c2", 500)).ok());  // duplicate uuid
    EXPECT_FALSE(txn.Commit().ok());
  }
  EXPECT_EQ(spy_.checkpoint_bytes_, 0);
  // Committed: reported once, at the commit.
  {
    Store::Transaction txn(store_.get());
    ASSERT_TRUE(store_->InsertMetrics({Row(10), Row(20), Row(30, "validation")}).ok());
    ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("c3", 700)).ok());
    EXPECT_TRUE(spy_.rows_.empty());
    ASSERT_TRUE(txn.Commit().ok());
  }
  EXPECT_EQ(spy_.rows_["training"], 2);
  EXPECT_EQ(spy_.rows_["validation"], 1);
  EXPECT_EQ(spy_.checkpoint_bytes_, 700);
  // Outside a Transaction: at once.
  ASSERT_TRUE(store_->InsertCheckpoint(Checkpoint("c4", 11)).ok());
  EXPECT_EQ(spy_.checkpoint_bytes_, 711);
}

TEST_F(StoreEventsTest, AFailingCallOfAGroupIsNotCountedAndEachKindIsOneCall) {
  std::vector<MetricRow> many;
  for (int i = 1; i <= 100; ++i) many.push_back(Row(i, i % 2 == 0 ? "training" : "my-group"));
  ASSERT_TRUE(store_->InsertMetrics(many).ok());
  EXPECT_EQ(spy_.rows_["training"], 50);
  EXPECT_EQ(spy_.rows_["other"], 50);
  EXPECT_EQ(spy_.row_calls_, 2) << "one call per kind per transaction, not one per row";
  // A call naming an unknown trial rolls back its savepoint alone.
  MetricRow orphan = Row(500);
  orphan.trial_id = 99999;
  EXPECT_FALSE(store_->InsertMetricsGrouped({Row(501), orphan}).ok());
  EXPECT_EQ(spy_.rows_["training"], 50);
  MetricRow profiling = Row(502, "profiling");
  profiling.metrics = {{"wall_s", 1.0}};
  ASSERT_TRUE(store_->InsertMetricsGrouped({profiling}).ok());
  EXPECT_EQ(spy_.rows_["profiling"], 1);
}

// SQLite rolls back a whole transaction by itself on SQLITE_FULL or an I/O
// error (here: a trigger's RAISE(ROLLBACK)) in the middle of the metric
// writer's group. The next call's savepoint then begins a transaction of its
// own, whose commit must not count the rows of the calls before, which were
// rolled back (issue 48 second review, finding 6).
TEST_F(StoreEventsTest, RowsSqliteRolledBackAreNotCountedByTheNextCallsCommit) {
  RawExec("CREATE TRIGGER boom BEFORE INSERT ON metrics WHEN NEW.total_batches = 666 "
          "BEGIN SELECT RAISE(ROLLBACK, 'boom'); END");
  const std::vector<absl::Status> statuses =
      StoreGroupPeer::CommitMetricGroup(store_.get(), {{Row(1)}, {Row(666)}, {Row(667)}});
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_FALSE(statuses[0].ok()) << "its rows were rolled back with the group's transaction";
  EXPECT_FALSE(statuses[1].ok());
  const std::vector<MetricRow> stored = store_->ListMetrics(trial_, "training", true).value();
  ASSERT_EQ(stored.size(), 1u) << "the third call began and committed a transaction of its own";
  EXPECT_EQ(stored[0].total_batches, 667);
  EXPECT_EQ(spy_.rows_["training"], 1) << "counted: only the row committed";
}

}  // namespace
}  // namespace master
}  // namespace det
