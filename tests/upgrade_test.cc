// Upgrading det-cpp (issue 47, part 4; docs/operations/upgrade.md), from the
// checked-in fixture tests/data/upgrade-v0.1.0/ (det.db written by det-cpp
// 0.1.0, the tag v0.1.0, with experiment 1 PAUSED after a checkpoint; that
// checkpoint's files; the trial's source, built here as
// upgrade_v010_trial.so against this release's SDK; make_fixture.sh):
//  - this det-master migrates the database forward, and the paused
//    experiment, once a trial.so rebuilt from the same source is attached
//    (`det-cli experiment set trial-so`), resumes from the 0.1.0 checkpoint
//    and ends bit-exactly as an uninterrupted run under this master;
//  - a database of a newer schema is refused at start, naming both schema
//    versions and both det-cpp releases, and left unchanged;
//  - an agent of another MAJOR.MINOR release is refused at registration,
//    naming both releases.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "common/det_version.h"
#include "det/agent/v1/agent.grpc.pb.h"
#include "master/store/store.h"
#include "tests/synthetic_weights.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
namespace fs = std::filesystem;
namespace agentv1 = ::det::agent::v1;

const std::string kFixture = std::string(DET_SOURCE_DIR) + "/tests/data/upgrade-v0.1.0";
// config.yaml's checkpoint_storage.host_path is under it: det.db records
// each checkpoint's absolute path there (make_fixture.sh).
const std::string kFixedRoot = "/tmp/det-upgrade-v0.1.0";
const std::string kUpgradeTrial = std::string(DET_TRIALS_DIR) + "/upgrade_v010_trial.so";
// The schema version det-cpp 0.1.0 left (its last migration).
constexpr int64_t kV010SchemaVersion = 12;
constexpr auto kLong = std::chrono::seconds(120);

// The fixed checkpoint root, owned by one test at a time (an flock on a
// file beside it, as ctest may run tests in parallel): emptied at the
// start, removed at the end.
class FixedCheckpointRoot {
 public:
  FixedCheckpointRoot() {
    fd_ = open((kFixedRoot + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    EXPECT_GE(fd_, 0) << kFixedRoot << ".lock: " << strerror(errno);
    if (fd_ >= 0) {
      EXPECT_EQ(flock(fd_, LOCK_EX), 0) << strerror(errno);
    }
    std::error_code ec;
    fs::remove_all(kFixedRoot, ec);
    fs::create_directories(fs::path(kFixedRoot) / "checkpoints");
  }
  ~FixedCheckpointRoot() {
    std::error_code ec;
    fs::remove_all(kFixedRoot, ec);
    if (fd_ >= 0) close(fd_);  // releases the lock
  }

 private:
  int fd_ = -1;
};

// Runs `sql` on `db`; the first column of the first row as text ("" when none).
std::string Sql(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &h, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK) << db;
  sqlite3_stmt* st = nullptr;
  std::string out;
  EXPECT_EQ(sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(h) << ": " << sql;
  int rc = sqlite3_step(st);
  EXPECT_TRUE(rc == SQLITE_ROW || rc == SQLITE_DONE) << sqlite3_errmsg(h) << ": " << sql;
  if (rc == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr) {
    out = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}
int64_t SchemaVersion(const std::string& db) {
  return std::stoll("0" + Sql(db, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations"));
}

// The fixture's det.db as the master's database in dir/master (0700, 0600
// as the master requires), and with `checkpoints` its checkpoint files where
// the database says they are.
void PlaceFixture(const TempDir& dir, bool checkpoints) {
  fs::create_directories(dir / "master");
  fs::permissions(dir / "master", fs::perms::owner_all);
  fs::copy_file(kFixture + "/det.db", dir / "master/det.db");
  fs::permissions(dir / "master/det.db", fs::perms::owner_read | fs::perms::owner_write);
  if (checkpoints) {
    fs::copy(kFixture + "/checkpoints", kFixedRoot + "/checkpoints", fs::copy_options::recursive);
  }
}

std::string Str(const json& j, const std::string& key) { return j.is_object() ? j.value(key, "") : ""; }
int64_t Int(const json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());  // int64 in protobuf's JSON mapping
  return v.is_number() ? v.get<int64_t>() : 0;
}

// The latest checkpoint of experiment `id`'s one trial: its directory.
std::string LatestCheckpointDir(TestCluster& cluster, int id) {
  json trials = cluster.Trials(id);
  EXPECT_EQ(trials.size(), 1u) << trials.dump();
  if (trials.size() != 1) return "";
  json ck = cluster.Get("/api/v1/checkpoints/" + Str(trials[0], "latest_checkpoint_uuid"));
  return Str(ck["checkpoint"], "storage_path");
}

// Every training and validation row of `a`'s trial equals `b`'s (doubles
// in protobuf's JSON round-trip exactly: bitwise equality).
void ExpectSameMetrics(TestCluster& cluster, int a, int b) {
  json ta = cluster.Trials(a), tb = cluster.Trials(b);
  ASSERT_EQ(ta.size(), 1u);
  ASSERT_EQ(tb.size(), 1u);
  EXPECT_EQ(ta[0]["hparams"], tb[0]["hparams"]);
  EXPECT_EQ(ta[0]["seed"], tb[0]["seed"]);
  for (const char* group : {"training", "validation"}) {
    json ma = cluster.Metrics(ta[0]["id"].get<int>(), group), mb = cluster.Metrics(tb[0]["id"].get<int>(), group);
    ASSERT_FALSE(ma.empty()) << group;
    ASSERT_EQ(ma.size(), mb.size()) << group << ": " << ma.dump() << " vs " << mb.dump();
    for (size_t i = 0; i < ma.size(); ++i) {
      EXPECT_EQ(ma[i]["total_batches"], mb[i]["total_batches"]) << group;
      EXPECT_EQ(ma[i]["metrics"], mb[i]["metrics"]) << group << " at batch " << ma[i]["total_batches"];
    }
  }
}

// Must show 3: the 0.1.0 database migrates forward; the experiment 0.1.0
// paused resumes with a rebuilt trial.so and ends bit-exactly as an
// uninterrupted run of the same trial and config under this master.
TEST(UpgradeTest, PausedExperimentOfV010ResumesBitExactlyAfterTheMigration) {
  FixedCheckpointRoot root;
  TempDir dir;
  PlaceFixture(dir, /*checkpoints=*/true);
  ASSERT_EQ(SchemaVersion(dir / "master/det.db"), kV010SchemaVersion);
  ASSERT_EQ(Sql(dir / "master/det.db", "SELECT state FROM experiments WHERE id = 1"), "PAUSED");
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--checkpoint-storage-root", kFixedRoot}));
  EXPECT_EQ(SchemaVersion(cluster.db_path()), master::Store::LatestSchemaVersion());
  EXPECT_GT(master::Store::LatestSchemaVersion(), kV010SchemaVersion);
  // (Agent "a" of the fixture holds a per-agent credential this test does not
  // have: a new agent id.)
  cluster.StartAgent("upgraded");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)))
      << cluster.AgentLogs();

  // The experiment as 0.1.0 left it.
  EXPECT_EQ(cluster.ExperimentState(1), "STATE_PAUSED");
  json trials = cluster.Trials(1);
  ASSERT_EQ(trials.size(), 1u) << trials.dump();
  const std::string v010_checkpoint = Str(trials[0], "latest_checkpoint_uuid");
  ASSERT_TRUE(fs::exists(kFixture + "/checkpoints/" + v010_checkpoint)) << trials.dump();
  const int64_t paused_at = Int(cluster.Get("/api/v1/checkpoints/" + v010_checkpoint)["checkpoint"]["total_batches"]);
  EXPECT_GT(paused_at, 0);
  EXPECT_LT(paused_at, 100);

  // Its trial.so is not in the fixture: activating says how to attach one.
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"experiment", "activate", "1"}, &out, &err), 1) << out << err;
  EXPECT_THAT(err, HasSubstr("is not in this master's artifact store"));
  EXPECT_THAT(err, HasSubstr("det-cli experiment set trial-so 1 TRIAL_SO"));
  EXPECT_EQ(cluster.ExperimentState(1), "STATE_PAUSED");

  // Only the owner (determined, who created it under 0.1.0) or an admin may.
  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  ASSERT_FALSE(admin.empty());
  auto made = cluster.Http("POST", "/api/v1/users", {{"Authorization", "Bearer " + admin}},
                           R"({"user": {"username": "bob", "active": true}, "password": "bob-pw"})");
  ASSERT_TRUE(made && made->status == 200) << (made ? made->body : "no answer");
  auto bob = cluster.Http("PATCH", "/api/v1/experiments/1",
                          {{"Authorization", "Bearer " + RestLogin(cluster.http_port(), "bob", "bob-pw")}},
                          absl::StrCat(R"({"trial_so_sha256": ")", std::string(64, 'a'), R"("})"));
  ASSERT_TRUE(bob);
  EXPECT_EQ(bob->status, 403) << bob->body;
  EXPECT_THAT(bob->body, HasSubstr("user 'bob' may not change experiment 1 (owner 'determined')"));

  ASSERT_EQ(cluster.Cli({"experiment", "set", "trial-so", "1", kUpgradeTrial}, &out, &err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("Experiment 1 now runs upgrade_v010_trial.so"));
  const std::string sha = Sql(cluster.db_path(), "SELECT trial_so_sha256 FROM experiments WHERE id = 1");
  EXPECT_EQ(Str(cluster.Get("/api/v1/experiments/1")["experiment"]["trial_so"], "sha256"), sha);
  EXPECT_TRUE(fs::exists(dir / ("master/artifacts/" + sha + ".so"))) << sha;
  ASSERT_EQ(cluster.Cli({"experiment", "activate", "1"}, &out, &err), 0) << out << err;
  ASSERT_TRUE(cluster.WaitForState(1, "STATE_COMPLETED", kLong)) << cluster.Trials(1).dump() << cluster.MasterLog();
  const json resumed = cluster.Trials(1)[0];
  EXPECT_EQ(resumed.value("restarts", -1), 0) << resumed.dump();
  EXPECT_THAT(cluster.TrialLogs(Int(resumed["id"])), HasSubstr("resumed from checkpoint"));

  // The same trial and config, uninterrupted, under this master.
  const int straight = cluster.CreateExperiment(ReadFile(kFixture + "/config.yaml"), "straight", kUpgradeTrial);
  ASSERT_GT(straight, 1);
  ASSERT_TRUE(cluster.WaitForState(straight, "STATE_COMPLETED", kLong)) << cluster.MasterLog();
  ExpectSameMetrics(cluster, 1, straight);
  const std::string a = LatestCheckpointDir(cluster, 1), b = LatestCheckpointDir(cluster, straight);
  ASSERT_FALSE(a.empty());
  ASSERT_NE(a, b);
  auto wa = LoadSyntheticWeights(a), wb = LoadSyntheticWeights(b);
  ASSERT_EQ(wa.size(), 4u);
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, t] : wa) {
    ASSERT_EQ(wb.count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(t, wb[name])) << name << " differs between the resumed and the uninterrupted run";
  }

  // Only a PAUSED experiment's trial.so can be replaced.
  EXPECT_EQ(cluster.Cli({"experiment", "set", "trial-so", "1", kUpgradeTrial}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("only a PAUSED experiment's trial.so can be replaced"));
}

// What a later release's det-master leaves in `db`, migrated by this one:
// one more migration and its version (0.3.0). Returns that schema version.
int64_t MarkNewer(const std::string& db) {
  EXPECT_EQ(Sql(db, "SELECT value FROM kv WHERE key = 'det_cpp_version'"), kDetVersion);
  const int64_t newer = master::Store::LatestSchemaVersion() + 1;
  Sql(db, absl::StrCat("INSERT INTO schema_migrations(version, applied_at) VALUES (", newer, ", 0)"));
  Sql(db, "UPDATE kv SET value = '0.3.0' WHERE key = 'det_cpp_version'");
  return newer;
}

// Runs det-master on dir/master and expects the refusal of schema `newer`.
void ExpectNewerSchemaRefused(const TempDir& dir, int64_t newer) {
  std::string out, err;
  const int rc = RunProcess({std::string(kTestBinDir) + "/det-master", "--data-dir", dir / "master", "--grpc-port",
                             "0", "--http-port", "0"},
                            &out, &err, std::chrono::seconds(60));
  EXPECT_NE(rc, 0) << out << err;
  const std::string all = out + err;
  EXPECT_THAT(all, HasSubstr(absl::StrCat("has schema version ", newer, " (last opened by det-cpp 0.3.0)")));
  EXPECT_THAT(all, HasSubstr(absl::StrCat("this det-master is det-cpp ", kDetVersion,
                                          " and knows schema versions up to ", newer - 1)));
  EXPECT_THAT(all, HasSubstr("run det-cpp 0.3.0 or newer on it, or restore the backup taken before the upgrade"));
}

// Must show 3: a database of a newer schema (a later det-cpp's) is refused
// at start, naming both schema versions and both releases; nothing in it
// changes.
TEST(UpgradeTest, NewerSchemaIsRefusedAtStartNamingBothVersionsAndLeftUnchanged) {
  TempDir dir;
  PlaceFixture(dir, /*checkpoints=*/false);
  { TestCluster migrate(dir); }  // this release migrates it and records its version
  const std::string db = dir / "master/det.db";
  const int64_t newer = MarkNewer(db);
  ASSERT_FALSE(fs::exists(db + "-wal") && fs::file_size(db + "-wal") > 0);
  const std::string before = ReadFile(db);

  ExpectNewerSchemaRefused(dir, newer);
  EXPECT_EQ(ReadFile(db), before) << "the refused database was changed";
  EXPECT_EQ(SchemaVersion(db), newer);
}

// The same refusal of a backup of a newer release: `det-cli master backup`
// and `VACUUM INTO` write rollback-journal files. It is refused before any
// write: the header still says rollback journal (bytes 18 and 19 are 1, not
// WAL's 2) and no -wal or -shm file appears.
TEST(UpgradeTest, NewerSchemaBackupInRollbackModeIsRefusedBeforeAnyWrite) {
  TempDir dir;
  PlaceFixture(dir, /*checkpoints=*/false);
  { TestCluster migrate(dir); }
  const std::string db = dir / "master/det.db";
  const int64_t newer = MarkNewer(db);
  const std::string backup = dir / "backup.db";
  Sql(db, absl::StrCat("VACUUM INTO '", backup, "'"));
  for (const std::string& f : {db, db + "-wal", db + "-shm"}) fs::remove(f);
  fs::rename(backup, db);
  fs::permissions(db, fs::perms::owner_read | fs::perms::owner_write);
  const std::string before = ReadFile(db);
  ASSERT_GT(before.size(), 20u);
  ASSERT_EQ(before[18], 1) << "VACUUM INTO wrote a WAL-mode file";
  ASSERT_EQ(before[19], 1);

  ExpectNewerSchemaRefused(dir, newer);
  const std::string after = ReadFile(db);
  EXPECT_TRUE(after == before) << "the refused backup was changed (header bytes 18/19 now "
                               << int(after.size() > 19 ? after[18] : -1) << "/"
                               << int(after.size() > 19 ? after[19] : -1) << ")";
  EXPECT_FALSE(fs::exists(db + "-wal")) << "a -wal file appeared";
  EXPECT_FALSE(fs::exists(db + "-shm")) << "a -shm file appeared";
}

// An agent of the previous minor release (0.1.0), presenting the cluster
// secret, is refused at registration naming both releases and the fix; one
// of this release registers.
TEST(UpgradeTest, AgentOfAnotherMinorReleaseIsRefusedAtRegistration) {
  TempDir dir;
  WriteFile(dir / "secret", "upgrade-test-secret\n");
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--cluster-secret-file", dir / "secret"}));
  auto stub = agentv1::AgentService::NewStub(
      grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials()));
  auto reg = [&](const std::string& id, const std::string& version) {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_hostname("localhost");
    req.add_devices()->set_id(0);
    req.set_version(version);
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-cluster-secret", "upgrade-test-secret");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    agentv1::RegisterAgentResponse resp;
    return stub->RegisterAgent(&ctx, req, &resp);
  };
  grpc::Status old = reg("old", "0.1.0");
  EXPECT_EQ(old.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << old.error_message();
  EXPECT_THAT(old.error_message(),
              HasSubstr(absl::StrCat("agent 'old' runs det-cpp 0.1.0 but this master runs det-cpp ", kDetVersion)));
  EXPECT_THAT(old.error_message(), HasSubstr(absl::StrCat("install det-cpp ", kDetVersion, " on every node")));
  grpc::Status current = reg("current", kDetVersion);
  EXPECT_TRUE(current.ok()) << current.error_message();
  // The master reports its release (GetMaster; det-cli master info).
  EXPECT_EQ(Str(cluster.Get("/api/v1/master"), "version"), kDetVersion);
  EXPECT_EQ(cluster.Get("/api/v1/agents")["agents"].size(), 1u);
}

}  // namespace
}  // namespace det::testing
