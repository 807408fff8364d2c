#include "master/core/master_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "master/core/core_test_fixture.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MasterMetricsTest, MetricRowKindIsOneOfFiveNeverTheGroupName) {
  EXPECT_STREQ(MetricRowKind("training"), "training");
  EXPECT_STREQ(MetricRowKind("validation"), "validation");
  EXPECT_STREQ(MetricRowKind("profiling"), "profiling");
  EXPECT_STREQ(MetricRowKind("system"), "system");
  EXPECT_STREQ(MetricRowKind("my-secret-group"), "other");
  EXPECT_STREQ(MetricRowKind(""), "other");
}

TEST(MasterMetricsTest, GrpcCodeNames) {
  EXPECT_STREQ(GrpcCodeName(0), "OK");
  EXPECT_STREQ(GrpcCodeName(5), "NOT_FOUND");
  EXPECT_STREQ(GrpcCodeName(16), "UNAUTHENTICATED");
  EXPECT_STREQ(GrpcCodeName(17), "UNKNOWN");
  EXPECT_STREQ(GrpcCodeName(-1), "UNKNOWN");
}

TEST(MasterMetricsTest, EventsBecomeCountersAndHistograms) {
  MasterMetrics metrics(nullptr);
  metrics.MetricRowsStored(MetricRowKindIndex("training"), 3);
  metrics.MetricRowsStored(MetricRowKindIndex("validation"), 1);
  metrics.MetricRowsStored(MetricRowKindIndex("user-chosen-name"), 2);
  metrics.LogLinesStored(7);
  metrics.CheckpointBytesStored(1000);
  metrics.CheckpointBytesDeleted(CheckpointDeletion::kGc, 400);
  metrics.CheckpointBytesDeleted(CheckpointDeletion::kUser, 30);
  metrics.CheckpointBytesDeleted(CheckpointDeletion::kUser, 20);
  metrics.WriteTransactionDone(0.002);
  metrics.ObserveGrpc("/det.api.v1.Determined/GetMe", 0, 0.01);
  metrics.ObserveGrpc("/det.api.v1.Determined/NoSuchRpc", 12, 0.01);
  metrics.ObserveGrpc("/some.Other/Method", 5, 0.01);
  metrics.ObserveRest("GET /api/v1/experiments/{experiment_id}", 200, 0.003);
  metrics.ObserveRest("", 404, 0.003);
  const std::string m = metrics.Scrape();
  EXPECT_THAT(m, HasSubstr("det_metric_rows_ingested_total{kind=\"training\"} 3\n"));
  EXPECT_THAT(m, HasSubstr("det_metric_rows_ingested_total{kind=\"validation\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("det_metric_rows_ingested_total{kind=\"other\"} 2\n"));
  EXPECT_THAT(m, HasSubstr("det_metric_rows_ingested_total{kind=\"profiling\"} 0\n"));
  EXPECT_THAT(m, Not(HasSubstr("user-chosen-name")));
  EXPECT_THAT(m, HasSubstr("det_log_lines_ingested_total 7\n"));
  EXPECT_THAT(m, HasSubstr("det_checkpoint_bytes_written_total 1000\n"));
  EXPECT_THAT(m, HasSubstr("det_checkpoint_bytes_deleted_total{reason=\"gc\"} 400\n"));
  EXPECT_THAT(m, HasSubstr("det_checkpoint_bytes_deleted_total{reason=\"user\"} 50\n"));
  EXPECT_THAT(m, HasSubstr("det_checkpoint_bytes_deleted_total{reason=\"experiment_delete\"} 0\n"));
  EXPECT_THAT(m, HasSubstr("det_sqlite_write_transaction_duration_seconds_count 1\n"));
  EXPECT_THAT(m, HasSubstr("det_sqlite_write_transaction_duration_seconds_bucket{le=\"0.0025\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("det_grpc_request_duration_seconds_count{code=\"OK\",method=\"GetMe\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("det_grpc_request_duration_seconds_count{code=\"UNIMPLEMENTED\",method=\"other\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("det_grpc_request_duration_seconds_count{code=\"NOT_FOUND\",method=\"other\"} 1\n"));
  EXPECT_THAT(m, Not(HasSubstr("NoSuchRpc")));
  EXPECT_THAT(m, HasSubstr("det_rest_request_duration_seconds_count{code=\"200\","
                           "route=\"GET /api/v1/experiments/{experiment_id}\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("det_rest_request_duration_seconds_count{code=\"404\",route=\"other\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("process_resident_memory_bytes "));
  EXPECT_THAT(m, HasSubstr("det_build_info{version=\""));
}

// Finding 12a: unknown fd figures (-1) are left out, never served as -1.
TEST(MasterMetricsTest, UnknownFdFiguresAreLeftOut) {
  namespace pm = prometheus;
  ProcStats stats;
  stats.cpu_seconds = 1.5;
  stats.rss_bytes = 4096;
  stats.open_fds = -1;
  stats.max_fds = -1;
  stats.start_time_seconds = 1.7e9;
  std::string m = pm::TextSerializer().Serialize(ProcessFamilies(stats));
  EXPECT_THAT(m, Not(HasSubstr("process_open_fds")));
  EXPECT_THAT(m, Not(HasSubstr("process_max_fds")));
  EXPECT_THAT(m, Not(HasSubstr("-1")));
  EXPECT_THAT(m, HasSubstr("process_resident_memory_bytes 4096\n"));
  EXPECT_THAT(m, HasSubstr("process_cpu_seconds_total 1.5\n"));
  stats.open_fds = 12;
  stats.max_fds = 1024;
  m = pm::TextSerializer().Serialize(ProcessFamilies(stats));
  EXPECT_THAT(m, HasSubstr("process_open_fds 12\n"));
  EXPECT_THAT(m, HasSubstr("process_max_fds 1024\n"));
}

TEST(MasterMetricsTest, StreamSubscribersGoUpAndDownByRpc) {
  MasterMetrics metrics(nullptr);
  metrics.StreamOpened("/det.api.v1.Determined/TrialLogs");
  metrics.StreamOpened("/det.api.v1.Determined/TrialLogs");
  metrics.StreamOpened("/det.api.v1.Determined/MasterLogs");
  metrics.StreamClosed("/det.api.v1.Determined/TrialLogs");
  const std::string m = metrics.Scrape();
  EXPECT_THAT(m, HasSubstr("det_stream_subscribers{stream=\"TrialLogs\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("det_stream_subscribers{stream=\"MasterLogs\"} 1\n"));
}

// A random search of `trials` trials on the fake trial.so.
std::string SearchOf(int trials, const std::string& checkpoint_dir) {
  return absl::StrCat("name: metrics-core-test\nhyperparameters:\n  global_batch_size: 16\n"
                      "searcher:\n  name: random\n  metric: validation_loss\n  max_trials: ",
                      trials, "\n  max_length: {batches: 100}\ncheckpoint_storage:\n  type: shared_fs\n  host_path: ",
                      checkpoint_dir, "\n");
}

class MasterMetricsCoreTest : public MasterCoreFixture {};

// Review 2, finding 3: an experiment the restarted master cannot load (its
// stored config and YAML no longer parse) keeps its finished trials in
// det_trials, as in SELECT COUNT(*) FROM trials; a loaded experiment's
// active trial is still counted from memory.
TEST_F(MasterMetricsCoreTest, TrialsOfAnExperimentTheMasterCannotLoadStillCount) {
  const int64_t lost = CreateActiveExperiment(SearchOf(2, dir_ / "checkpoints"));
  ASSERT_GT(lost, 0);
  auto trials = core_->store()->ListTrials(lost);
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 2u);
  for (TrialRow t : *trials) {
    t.state = "COMPLETED";
    t.ended_ms = 1;
    ASSERT_TRUE(core_->store()->UpdateTrial(t).ok());
  }
  auto exp = core_->store()->GetExperiment(lost);
  ASSERT_TRUE(exp.ok()) << exp.status();
  exp->state = "COMPLETED";
  exp->config_json = "{";
  exp->config_yaml = "searcher: [";
  ASSERT_TRUE(core_->store()->UpdateExperiment(*exp).ok());
  const int64_t loaded = CreateActiveExperiment(SearchOf(1, dir_ / "checkpoints"));
  ASSERT_GT(loaded, 0);
  Restart();
  apiv1::GetExperimentRequest get;
  get.set_experiment_id(lost);
  ASSERT_FALSE(core_->GetExperiment(get).ok()) << "the test needs an experiment the master did not load";
  const std::string m = MasterMetrics(core_.get()).Scrape();
  EXPECT_THAT(m, HasSubstr("det_trials{state=\"COMPLETED\"} 2\n"));
  EXPECT_THAT(m, HasSubstr("det_trials{state=\"ACTIVE\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("det_experiments{state=\"COMPLETED\"} 1\n"));
}

// Chart rollups rebuilt from stored rows, by reason: a series seen first
// (loaded), and one a report reached out of order.
TEST_F(MasterMetricsCoreTest, RollupRebuildsCountLoadsAndOutOfOrderReports) {
  const int64_t exp = CreateActiveExperiment(SearchOf(1, dir_ / "checkpoints"));
  ASSERT_GT(exp, 0);
  auto trials = core_->store()->ListTrials(exp);
  ASSERT_TRUE(trials.ok()) << trials.status();
  ASSERT_EQ(trials->size(), 1u);
  auto row = [&](int64_t batches) {
    MetricRow m;
    m.trial_id = trials->front().id;
    m.trial_run_id = trials->front().run_id;
    m.group = "training";
    m.total_batches = batches;
    m.metrics = {{"loss", 1.0}};
    return m;
  };
  ASSERT_TRUE(core_->store()->InsertMetrics({row(10), row(20)}).ok());
  std::string m = MasterMetrics(core_.get()).Scrape();
  EXPECT_THAT(m, HasSubstr("det_metric_rollup_rebuilds_total{reason=\"load\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("det_metric_rollup_rebuilds_total{reason=\"out_of_order\"} 0\n"));
  ASSERT_TRUE(core_->store()->InsertMetrics({row(15)}).ok());
  m = MasterMetrics(core_.get()).Scrape();
  EXPECT_THAT(m, HasSubstr("det_metric_rollup_rebuilds_total{reason=\"load\"} 1\n"));
  EXPECT_THAT(m, HasSubstr("det_metric_rollup_rebuilds_total{reason=\"out_of_order\"} 1\n"));
}

}  // namespace
}  // namespace det::master
