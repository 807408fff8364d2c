// Security, round three (issue 46). Finding 6: metric bounds, kill and cancel with the disk full, temp checkpoint directories.
// Part of the security_test executable (tests/CMakeLists.txt).
#include <sqlite3.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::string kFloodTrial = std::string(DET_TRIALS_DIR) + "/metric_flood_trial.so";

// A one-trial experiment of the flood trial that never validates (its
// length is far beyond the test), its processes marked by FLOOD_MARKER=`marker`.
std::string FloodYaml(const std::string& checkpoint_dir, const std::string& marker, int delay_ms = 0) {
  return absl::StrCat(R"(name: metric-flood
hyperparameters:
  global_batch_size: 8
  flood_names: 20000
  wide_names: 500
  same_names: 100
  name_bytes: 100
  batch_delay_ms: )", delay_ms, R"(
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 100000000
scheduling_unit: 5
max_restarts: 0
environment:
  environment_variables:
    - FLOOD_MARKER=)", marker, R"(
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoint_dir, "\n");
}

int64_t Int(const nlohmann::json& j) { return j.is_string() ? std::stoll(j.get<std::string>()) : j.get<int64_t>(); }

int64_t FirstTrial(TestCluster& cluster, int exp) {
  int64_t trial = 0;
  EXPECT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(exp);
        if (trials.empty()) return false;
        trial = Int(trials[0]["id"]);
        return true;
      },
      120s));
  return trial;
}

// det.db plus its WAL, in bytes.
int64_t DbBytes(const TestCluster& cluster) {
  std::error_code ec;
  int64_t n = 0;
  for (const std::string& p : {cluster.db_path(), cluster.db_path() + "-wal"}) {
    const auto size = fs::file_size(p, ec);
    if (!ec) n += static_cast<int64_t>(size);
  }
  return n;
}

// The first column of `sql`'s first row (read-only, beside the master).
int64_t DbInt(const TestCluster& cluster, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t v = -1;
  if (sqlite3_open_v2(cluster.db_path().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
      v = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

void ExpectAlive(TestCluster& cluster) {
  int status = 0;
  cluster.Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << "the master stopped answering";
  EXPECT_TRUE(ProcessAlive(cluster.master().pid()));
}

bool Stopped(const std::string& state) { return state == "STATE_CANCELED" || state == "STATE_KILLED"; }

// Finding 6: 20,000 distinct 100-byte names per report, new ones every
// batch. The database grows by at most the configured bound (1 MiB of metric
// data per trial) plus slack; each refusal names its flag in the trial's
// logs; the experiment is then killed, its processes gone, the master alive.
TEST(SecurityMetricsTest, MetricFloodIsBoundedAndTheTrialCanBeKilled) {
  TempDir dir;
  TestCluster cluster(dir, TestClusterOptions().add_master_flags(
                               {"--max-trial-metric-names", "2000", "--max-trial-metric-mib", "1",
                                "--max-trial-log-mib", "1"}));
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s));
  const int64_t before = DbBytes(cluster);
  const std::string marker = "flood-" + fs::path(dir.path()).filename().string();
  const int exp = cluster.CreateExperiment(FloodYaml(dir / "checkpoints", marker), "flood", kFloodTrial);
  ASSERT_GT(exp, 0);
  const int64_t trial = FirstTrial(cluster, exp);
  ASSERT_GT(trial, 0);

  // Every bound is reached, and each refusal says which flag to raise.
  std::string logs;
  const std::vector<std::string> flags = {"--max-metric-values-per-report", "--max-trial-metric-names",
                                          "--max-trial-metric-mib"};
  ASSERT_TRUE(PollUntil(
      [&] {
        logs = cluster.TrialLogs(trial);
        for (const std::string& f : flags) {
          if (logs.find("(det-master " + f + ")") == std::string::npos) return false;
        }
        return true;
      },
      240s))
      << logs.substr(logs.size() > 4000 ? logs.size() - 4000 : 0);
  EXPECT_THAT(logs, HasSubstr("[det-trial] metrics refused by the master"));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("trial ", trial, ": a flood report of 20000 metric values")));
  // The flood goes on (200 more refusals) without the database growing.
  ASSERT_TRUE(PollUntil([&] { return cluster.TrialLogs(trial).find("(200 refused reports") != std::string::npos; },
                        240s));
  const int64_t metric_bytes =
      DbInt(cluster, absl::StrCat("SELECT SUM(LENGTH(CAST(metrics AS BLOB))) + 64 * COUNT(*) FROM metrics "
                                  "WHERE trial_id = ",
                                  trial));
  const int64_t names = DbInt(cluster, absl::StrCat("SELECT COUNT(DISTINCT j.key) FROM metrics m, "
                                                    "json_each(m.metrics) j WHERE m.trial_id = ",
                                                    trial));
  const int64_t growth = DbBytes(cluster) - before;
  std::printf("[ bounded  ] metric bytes %lld (bound 1 MiB), distinct names %lld (bound 2000), db+wal growth %lld\n",
              static_cast<long long>(metric_bytes), static_cast<long long>(names), static_cast<long long>(growth));
  EXPECT_GT(metric_bytes, 512 << 10) << "the bytes bound was reached";
  EXPECT_LE(metric_bytes, 1 << 20);
  EXPECT_LE(names, 2000);
  EXPECT_EQ(DbInt(cluster, absl::StrCat("SELECT COUNT(*) FROM metrics WHERE metric_group = 'flood' AND trial_id = ",
                                        trial)),
            0);
  // 1 MiB of metrics, 1 MiB of logs, and the WAL's pages (SQLite
  // checkpoints it at 4 MiB, the file stays that large): well under 16 MiB.
  EXPECT_LT(growth, 16 << 20) << "the database grew by " << growth << " bytes";

  // The experiment stops: processes gone, the master alive.
  ASSERT_FALSE(PidsWithEnv("FLOOD_MARKER=" + marker).empty()) << "the flood trial runs";
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"experiment", "kill", std::to_string(exp)}, &out, &err), 0) << err;
  EXPECT_TRUE(PollUntil([&] { return Stopped(cluster.ExperimentState(exp)); }, 120s))
      << cluster.ExperimentState(exp);
  EXPECT_TRUE(PollUntil([&] { return PidsWithEnv("FLOOD_MARKER=" + marker).empty(); }, 60s));
  ExpectAlive(cluster);
}

}  // namespace
}  // namespace det::testing
