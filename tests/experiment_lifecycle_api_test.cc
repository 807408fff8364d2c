// End to end (real det-master, det-agent, det-cli, the synthetic trial):
// archive / unarchive, delete (files and rows gone, nothing else touched,
// resumed after the master is killed with SIGKILL), experiment set / label,
// experiment wait's exit codes, and non-owners refused.
#include <sqlite3.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"

namespace det::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// One trial of 20 batches, a checkpoint and a validation every 10.
std::string ShortConfig(const std::string& name, const std::string& checkpoint_dir, int batch_delay_ms = 0,
                        int batches = 20) {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: )", batch_delay_ms, R"(
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: )", batches, R"(
min_validation_period:
  batches: 10
min_checkpoint_period:
  batches: 10
checkpoint_storage:
  type: shared_fs
  save_trial_latest: 5
  host_path: )", checkpoint_dir, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
)");
}

// Rows of `table` WHERE `where`, through a second (read-only) connection.
int64_t Count(const std::string& db_path, const std::string& table, const std::string& where) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) return -1;
  sqlite3_stmt* st = nullptr;
  std::string sql = absl::StrCat("SELECT COUNT(*) FROM ", table, " WHERE ", where);
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

std::set<int64_t> ListedIds(TestCluster& cluster, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"experiment", "list", "--json"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::string out;
  EXPECT_EQ(cluster.Cli(args, &out), 0) << out;
  std::set<int64_t> ids;
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (!j.is_object()) return ids;
  for (const auto& e : j.value("experiments", nlohmann::json::array())) {
    ids.insert(e["id"].get<int64_t>());
  }
  return ids;
}

std::set<int64_t> RestIds(TestCluster& cluster, const std::string& query) {
  std::set<int64_t> ids;
  nlohmann::json j = cluster.Get("/api/v1/experiments" + query);
  for (const auto& e : j.value("experiments", nlohmann::json::array())) {
    ids.insert(e["id"].get<int64_t>());
  }
  return ids;
}

std::vector<std::string> CheckpointDirs(TestCluster& cluster, int exp) {
  std::vector<std::string> dirs;
  nlohmann::json j = cluster.Get(absl::StrCat("/api/v1/experiments/", exp, "/checkpoints"));
  for (const auto& c : j.value("checkpoints", nlohmann::json::array())) dirs.push_back(c["storage_path"]);
  return dirs;
}

TEST(ExperimentLifecycleApiTest, ArchiveUnarchiveSetLabelsAndWait) {
  TempDir dir;
  TestCluster cluster(dir, TestClusterOptions().set_cli_timeout(3min));
  cluster.StartAgent("a1");
  const int done = cluster.CreateExperiment(ShortConfig("short", dir / "checkpoints"), "short");
  ASSERT_GT(done, 0);
  std::string out, err;
  // wait: 0 for COMPLETED, printing the state.
  EXPECT_EQ(cluster.Cli({"experiment", "wait", std::to_string(done), "--timeout", "170"}, &out, &err), 0) << err;
  EXPECT_NE(out.find("COMPLETED"), std::string::npos) << out;

  const int slow = cluster.CreateExperiment(ShortConfig("slow", dir / "checkpoints", 100, 100000), "slow");
  ASSERT_GT(slow, 0);
  // A running experiment can be neither archived nor deleted.
  EXPECT_EQ(cluster.Cli({"experiment", "archive", std::to_string(slow)}, &out, &err), 1);
  EXPECT_NE(err.find(absl::StrCat("experiment ", slow, " is ACTIVE")), std::string::npos) << err;
  EXPECT_NE(err.find("FAILED_PRECONDITION"), std::string::npos) << err;
  EXPECT_EQ(cluster.Cli({"experiment", "delete", std::to_string(slow), "--yes"}, &out, &err), 1);
  EXPECT_NE(err.find("FAILED_PRECONDITION"), std::string::npos) << err;
  // wait: 2 on a timeout.
  EXPECT_EQ(cluster.Cli({"experiment", "wait", std::to_string(slow), "--timeout", "1"}, &out, &err), 2);
  EXPECT_NE(err.find("still ACTIVE"), std::string::npos) << err;

  // Archive: hidden from the default list (det-cli and REST), shown with --all / archived=true.
  ASSERT_EQ(cluster.Cli({"experiment", "archive", std::to_string(done)}, &out, &err), 0) << err;
  EXPECT_EQ(ListedIds(cluster, {}), std::set<int64_t>({slow}));
  EXPECT_EQ(ListedIds(cluster, {"--all"}), std::set<int64_t>({done, slow}));
  EXPECT_EQ(RestIds(cluster, ""), std::set<int64_t>({slow}));
  EXPECT_EQ(RestIds(cluster, "?archived=true"), std::set<int64_t>({done}));
  EXPECT_TRUE(cluster.Get(absl::StrCat("/api/v1/experiments/", done))["experiment"]["archived"].get<bool>());
  // Unarchive through Determined's REST path.
  int status = 0;
  cluster.Send("POST", absl::StrCat("/api/v1/experiments/", done, "/unarchive"), "{}", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(RestIds(cluster, ""), std::set<int64_t>({done, slow}));
  cluster.Send("POST", absl::StrCat("/api/v1/experiments/", slow, "/archive"), "{}", &status);
  EXPECT_EQ(status, 409);

  // set name / description / labels, label add / remove.
  const std::string id = std::to_string(done);
  ASSERT_EQ(cluster.Cli({"experiment", "set", "name", id, "renamed"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"experiment", "set", "description", id, "a longer text"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"experiment", "set", "labels", id, "a,b,c"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"experiment", "label", "add", id, "d"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"experiment", "label", "remove", id, "b"}, &out, &err), 0) << err;
  nlohmann::json e = cluster.Get("/api/v1/experiments/" + id)["experiment"];
  EXPECT_EQ(e["name"], "renamed");
  EXPECT_EQ(e["description"], "a longer text");
  EXPECT_EQ(e["labels"], nlohmann::json({"a", "c", "d"}));
  EXPECT_EQ(cluster.Cli({"experiment", "set", "name", id, std::string(256, 'n')}, &out, &err), 1);
  EXPECT_NE(err.find("INVALID_ARGUMENT"), std::string::npos) << err;

  // Another (non-admin) user may not archive or delete determined's experiment.
  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  auto created = cluster.Http("POST", "/api/v1/users", {{"Authorization", "Bearer " + admin}},
                              R"({"user": {"username": "mallory"}, "password": "mallory-pw-1"})");
  ASSERT_TRUE(created && created->status == 200);
  const std::string mallory = RestLogin(cluster.http_port(), "mallory", "mallory-pw-1");
  auto refused = cluster.Http("POST", absl::StrCat("/api/v1/experiments/", done, "/archive"),
                              {{"Authorization", "Bearer " + mallory}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403) << refused->body;
  refused = cluster.Http("DELETE", absl::StrCat("/api/v1/experiments/", done), {{"Authorization", "Bearer " + mallory}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403) << refused->body;
  EXPECT_EQ(cluster.ExperimentState(done), "STATE_COMPLETED");

  // wait: 1 for another terminal state.
  ASSERT_EQ(cluster.Cli({"experiment", "kill", std::to_string(slow)}, &out, &err), 0) << err;
  EXPECT_EQ(cluster.Cli({"experiment", "wait", std::to_string(slow), "--timeout", "120"}, &out, &err), 1) << err;
  EXPECT_NE(out.find("CANCELED"), std::string::npos) << out;
  // wait on an unknown experiment: 2.
  EXPECT_EQ(cluster.Cli({"experiment", "wait", "999"}, &out, &err), 2);
}

TEST(ExperimentLifecycleApiTest, DeleteRemovesFilesAndRowsAndResumesAfterKill9) {
  TempDir dir;
  TestCluster cluster(dir, TestClusterOptions().set_cli_timeout(3min));
  cluster.StartAgent("a1");
  const int a = cluster.CreateExperiment(ShortConfig("a", dir / "checkpoints"), "a");
  const int b = cluster.CreateExperiment(ShortConfig("b", dir / "checkpoints"), "b");
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"experiment", "wait", std::to_string(a), "--timeout", "170"}, &out, &err), 0) << err;
  ASSERT_EQ(cluster.Cli({"experiment", "wait", std::to_string(b), "--timeout", "170"}, &out, &err), 0) << err;
  const std::vector<std::string> dirs_a = CheckpointDirs(cluster, a);
  const std::vector<std::string> dirs_b = CheckpointDirs(cluster, b);
  ASSERT_FALSE(dirs_a.empty());
  ASSERT_FALSE(dirs_b.empty());
  for (const auto& d : dirs_a) ASSERT_TRUE(fs::exists(d)) << d;
  const int64_t trial_a = cluster.Trials(a)[0]["id"].get<int64_t>();
  const int64_t trial_b = cluster.Trials(b)[0]["id"].get<int64_t>();
  const std::string sha = cluster.Get(absl::StrCat("/api/v1/experiments/", a))["experiment"]["trial_so"]["sha256"];
  const std::string artifact = dir / ("master/artifacts/" + sha + ".so");
  ASSERT_TRUE(fs::exists(artifact)) << artifact;
  const std::string db = cluster.db_path();
  ASSERT_GT(Count(db, "metrics", absl::StrCat("trial_id = ", trial_a)), 0);
  ASSERT_GT(Count(db, "task_logs", absl::StrCat("trial_id = ", trial_a)), 0);
  const int64_t metrics_b = Count(db, "metrics", absl::StrCat("trial_id = ", trial_b));
  const int64_t logs_b = Count(db, "task_logs", absl::StrCat("trial_id = ", trial_b));

  // Without --yes, det-cli asks; "n" deletes nothing.
  EXPECT_EQ(cluster.Cli({"experiment", "delete", std::to_string(a)}, &out, &err, "n\n"), 1);
  EXPECT_EQ(cluster.ExperimentState(a), "STATE_COMPLETED");
  ASSERT_EQ(cluster.Cli({"experiment", "delete", std::to_string(a)}, &out, &err, "y\n"), 0) << err;
  EXPECT_NE(out.find("DELETING"), std::string::npos) << out;
  // SIGKILL right after the call returned (DELETING is stored before it
  // returns; the deletion starts at the master's next background pass).
  cluster.KillMaster();
  std::printf("[ info     ] experiment %d rows left at the kill: %lld\n", a,
              static_cast<long long>(Count(db, "experiments", absl::StrCat("id = ", a))));
  cluster.RestartMaster();

  int status = 0;
  ASSERT_TRUE(PollUntil(
      [&] {
        cluster.Get(absl::StrCat("/api/v1/experiments/", a), &status);
        return status == 404;
      },
      60s))
      << cluster.MasterLog();
  for (const auto& d : dirs_a) EXPECT_FALSE(fs::exists(d)) << d;
  EXPECT_EQ(Count(db, "experiments", absl::StrCat("id = ", a)), 0);
  EXPECT_EQ(Count(db, "trials", absl::StrCat("experiment_id = ", a)), 0);
  EXPECT_EQ(Count(db, "metrics", absl::StrCat("trial_id = ", trial_a)), 0);
  EXPECT_EQ(Count(db, "task_logs", absl::StrCat("trial_id = ", trial_a)), 0);
  EXPECT_EQ(Count(db, "checkpoints", absl::StrCat("experiment_id = ", a)), 0);
  EXPECT_EQ(Count(db, "allocations", absl::StrCat("experiment_id = ", a)), 0);
  // b untouched; the trial.so it shares with a kept.
  for (const auto& d : dirs_b) EXPECT_TRUE(fs::exists(d)) << d;
  EXPECT_EQ(CheckpointDirs(cluster, b), dirs_b);
  EXPECT_EQ(Count(db, "metrics", absl::StrCat("trial_id = ", trial_b)), metrics_b);
  EXPECT_GE(Count(db, "task_logs", absl::StrCat("trial_id = ", trial_b)), logs_b);
  EXPECT_EQ(cluster.ExperimentState(b), "STATE_COMPLETED");
  EXPECT_TRUE(fs::exists(artifact));
  // After: NOT_FOUND for everything on it.
  EXPECT_EQ(cluster.Cli({"experiment", "archive", std::to_string(a)}, &out, &err), 1);
  EXPECT_NE(err.find("NOT_FOUND"), std::string::npos) << err;

  // The last user of the trial.so goes (REST DELETE): so does the file.
  auto deleted = cluster.Http("DELETE", absl::StrCat("/api/v1/experiments/", b),
                              {{"Authorization", "Bearer " + cluster.Token()}});
  ASSERT_TRUE(deleted && deleted->status == 200) << (deleted ? deleted->body : "no answer");
  ASSERT_TRUE(PollUntil(
      [&] {
        cluster.Get(absl::StrCat("/api/v1/experiments/", b), &status);
        return status == 404;
      },
      60s))
      << cluster.MasterLog();
  for (const auto& d : dirs_b) EXPECT_FALSE(fs::exists(d)) << d;
  EXPECT_FALSE(fs::exists(artifact));
  EXPECT_EQ(Count(db, "trials", "1"), 0);
}

}  // namespace
}  // namespace det::testing
