// det-cli master backup (issue 47, part 3) end to end: a backup taken while
// a trial trains and reports metrics and another client creates users is a
// consistent snapshot of one moment; a master started on it shows the same
// users, experiments, trials, metrics and checkpoints as the source had at
// that moment, PRAGMA integrity_check is ok, and a checkpoint it names
// downloads through it. Also: admins only (gRPC and REST), an existing FILE
// is kept without --force, the master's temporary file is gone afterwards,
// the REST form streams the same snapshot, a call cancelled mid-stream or a
// client that stops reading frees the file and the slot, and a det.db
// deleted while the master runs is backed up from the served database.
//
// "At that moment": every table compared has ids that only grow in commit
// order (one writer). So the restored database must hold exactly the
// source's rows up to its own highest id (nothing missing, nothing changed
// in what cannot change), and that id must lie between the source's highest
// before det-cli started and after it ended.
#include <gtest/gtest.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "det/api/v1/api.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// A read-only view of a database file (the source's, while its master runs
// or after, and the backup).
class Db {
 public:
  explicit Db(const std::string& path) {
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK) << path;
    sqlite3_busy_timeout(db_, 10000);
  }
  ~Db() { sqlite3_close_v2(db_); }
  // Every row of `sql`, its columns joined by '|'.
  std::vector<std::string> Rows(const std::string& sql) const {
    std::vector<std::string> rows;
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sql << ": " << sqlite3_errmsg(db_);
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> cols;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        const unsigned char* t = sqlite3_column_text(st, i);
        cols.push_back(t ? reinterpret_cast<const char*>(t) : "NULL");
      }
      rows.push_back(absl::StrJoin(cols, "|"));
    }
    sqlite3_finalize(st);
    return rows;
  }
  int64_t Int(const std::string& sql) const {
    auto rows = Rows(sql);
    return rows.empty() || rows[0] == "NULL" ? 0 : std::stoll(rows[0]);
  }

 private:
  sqlite3* db_ = nullptr;
};

int64_t Int(const json& v) { return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>(); }

// A long synthetic trial that checkpoints every 20 batches and keeps them all.
std::string Config(const std::string& checkpoint_dir) {
  return absl::StrCat(
      "name: backup\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 16\n"
      "  dropout: 0.1\n  batch_delay_ms: 5\nsearcher:\n  name: single\n  metric: validation_loss\n"
      "  smaller_is_better: true\n  max_length:\n    batches: 100000\nmin_validation_period:\n  batches: 20\n"
      "min_checkpoint_period:\n  batches: 20\nscheduling_unit: 5\ncheckpoint_storage:\n  type: shared_fs\n"
      "  host_path: ", checkpoint_dir, "\n  save_trial_latest: 100000\n  save_trial_best: 100000\n"
      "  save_experiment_best: 100000\n"
      "environment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\ndata:\n  train_size: 256\n  val_size: 64\n");
}

// Creates users load-0, load-1, ... through the REST API as `admin` until
// stopped; counts them and any failure.
class UserLoad {
 public:
  // Its own REST client: TestCluster is driven by the test's thread.
  UserLoad(int http_port, std::string admin_token) : http_port_(http_port), token_(std::move(admin_token)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~UserLoad() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int created() const { return created_.load(); }
  const std::string& first_error() const { return first_error_; }  // after Stop

 private:
  void Run() {
    httplib::Client client("127.0.0.1", http_port_);
    client.set_read_timeout(std::chrono::seconds(30));
    while (!stop_) {
      json body = {{"user", {{"username", absl::StrCat("load-", created_.load())}}}, {"password", "pw"}};
      auto res = client.Post("/api/v1/PostUser", {{"Authorization", "Bearer " + token_}}, body.dump(),
                             "application/json");
      if (!res || res->status != 200) {
        if (first_error_.empty()) first_error_ = res ? absl::StrCat(res->status, " ", res->body) : "no answer";
        continue;
      }
      created_++;
    }
  }
  const int http_port_;
  const std::string token_;
  std::atomic<bool> stop_{false};
  std::atomic<int> created_{0};
  std::string first_error_;
  std::thread thread_;
};

// The highest ids the source had at one moment.
struct HighWater {
  int64_t metric = 0;
  int64_t user = 0;
};

HighWater HighWaterOf(const std::string& db_path) {
  Db db(db_path);
  return {db.Int("SELECT MAX(id) FROM metrics"), db.Int("SELECT MAX(id) FROM users")};
}

std::vector<std::string> BackupTemps(const std::string& data_dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(data_dir)) {
    if (e.path().filename().string().rfind(".det-backup-", 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

// The restored database against the final source: every row up to the
// restored high-water ids, in what a row cannot change afterwards.
void ExpectPrefixOfSource(const Db& source, const Db& restored) {
  const int64_t max_metric = restored.Int("SELECT MAX(id) FROM metrics");
  const int64_t max_user = restored.Int("SELECT MAX(id) FROM users");
  ASSERT_GT(max_metric, 0);
  const std::string metrics =
      "SELECT id, trial_id, trial_run_id, metric_group, total_batches, metrics FROM metrics WHERE id <= ";
  EXPECT_EQ(restored.Rows(absl::StrCat(metrics, max_metric, " ORDER BY id")),
            source.Rows(absl::StrCat(metrics, max_metric, " ORDER BY id")))
      << "the restored metrics are not exactly the source's up to id " << max_metric;
  const std::string users = "SELECT id, username, admin, password_hash FROM users WHERE id <= ";
  EXPECT_EQ(restored.Rows(absl::StrCat(users, max_user, " ORDER BY id")),
            source.Rows(absl::StrCat(users, max_user, " ORDER BY id")));
  const std::string experiments = "SELECT id, name, config_yaml, trial_so_sha256, owner FROM experiments ORDER BY id";
  EXPECT_EQ(restored.Rows(experiments), source.Rows(experiments));
  const std::string trials = "SELECT id, experiment_id, request_id, hparams_json, seed FROM trials ORDER BY id";
  EXPECT_EQ(restored.Rows(trials), source.Rows(trials));
  // Checkpoints have no growing id: per trial, the source's up to the
  // latest batch the restored one has.
  for (const std::string& trial : restored.Rows("SELECT DISTINCT trial_id FROM checkpoints")) {
    const int64_t upto =
        restored.Int(absl::StrCat("SELECT MAX(total_batches) FROM checkpoints WHERE trial_id = ", trial));
    const std::string cps = absl::StrCat(
        "SELECT uuid, trial_run_id, total_batches, resources, storage_path FROM checkpoints WHERE trial_id = ", trial,
        " AND total_batches <= ", upto, " ORDER BY total_batches, uuid");
    EXPECT_EQ(restored.Rows(cps), source.Rows(cps)) << "trial " << trial;
  }
}

// What a master started on the restored database answers, against the
// database itself.
void ExpectRestoredMasterShows(TestCluster& restored, const Db& db, const TempDir& dir) {
  std::set<std::string> api_users;
  for (const auto& u : restored.Get("/api/v1/users").value("users", json::array())) {
    api_users.insert(u.value("username", ""));
  }
  auto db_users = db.Rows("SELECT username FROM users");
  EXPECT_EQ(api_users, std::set<std::string>(db_users.begin(), db_users.end()));
  for (const std::string& exp : db.Rows("SELECT id FROM experiments")) {
    EXPECT_EQ(restored.Get("/api/v1/experiments/" + exp)["experiment"].value("name", ""), "backup");
    std::set<std::string> trials;
    for (const auto& t : restored.Trials(std::stoi(exp))) trials.insert(std::to_string(Int(t["id"])));
    auto db_trials = db.Rows("SELECT id FROM trials WHERE experiment_id = " + exp);
    EXPECT_EQ(trials, std::set<std::string>(db_trials.begin(), db_trials.end()));
  }
  for (const std::string& trial : db.Rows("SELECT id FROM trials")) {
    auto m = restored.Get(absl::StrCat("/api/v1/trials/", trial, "/metrics?full_resolution=true&limit=10000"));
    std::set<std::string> api_metrics;
    for (const auto& r : m.value("metrics", json::array())) api_metrics.insert(std::to_string(Int(r["id"])));
    auto rows = db.Rows("SELECT id FROM metrics WHERE NOT archived AND trial_id = " + trial);
    EXPECT_EQ(api_metrics, std::set<std::string>(rows.begin(), rows.end())) << "trial " << trial;
    EXPECT_GT(api_metrics.size(), 0u);
    std::set<std::string> api_cps;
    for (const auto& c : restored.Get("/api/v1/trials/" + trial + "/checkpoints").value("checkpoints", json::array())) {
      api_cps.insert(c.value("uuid", ""));
    }
    auto cps = db.Rows("SELECT uuid FROM checkpoints WHERE state = 'COMPLETED' AND trial_id = " + trial);
    EXPECT_EQ(api_cps, std::set<std::string>(cps.begin(), cps.end())) << "trial " << trial;
  }
  // A checkpoint the restored database names: its files are found.
  auto cp = db.Rows("SELECT uuid, storage_path FROM checkpoints WHERE state = 'COMPLETED' ORDER BY time_ms LIMIT 1");
  ASSERT_EQ(cp.size(), 1u);
  std::vector<std::string> uuid_path = absl::StrSplit(cp[0], '|');
  std::string out, err;
  ASSERT_EQ(restored.Cli({"checkpoint", "download", uuid_path[0], "-o", dir / "downloaded"}, &out, &err), 0)
      << out << err;
  auto files = FilesUnder(dir / "downloaded");
  EXPECT_FALSE(files.empty());
  for (const auto& [path, bytes] : files) EXPECT_EQ(bytes, ReadFile(uuid_path[1] + "/" + path)) << path;
}

// Waits for the experiment's first trial to have `n` checkpoints; its id.
int64_t WaitForCheckpoints(TestCluster& cluster, int exp, int n) {
  int64_t trial = 0;
  EXPECT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(exp);
        if (trials.empty()) return false;
        trial = Int(trials[0]["id"]);
        auto cps = cluster.Get(absl::StrCat("/api/v1/trials/", trial, "/checkpoints"));
        return cps.value("checkpoints", json::array()).size() >= static_cast<size_t>(n);
      },
      120s))
      << cluster.MasterLog();
  return trial;
}

int LoginAdmin(TestCluster& cluster) {
  std::string out, err;
  int rc = cluster.Cli({"user", "login", "admin", "--password-stdin"}, &out, &err, "\n");
  EXPECT_EQ(rc, 0) << out << err;
  return rc;
}

TEST(BackupTest, ARestoredMasterShowsTheSourceAtTheBackupPoint) {
  TempDir src;
  auto cluster = std::make_unique<TestCluster>(src);
  cluster->StartAgent("a1");
  const int exp = cluster->CreateExperiment(Config(src / "checkpoints"), "backup");
  ASSERT_GT(exp, 0);
  WaitForCheckpoints(*cluster, exp, 2);
  ASSERT_EQ(LoginAdmin(*cluster), 0);
  const std::string file = src / "backup.db";
  HighWater before, after;
  int users_before = 0, users_after = 0;
  std::string out, err;
  {
    // Write load: the trial reports metrics and checkpoints; this thread
    // creates users. Both go on before, during and after the backup.
    UserLoad load(cluster->http_port(), RestLogin(cluster->http_port(), "admin"));
    ASSERT_TRUE(PollUntil([&] { return load.created() >= 2; }, 60s)) << load.first_error();
    users_before = load.created();
    before = HighWaterOf(cluster->db_path());
    ASSERT_EQ(cluster->Cli({"master", "backup", file}, &out, &err), 0) << out << err;
    after = HighWaterOf(cluster->db_path());
    users_after = load.created();
    ASSERT_TRUE(PollUntil([&] { return load.created() >= users_after + 2; }, 60s)) << load.first_error();
    load.Stop();
    EXPECT_EQ(load.first_error(), "") << "a write failed while the backup ran";
  }
  std::cout << "backup: " << out << "users created before/after it: " << users_before << "/" << users_after
            << ", metric ids " << before.metric << "/" << after.metric << "\n";
  EXPECT_THAT(out, HasSubstr("Backed up the master's database to " + file));
  EXPECT_THAT(out, HasSubstr("schema version "));
  EXPECT_THAT(out, HasSubstr("snapshot taken at 20"));
  EXPECT_TRUE(BackupTemps(src / "master").empty()) << "the master's temporary file was left behind";
  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  {
    Db backup(file);
    EXPECT_EQ(backup.Rows("PRAGMA integrity_check"), std::vector<std::string>{"ok"});
    // The backup point lies within the backup's run.
    const HighWater restored{backup.Int("SELECT MAX(id) FROM metrics"), backup.Int("SELECT MAX(id) FROM users")};
    EXPECT_GE(restored.metric, before.metric);
    EXPECT_LE(restored.metric, after.metric);
    EXPECT_GE(restored.user, before.user);
    EXPECT_LE(restored.user, after.user);
    EXPECT_EQ(
        backup.Int("SELECT COUNT(*) FROM users WHERE username LIKE 'load-%'"),
        backup.Int("SELECT MAX(CAST(substr(username, 6) AS INTEGER)) + 1 FROM users WHERE username LIKE 'load-%'"))
        << "users created in order are missing from the backup";
  }
  // The source stops (its last rows final); the restored master starts on
  // a copy of the backup, on the same checkpoint storage.
  EXPECT_EQ(cluster->Cli({"experiment", "kill", std::to_string(exp)}, &out, &err), 0) << out << err;
  EXPECT_TRUE(cluster->WaitForState(exp, "STATE_CANCELED", 120s)) << cluster->ExperimentState(exp);
  cluster.reset();
  {
    Db source(src / "master/det.db");
    Db backup(file);
    ExpectPrefixOfSource(source, backup);
    // Writes went on after the backup point: the comparison is not vacuous.
    EXPECT_GT(source.Int("SELECT MAX(id) FROM users"), backup.Int("SELECT MAX(id) FROM users"));
    EXPECT_GT(source.Int("SELECT MAX(id) FROM metrics"), backup.Int("SELECT MAX(id) FROM metrics"));
  }
  TempDir dst;
  fs::create_directories(dst / "master");
  fs::permissions(dst / "master", fs::perms::owner_all, fs::perm_options::replace);
  fs::copy_file(file, dst / "master/det.db");
  TestCluster restored(dst, TestClusterOptions().add_master_flags({"--checkpoint-storage-root", src / "checkpoints"}));
  Db db(file);
  ExpectRestoredMasterShows(restored, db, dst);
}

TEST(BackupTest, OnlyAdminsMayBackUp) {
  TempDir dir;
  TestCluster cluster(dir);
  std::string out, err;
  // det-cli logs in as `determined`, not an admin.
  EXPECT_NE(cluster.Cli({"master", "backup", dir / "b.db"}, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("BackupDatabase"));
  EXPECT_THAT(err, HasSubstr("admin"));
  EXPECT_FALSE(fs::exists(dir / "b.db"));
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().filename().string().find("b.db.tmp-"), std::string::npos) << e.path();
  }
  auto res = cluster.Http("POST", "/api/v1/BackupDatabase", {{"Authorization", "Bearer " + cluster.Token()}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403) << res->body;
  // No token at all.
  res = cluster.Http("POST", "/api/v1/BackupDatabase", {});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401) << res->body;
}

TEST(BackupTest, AnExistingFileIsKeptWithoutForce) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_EQ(LoginAdmin(cluster), 0);
  const std::string file = dir / "existing.db";
  WriteFile(file, "precious");
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"master", "backup", file}, &out, &err), 2) << out << err;
  EXPECT_THAT(err, HasSubstr(file + " exists"));
  EXPECT_THAT(err, HasSubstr("--force"));
  EXPECT_EQ(ReadFile(file), "precious");
  ASSERT_EQ(cluster.Cli({"master", "backup", file, "--force"}, &out, &err), 0) << out << err;
  Db db(file);
  EXPECT_EQ(db.Rows("PRAGMA integrity_check"), std::vector<std::string>{"ok"});
  EXPECT_GT(db.Int("SELECT COUNT(*) FROM users"), 0);
  EXPECT_TRUE(BackupTemps(dir / "master").empty());
}

TEST(BackupTest, AMasterRemovesASnapshotLeftByACrashAtStart) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.KillMaster();
  const std::string stale = dir / "master/.det-backup-0123456789abcdef0123456789abcdef.tmp";
  WriteFile(stale, "a snapshot cut short");
  WriteFile(dir / "master/keep.txt", "not a snapshot");
  cluster.RestartMaster();
  EXPECT_FALSE(fs::exists(stale)) << cluster.MasterLog();
  EXPECT_TRUE(fs::exists(dir / "master/keep.txt"));
  EXPECT_THAT(cluster.MasterLog(), HasSubstr("the temporary file of a backup that did not finish"));
}

TEST(BackupTest, TheRestFormStreamsTheSameSnapshot) {
  TempDir dir;
  TestCluster cluster(dir);
  const std::string admin = RestLogin(cluster.http_port(), "admin");
  ASSERT_FALSE(admin.empty());
  auto res = cluster.Http("POST", "/api/v1/BackupDatabase", {{"Authorization", "Bearer " + admin}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::string bytes;
  json last;
  for (const auto& line : absl::StrSplit(res->body, '\n', absl::SkipEmpty())) {
    json j = json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    if (j.contains("result")) j = j["result"];
    ASSERT_FALSE(j.contains("error")) << line;
    std::string data;
    ASSERT_TRUE(absl::Base64Unescape(j.value("data", ""), &data));
    EXPECT_EQ(Int(j.value("offset", json("0"))), static_cast<int64_t>(bytes.size()));
    bytes += data;
    last = j;
  }
  ASSERT_TRUE(last.value("done", false)) << res->body.substr(0, 500);
  EXPECT_EQ(Int(last.value("size_bytes", json(-1))), static_cast<int64_t>(bytes.size()));
  EXPECT_GT(Int(last.value("schema_version", json(0))), 0);
  const std::string file = dir / "rest.db";
  WriteFile(file, bytes);
  std::string out, err;
  ASSERT_EQ(RunProcess({"/usr/bin/sha256sum", file}, &out, &err), 0) << err;
  EXPECT_EQ(out.substr(0, 64), last.value("sha256", ""));
  Db db(file);
  EXPECT_EQ(db.Rows("PRAGMA integrity_check"), std::vector<std::string>{"ok"});
  EXPECT_TRUE(BackupTemps(dir / "master").empty());
}

// Grows the database by `mib` MiB of random bytes in kv (another
// connection, while the master runs), so a backup streams many chunks.
void Pad(const std::string& db_path, int mib) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);
  for (int i = 0; i < mib; ++i) {
    const std::string sql =
        absl::StrCat("INSERT INTO kv(key, value) VALUES ('backup-test-pad-", i, "', randomblob(1048576))");
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  }
  sqlite3_close_v2(db);
}

// The master's file and slot are free again: a det-cli backup succeeds.
bool BackupSucceeds(TestCluster& cluster, const std::string& file) {
  std::string out, err;
  return PollUntil([&] { return cluster.Cli({"master", "backup", file, "--force"}, &out, &err) == 0; }, 30s);
}

// Review finding 8: a gRPC call cancelled mid-stream (det-cli interrupted)
// leaves no temporary file and frees the one backup slot.
TEST(BackupTest, ACallCancelledMidStreamRemovesItsFileAndFreesTheSlot) {
  TempDir dir;
  TestCluster cluster(dir);
  Pad(cluster.db_path(), 8);
  const std::string admin = RestLogin(cluster.http_port(), "admin");
  ASSERT_FALSE(admin.empty());
  auto stub = api::v1::Determined::NewStub(
      grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + admin);
  auto reader = stub->BackupDatabase(&ctx, api::v1::BackupDatabaseRequest());
  api::v1::BackupDatabaseResponse chunk;
  ASSERT_TRUE(reader->Read(&chunk)) << reader->Finish().error_message();
  EXPECT_FALSE(chunk.done());
  EXPECT_EQ(BackupTemps(dir / "master").size(), 1u) << "the snapshot is not in the data dir while it streams";
  ctx.TryCancel();
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(PollUntil([&] { return BackupTemps(dir / "master").empty(); }, 30s))
      << "the cancelled call's temporary file was left\n" << cluster.MasterLog();
  ASSERT_EQ(LoginAdmin(cluster), 0);
  EXPECT_TRUE(BackupSucceeds(cluster, dir / "after-cancel.db")) << "the slot was not freed\n" << cluster.MasterLog();
}

// Review finding 8: a client that stops reading holds the slot and the
// temporary file only until --backup-write-timeout-s.
TEST(BackupTest, AClientThatStopsReadingIsCancelledAfterTheWriteTimeout) {
  TempDir dir;
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--backup-write-timeout-s", "1"}));
  Pad(cluster.db_path(), 32);
  const std::string admin = RestLogin(cluster.http_port(), "admin");
  ASSERT_FALSE(admin.empty());
  // A small receive window: the master cannot push the stream into the
  // client's buffers while it does not read.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 64 << 10);
  args.SetMaxReceiveMessageSize(16 << 20);
  auto stub = api::v1::Determined::NewStub(
      grpc::CreateCustomChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + admin);
  auto reader = stub->BackupDatabase(&ctx, api::v1::BackupDatabaseRequest());
  api::v1::BackupDatabaseResponse chunk;
  ASSERT_TRUE(reader->Read(&chunk)) << reader->Finish().error_message();
  EXPECT_FALSE(chunk.done());
  // ... and reads no more.
  EXPECT_TRUE(PollUntil([&] { return BackupTemps(dir / "master").empty(); }, 60s))
      << "a client that stopped reading still holds the temporary file\n" << cluster.MasterLog();
  EXPECT_THAT(cluster.MasterLog(), HasSubstr("the client read nothing for 1 s; cancelling its backup"));
  ASSERT_EQ(LoginAdmin(cluster), 0);
  EXPECT_TRUE(BackupSucceeds(cluster, dir / "after-stall.db")) << "the slot was not freed\n" << cluster.MasterLog();
  ctx.TryCancel();
  reader->Finish();
}

// Review finding 1: det.db deleted while the master runs (it serves the
// open file on): the backup holds what the master serves.
TEST(BackupTest, ABackupAfterDetDbWasDeletedHoldsTheServedDatabase) {
  TempDir dir;
  TestCluster cluster(dir);
  ASSERT_EQ(LoginAdmin(cluster), 0);
  const std::string admin = RestLogin(cluster.http_port(), "admin");
  json body = {{"user", {{"username", "made-before-the-unlink"}}}, {"password", "pw"}};
  auto res = cluster.Http("POST", "/api/v1/PostUser", {{"Authorization", "Bearer " + admin}}, body.dump());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  ASSERT_EQ(unlink(cluster.db_path().c_str()), 0);
  const std::string file = dir / "rescued.db";
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"master", "backup", file}, &out, &err), 0) << out << err << cluster.MasterLog();
  Db db(file);
  EXPECT_EQ(db.Rows("PRAGMA integrity_check"), std::vector<std::string>{"ok"});
  EXPECT_EQ(db.Int("SELECT COUNT(*) FROM users WHERE username = 'made-before-the-unlink'"), 1);
  EXPECT_THAT(cluster.MasterLog(), HasSubstr("is no longer the file this master opened"));
}

}  // namespace
}  // namespace det::testing
