// End-to-end test of issue 50's metric streams fed from the writer's
// committed tail: several trials report while a StreamTrialMetrics follower
// reads them; the master is killed with SIGKILL mid-stream and restarted on
// the same database; the follower resumes from its last next_after_id, and
// every stored row of those trials arrives exactly once, in id order (checked
// against the database itself). That the polls were answered from the tail
// (MetricTail::Stats, in the master's process only) is asserted by the
// Store-level tests master/store/store_metric_tail_test.cc.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "det/api/v1/api.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
namespace v1 = ::det::api::v1;

const std::string kTrialSo = std::string(DET_TRIALS_DIR) + "/metrics_logs_trial.so";

// Three trials of 80 batches at 40 ms each, each reporting every batch
// ("inference"), every 5 (training) and validating every 10.
std::string Config(const std::string& checkpoint_dir) {
  return absl::StrCat(R"(name: metric-stream-tail
hyperparameters:
  global_batch_size: 8
  learning_rate: 0.05
  batch_delay_ms: 40
searcher:
  name: random
  max_trials: 3
  max_concurrent_trials: 3
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 80
min_validation_period:
  batches: 10
scheduling_unit: 5
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoint_dir, "\n");
}

// The ids of every stored metric row of `trials`, in id order.
std::vector<int64_t> StoredIds(const std::string& db_path, const std::vector<int64_t>& trials) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::string in;
  for (int64_t t : trials) absl::StrAppend(&in, in.empty() ? "" : ",", t);
  const std::string sql = absl::StrCat("SELECT id FROM metrics WHERE trial_id IN (", in, ") ORDER BY id");
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  std::vector<int64_t> ids;
  while (st != nullptr && sqlite3_step(st) == SQLITE_ROW) ids.push_back(sqlite3_column_int64(st, 0));
  sqlite3_finalize(st);
  sqlite3_close(db);
  return ids;
}

// Reads a follow stream of `trials` from `after_id` into *ids until it ends
// or `stop_after` rows arrived (0: until it ends); *cursor: the last
// next_after_id. Returns the stream's status (cancelled when stopped).
grpc::Status Follow(TestCluster& cluster, const std::vector<int64_t>& trials, int64_t after_id, size_t stop_after,
                    std::vector<int64_t>* ids, int64_t* cursor) {
  auto stub = v1::Determined::NewStub(grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + cluster.Token());
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(4));
  v1::StreamTrialMetricsRequest req;
  for (int64_t t : trials) req.add_trial_ids(t);
  req.set_after_id(after_id);
  req.set_follow(true);
  auto reader = stub->StreamTrialMetrics(&ctx, req);
  v1::StreamTrialMetricsResponse resp;
  const size_t start = ids->size();
  while (reader->Read(&resp)) {
    for (const auto& m : resp.metrics()) ids->push_back(m.id());
    if (resp.metrics_size() > 0) {
      EXPECT_EQ(resp.next_after_id(), resp.metrics(resp.metrics_size() - 1).id());
      *cursor = resp.next_after_id();
    }
    if (stop_after > 0 && ids->size() - start >= stop_after) {
      ctx.TryCancel();
      (void)reader->Finish();
      return grpc::Status::CANCELLED;
    }
  }
  return reader->Finish();
}

TEST(MetricStreamTailTest, EveryRowExactlyOnceAcrossAMasterKill9) {
  TempDir dir;
  IsolateCliAuth(dir.path());
  TestCluster cluster(dir);
  cluster.StartAgent("a1", AgentOptions().set_slots(3));
  const int exp = cluster.CreateExperiment(Config(dir / "checkpoints"), "tail", kTrialSo);
  ASSERT_GT(exp, 0);
  std::vector<int64_t> trials;
  ASSERT_TRUE(PollUntil(
      [&] {
        trials.clear();
        for (const auto& t : cluster.Trials(exp)) trials.push_back(t["id"].get<int64_t>());
        return trials.size() == 3;
      },
      60s))
      << cluster.MasterLog();

  // Follow the three trials until 60 rows arrived, while they still report.
  std::vector<int64_t> ids;
  int64_t cursor = 0;
  (void)Follow(cluster, trials, 0, 60, &ids, &cursor);
  ASSERT_GE(ids.size(), 60u) << cluster.MasterLog();
  ASSERT_NE(cluster.ExperimentState(exp), "STATE_COMPLETED") << "the trials ended before the kill";

  // A second follower is mid-stream when the master dies: its stream breaks.
  std::vector<int64_t> broken_ids;
  int64_t broken_cursor = cursor;
  // The killer thread only records what it saw (a gtest assertion there
  // would end the thread, not the test); it kills the master either way, so
  // the follower's stream always ends, and the main thread checks.
  bool rows_after_cursor = false;
  std::thread killer([&] {
    // Kill once rows past the first cursor are stored (the follower below
    // is then mid-stream).
    rows_after_cursor =
        PollUntil([&] { return StoredIds(cluster.db_path(), trials).size() > ids.size() + 20; }, 60s);
    cluster.KillMaster();
  });
  grpc::Status broken = Follow(cluster, trials, cursor, 0, &broken_ids, &broken_cursor);
  killer.join();
  ASSERT_TRUE(rows_after_cursor) << "no 20 rows stored past the first cursor within 60 s" << cluster.MasterLog();
  EXPECT_FALSE(broken.ok()) << "the stream ended although the master was killed";
  ids.insert(ids.end(), broken_ids.begin(), broken_ids.end());
  cursor = broken_cursor;

  // Restarted on the same database: resume from the last next_after_id
  // until the trials end (the stream then ends by itself).
  cluster.RestartMaster();
  const size_t before_restart = ids.size();
  grpc::Status resumed = Follow(cluster, trials, cursor, 0, &ids, &cursor);
  const size_t resumed_rows = ids.size() - before_restart;
  ASSERT_TRUE(resumed.ok()) << resumed.error_message() << cluster.MasterLog();
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 180s)) << cluster.MasterLog() << cluster.AgentLogs();

  const std::vector<int64_t> stored = StoredIds(cluster.db_path(), trials);
  std::printf("rows: %zu before the kill, %zu by the stream the kill broke, %zu after the restart; %zu stored\n",
              ids.size() - broken_ids.size() - resumed_rows, broken_ids.size(), resumed_rows, stored.size());
  EXPECT_GT(stored.size(), 200u);
  EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), ids.size()) << "a row arrived twice";
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(ids, stored) << "delivered " << ids.size() << " rows, stored " << stored.size();
}

}  // namespace
}  // namespace det::testing
