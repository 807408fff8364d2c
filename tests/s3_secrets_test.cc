// Credential tests of S3 checkpoint storage (issue 49, must-show 3) on real
// det-master, det-agent and det-trial processes against s3rver. The
// profile's secret is the server's random one (test::S3Server::secret()), a
// needle that must appear nowhere det-cpp puts text: no /proc/PID/cmdline or
// /proc/PID/environ of det-cpp's processes (scanned while the trial runs and
// after), no file under the test's directory (master and agent logs, the
// agent's work dirs, the SQLite files, the bucket's objects) but the
// operator's credentials file and the harness's own boto3 key file, no REST
// or gRPC reply (det-cli), no database row.
//
// The SigV4 comparison with botocore's signer is common/s3/s3_client_test.cc
// (H1's SigV4 capture test, tests/s3/sigv4_check.py).
#include <sqlite3.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "tests/s3_e2e.h"
#include "tests/s3_harness.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

constexpr auto kLong = std::chrono::minutes(3);

// One trial of 60 batches of 50 ms with a checkpoint every 10, to S3.
std::string Config(const std::string& name, const std::string& prefix, const std::string& extra = "") {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: 50
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 60
min_validation_period:
  batches: 20
min_checkpoint_period:
  batches: 10
scheduling_unit: 10
)", S3Storage(prefix), extra, R"(data:
  train_size: 128
  val_size: 32
)");
}

// det-cpp's processes: every process whose executable is det-master,
// det-agent or det-trial of this build (pid -> its name).
std::map<pid_t, std::string> DetProcesses() {
  std::map<pid_t, std::string> out;
  const std::string bin = fs::weakly_canonical(DET_BIN_DIR).string() + "/";
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    const fs::path exe = fs::read_symlink(entry.path() / "exe", ec);
    if (ec || !absl::StartsWith(exe.string(), bin)) continue;
    std::string base = exe.filename();
    // A binary replaced (rebuilt) while it runs reads "NAME (deleted)".
    if (absl::EndsWith(base, " (deleted)")) base.resize(base.size() - 10);
    if (base == "det-master" || base == "det-agent" || base == "det-trial") out[std::stoi(name)] = base;
  }
  return out;
}

// Checks /proc/PID/cmdline and /proc/PID/environ of `pids` for `needle`
// (and for AWS_* credential variables); returns how many were read.
int ExpectNotInProcesses(const std::map<pid_t, std::string>& pids, const std::string& needle) {
  int read = 0;
  for (const auto& [pid, name] : pids) {
    const std::string proc = absl::StrCat("/proc/", pid);
    const std::string cmdline = ReadFile(proc + "/cmdline");
    const std::string environ = ReadFile(proc + "/environ");
    if (cmdline.empty()) continue;  // exited meanwhile
    ++read;
    EXPECT_THAT(cmdline, Not(HasSubstr(needle))) << name << " " << pid << "'s cmdline";
    EXPECT_THAT(environ, Not(HasSubstr(needle))) << name << " " << pid << "'s environ";
    EXPECT_THAT(environ, Not(HasSubstr("AWS_SECRET_ACCESS_KEY="))) << name << " " << pid;
  }
  return read;
}

// Every file under `dir` but `except` (files, or directories and all below)
// holds no `needle`; returns the paths read.
std::set<std::string> ExpectNotInFiles(const std::string& dir, const std::set<std::string>& except,
                                       const std::string& needle) {
  std::set<std::string> read;
  for (const auto& entry : fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied)) {
    if (!entry.is_regular_file()) continue;
    const std::string path = entry.path().string();
    bool excepted = false;
    for (const auto& e : except) excepted = excepted || path == e || absl::StartsWith(path, e + "/");
    if (excepted) continue;
    read.insert(entry.path().string());
    EXPECT_THAT(ReadFile(entry.path()), Not(HasSubstr(needle))) << entry.path();
  }
  return read;
}

// Every text and blob value of every row of every table of the SQLite
// database `db` holds no `needle`; returns how many values were read.
int64_t ExpectNotInDatabase(const std::string& db, const std::string& needle) {
  sqlite3* conn = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &conn, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK) << db;
  std::vector<std::string> tables;
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(conn, "SELECT name FROM sqlite_master WHERE type = 'table'", -1, &st, nullptr),
            SQLITE_OK);
  while (st != nullptr && sqlite3_step(st) == SQLITE_ROW) {
    tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  }
  sqlite3_finalize(st);
  int64_t values = 0;
  for (const auto& table : tables) {
    const std::string sql = absl::StrCat("SELECT * FROM \"", table, "\"");
    if (sqlite3_prepare_v2(conn, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(conn);
      continue;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const int type = sqlite3_column_type(st, i);
        if (type != SQLITE_TEXT && type != SQLITE_BLOB) continue;
        const void* p = sqlite3_column_blob(st, i);
        const std::string value(static_cast<const char*>(p), p ? sqlite3_column_bytes(st, i) : 0);
        ++values;
        EXPECT_THAT(value, Not(HasSubstr(needle))) << table << "." << sqlite3_column_name(st, i);
      }
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(conn);
  return values;
}

// The replies an operator or user can get about the experiment: REST and
// det-cli (gRPC), each checked for `needle`. Returns how many were read.
int ExpectNotInReplies(TestCluster& cluster, int exp, const std::string& needle) {
  const json trials = cluster.Trials(exp);
  EXPECT_EQ(trials.size(), 1u);
  const std::string trial = trials.empty() ? "0" : std::to_string(trials[0].value("id", 0));
  const json cps = ExperimentCheckpoints(cluster, exp);
  const std::string uuid = cps.empty() ? "" : cps.back().value("uuid", "");
  const std::string e = std::to_string(exp);
  int read = 0;
  const std::vector<std::string> paths = {"/api/v1/experiments/" + e,
                                          "/api/v1/experiments",
                                          "/api/v1/experiments/" + e + "/trials",
                                          "/api/v1/experiments/" + e + "/checkpoints",
                                          "/api/v1/trials/" + trial,
                                          "/api/v1/trials/" + trial + "/logs",
                                          "/api/v1/checkpoints/" + uuid,
                                          "/api/v1/master",
                                          "/api/v1/master/logs?limit=100000",
                                          "/api/v1/checkpoints/" + uuid + "/download"};
  // The master's own log is for admins.
  const std::string admin = RestLogin(cluster.http_port(), "admin");
  EXPECT_FALSE(admin.empty());
  for (const std::string& path : paths) {
    const std::string& token = absl::StartsWith(path, "/api/v1/master/logs") ? admin : cluster.Token();
    auto res = cluster.Http("GET", path, {{"Authorization", "Bearer " + token}}, "");
    EXPECT_TRUE(res) << path;
    if (!res) continue;
    EXPECT_EQ(res->status, 200) << path << ": " << res->body.substr(0, 300);
    EXPECT_THAT(res->body, Not(HasSubstr(needle))) << path;
    ++read;
  }
  const std::vector<std::vector<std::string>> commands = {
      {"experiment", "describe", e, "--json"}, {"experiment", "describe", e}, {"experiment", "logs", e},
      {"experiment", "list-trials", e, "--json"}, {"trial", "describe", trial, "--json"}, {"trial", "logs", trial},
      {"checkpoint", "list", e, "--json"}, {"checkpoint", "describe", uuid, "--json"}, {"master", "info"},
      {"experiment", "list"}};
  for (const auto& args : commands) {
    std::string out, err;
    EXPECT_EQ(cluster.Cli(args, &out, &err), 0) << absl::StrJoin(args, " ") << ": " << err;
    EXPECT_THAT(out + err, Not(HasSubstr(needle))) << absl::StrJoin(args, " ");
    ++read;
  }
  return read;
}

// Must show 3: after a run with S3 storage, the secret is in no process's
// argv or environment, no file but the credentials file, no reply, no row.
TEST(S3SecretsE2ETest, TheSecretIsNowhereAfterARunWithS3Storage) {
  S3Cluster c(/*slots=*/1);
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  const std::string& secret = c.s3->secret();
  ASSERT_GE(secret.size(), 20u);
  const int exp = cluster.CreateExperiment(Config("secrets", "secrets"), "secrets");
  ASSERT_GT(exp, 0);

  // While the trial runs (it has uploaded a checkpoint, so it holds the
  // credentials): master, agent and det-trial (and its children).
  pid_t trial_pid = 0;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(exp);
        if (trials.size() != 1 || trials[0].value("latest_checkpoint_uuid", "").empty()) return false;
        auto pids = PidsWithEnv("DET_ALLOCATION_ID=" + trials[0].value("allocation_id", ""));
        trial_pid = pids.empty() ? 0 : pids.front();
        return trial_pid > 0;
      },
      kLong))
      << cluster.Trials(exp).dump() << cluster.MasterLog();
  std::map<pid_t, std::string> running = DetProcesses();
  const std::string allocation = cluster.Trials(exp)[0].value("allocation_id", "");
  bool trial_found = false;
  for (pid_t pid : PidsWithEnv("DET_ALLOCATION_ID=" + allocation)) {
    trial_found = trial_found || running[pid] == "det-trial";
    running.emplace(pid, "a process of the trial");
  }
  EXPECT_EQ(running[cluster.master().pid()], "det-master") << "det-master not found by its executable";
  EXPECT_EQ(running[c.agent_pid], "det-agent") << "det-agent not found by its executable";
  EXPECT_TRUE(trial_found) << "det-trial of " << allocation << " (pid " << trial_pid << ") not found by its executable";
  EXPECT_GE(ExpectNotInProcesses(running, secret), 3);

  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", kLong)) << cluster.MasterLog();
  EXPECT_FALSE(Boto3List(*c.s3, "secrets").empty()) << "the run wrote no object";
  EXPECT_GE(ExpectNotInProcesses(DetProcesses(), secret), 2);

  EXPECT_GE(ExpectNotInReplies(cluster, exp, secret), 15);

  // A user's token cannot get the profile's credentials from TrialService.
  auto channel = grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials());
  auto stub = det::trial::v1::TrialService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + cluster.Token());
  det::trial::v1::GetCheckpointStorageCredentialsRequest req;
  req.set_trial_id(cluster.Trials(exp)[0].value("id", 0));
  req.set_storage_path(absl::StrCat("s3://", kBucket, "/secrets"));
  det::trial::v1::GetCheckpointStorageCredentialsResponse resp;
  grpc::Status st = stub->GetCheckpointStorageCredentials(&ctx, req, &resp);
  EXPECT_TRUE(st.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
              st.error_code() == grpc::StatusCode::UNAUTHENTICATED)
      << "a user's token got the trial's credentials: " << st.error_code() << " " << st.error_message();
  EXPECT_THAT(st.error_message(), Not(HasSubstr(secret)));
  EXPECT_TRUE(resp.secret_access_key().empty());

  // Files: logs, work dirs, the database and its WAL, the bucket's objects.
  const std::set<std::string> files =
      ExpectNotInFiles(c.dir.path(), {c.credentials_file, c.s3->dir() + "/boto3-secret"}, secret);
  EXPECT_TRUE(files.count(cluster.db_path())) << "the database file was not read";
  int logs = 0;
  for (const auto& f : files) logs += absl::EndsWith(f, ".out") || absl::EndsWith(f, ".err");
  EXPECT_GE(logs, 4) << "master and agent logs";
  EXPECT_GT(ExpectNotInDatabase(cluster.db_path(), secret), 10);
}

// A config that carries a secret is refused by det-cli and by the master
// (REST), naming the field and the fix, never echoing the value; nothing is
// stored.
TEST(S3SecretsE2ETest, AConfigWithASecretIsRefusedWithoutEchoingIt) {
  S3Cluster c(/*slots=*/1);
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  const std::string needle = "Zq8vN3needle0d9F7secretvalue";
  for (const char* key : {"secret_key", "access_key"}) {
    SCOPED_TRACE(key);
    const std::string yaml = Config("leaky", "leaky", absl::StrCat("  ", key, ": ", needle, "\n"));
    // The test's own input, outside what is scanned below.
    fs::create_directories(c.dir / "input");
    const std::string path = c.dir / absl::StrCat("input/leaky-", key, ".yaml");
    WriteFile(path, yaml);
    std::string out, err;
    EXPECT_NE(cluster.Cli({"experiment", "create", path, kTestSyntheticTrial}, &out, &err), 0) << out;
    EXPECT_THAT(err, HasSubstr(absl::StrCat("checkpoint_storage.", key)));
    EXPECT_THAT(err, HasSubstr("profile"));  // the fix: name a profile of the credentials file
    EXPECT_THAT(out + err, Not(HasSubstr(needle)));

    json body = {{"config_yaml", yaml}, {"trial_so", absl::Base64Escape(FakeTrialSo())}};
    auto res = cluster.Http("POST", "/api/v1/experiments", {{"Authorization", "Bearer " + cluster.Token()}},
                            body.dump());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << res->body;
    EXPECT_THAT(res->body, HasSubstr(absl::StrCat("checkpoint_storage.", key)));
    EXPECT_THAT(res->body, Not(HasSubstr(needle)));
  }
  EXPECT_TRUE(cluster.Get("/api/v1/experiments").value("experiments", json::array()).empty());
  ExpectNotInFiles(c.dir.path(), {c.credentials_file, c.s3->dir() + "/boto3-secret", c.dir / "input"}, needle);
  ExpectNotInDatabase(cluster.db_path(), needle);
}

// A profile is only for the workspaces its det_workspaces name: an
// experiment of another workspace that names it is refused (PERMISSION_DENIED
// naming checkpoint_storage.profile and the workspace), so none of its trials
// ever asks for the credentials; one of the named workspace runs. (The
// TrialService check that a trial gets only its own storage's credentials is
// master/core's unit test.)
TEST(S3SecretsE2ETest, AProfileServesOnlyItsWorkspaces) {
  S3Cluster c(/*slots=*/1, /*workspaces=*/"team-a");
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  std::string out, err;
  for (const char* ws : {"team-a", "team-b"}) {
    ASSERT_EQ(cluster.Cli({"workspace", "create", ws}, &out, &err), 0) << err;
    ASSERT_EQ(cluster.Cli({"project", "create", ws, "p"}, &out, &err), 0) << err;
  }
  const std::string other = c.dir / "other.yaml";
  WriteFile(other, Config("other", "other", "workspace: team-b\nproject: p\n"));
  EXPECT_NE(cluster.Cli({"experiment", "create", other, kTestSyntheticTrial}, &out, &err), 0) << out;
  EXPECT_THAT(err, HasSubstr("checkpoint_storage.profile"));
  EXPECT_THAT(err, HasSubstr("team-b"));
  EXPECT_THAT(err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(err, Not(HasSubstr(c.s3->secret())));
  EXPECT_TRUE(cluster.Get("/api/v1/experiments").value("experiments", json::array()).empty());

  const int own = cluster.CreateExperiment(Config("own", "own", "workspace: team-a\nproject: p\n"), "own");
  ASSERT_GT(own, 0);
  EXPECT_TRUE(cluster.WaitForState(own, "STATE_COMPLETED", kLong)) << cluster.MasterLog();
  EXPECT_FALSE(Boto3List(*c.s3, "own").empty());
  EXPECT_TRUE(Boto3List(*c.s3, "other").empty());
}

}  // namespace
}  // namespace det::testing
