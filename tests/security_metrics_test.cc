// Security, round three (issue 46). Finding 6: metric bounds, kill and cancel with the disk full, temp checkpoint directories.
// Part of the security_test executable (tests/CMakeLists.txt).
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "det/trial/v1/trial.grpc.pb.h"
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


namespace trialv1 = ::det::trial::v1;

// A stand-in det-trial (the agent's --det-trial) that writes its allocation
// id and token (from fd DET_ALLOCATION_TOKEN_FD) to DIR/creds, then sleeps:
// the test then calls det.trial.v1 as untrusted trial code could.
std::string CredentialSavingDetTrial(const TempDir& dir) {
  const std::string script = dir / "cred-det-trial.sh";
  WriteFile(script, absl::StrCat("#!/bin/sh\n{ echo \"$DET_ALLOCATION_ID\"; cat <&$DET_ALLOCATION_TOKEN_FD; echo; } > \"",
                                 dir / "creds.tmp", "\" && mv \"", dir / "creds.tmp", "\" \"", dir / "creds",
                                 "\"\nexec sleep 300\n"));
  chmod(script.c_str(), 0755);
  return script;
}

// Review item 4: a trial floods ReportCheckpoint (each a new UUID, no
// directory behind it). Refused with RESOURCE_EXHAUSTED naming the trial and
// the flag: a report of too many files, too much metadata, the rows' bytes
// of the trial (--max-trial-checkpoint-mib 1) and their count
// (--max-trial-checkpoints 40); 300 more reports add nothing; the master
// stays alive.
TEST(SecurityMetricsTest, CheckpointReportFloodIsBounded) {
  TempDir dir;
  TestCluster cluster(dir, TestClusterOptions().add_master_flags(
                               {"--max-trial-checkpoints", "40", "--max-trial-checkpoint-mib", "1"}));
  WriteFile(dir / "fake.so", FakeTrialSo());
  cluster.StartAgent("a", AgentOptions().add_flags({"--det-trial", CredentialSavingDetTrial(dir)}));
  const int exp = cluster.CreateExperiment(SingleTrialConfig("ckpt-flood", dir / "checkpoints"), "ckpt-flood",
                                           dir / "fake.so");
  ASSERT_GT(exp, 0);
  const int64_t trial = FirstTrial(cluster, exp);
  ASSERT_TRUE(PollUntil([&] { return fs::exists(dir / "creds"); }, 60s)) << cluster.AgentLogs();
  std::istringstream creds(ReadFile(dir / "creds"));
  std::string allocation, token;
  ASSERT_TRUE(std::getline(creds, allocation) && std::getline(creds, token));
  auto stub = trialv1::TrialService::NewStub(
      grpc::CreateChannel(cluster.grpc_address(), grpc::InsecureChannelCredentials()));
  int n = 0;
  auto report = [&](size_t metadata_bytes, size_t files) {
    trialv1::ReportCheckpointRequest req;
    req.set_allocation_id(allocation);
    req.set_uuid(absl::StrCat("0c0ffee0-0000-4000-8000-", absl::Dec(++n, absl::kZeroPad12)));
    req.set_total_batches(n);
    if (metadata_bytes > 0) (*req.mutable_metadata()->mutable_fields())["m"].set_string_value(std::string(metadata_bytes, 'm'));
    for (size_t i = 0; i < files; ++i) (*req.mutable_resources())[absl::StrCat("f", i)] = 1;
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-allocation-token", token);
    ctx.set_deadline(std::chrono::system_clock::now() + 30s);
    trialv1::ReportCheckpointResponse resp;
    return stub->ReportCheckpoint(&ctx, req, &resp);
  };
  auto expect_refused = [&](const grpc::Status& st, const std::string& flag) {
    EXPECT_EQ(st.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << flag << ": " << st.error_message();
    EXPECT_THAT(st.error_message(), HasSubstr(absl::StrCat("trial ", trial, ": ")));
    EXPECT_THAT(st.error_message(), HasSubstr("(det-master " + flag + ")"));
  };
  const int64_t before = DbBytes(cluster);
  expect_refused(report(0, 100001), "--max-checkpoint-resources");
  expect_refused(report((1 << 20) + 1, 0), "--max-checkpoint-metadata-kib");
  // 200 KiB rows: 5 fit in 1 MiB, the 6th is refused.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(report(200 << 10, 1).ok()) << i;
  expect_refused(report(200 << 10, 1), "--max-trial-checkpoint-mib");
  // Small rows: up to 40 rows in all, the 41st is refused.
  for (int i = 5; i < 40; ++i) ASSERT_TRUE(report(0, 1).ok()) << i;
  expect_refused(report(0, 1), "--max-trial-checkpoints");
  for (int i = 0; i < 300; ++i) ASSERT_FALSE(report(200 << 10, 100).ok()) << i;
  const std::string where = absl::StrCat(" FROM checkpoints WHERE trial_id = ", trial);
  EXPECT_EQ(DbInt(cluster, "SELECT COUNT(*)" + where), 40);
  const int64_t stored = DbInt(cluster, "SELECT SUM(LENGTH(CAST(resources AS BLOB)) + "
                                        "LENGTH(CAST(metadata_json AS BLOB)) + LENGTH(storage_path) + 128)" + where);
  EXPECT_LE(stored, 1 << 20);
  const int64_t growth = DbBytes(cluster) - before;
  std::printf("[ bounded  ] checkpoint rows 40, %lld bytes (bound 1 MiB), db+wal growth %lld\n",
              static_cast<long long>(stored), static_cast<long long>(growth));
  // 300 refused 200 KiB reports (60 MB) left no trace: well under 8 MiB.
  EXPECT_LT(growth, 8 << 20) << "the database grew by " << growth << " bytes";
  ExpectAlive(cluster);
}

// Review item 9(b): a size flag out of range (huge: float-to-int overflow;
// tiny: 0 bytes, the bound silently off; NaN) stops det-master (exit 2)
// naming the flag; 0 is accepted where it means unbounded.
TEST(SecurityMetricsTest, SizeFlagsOutOfRangeAreRefusedNamingTheFlag) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--max-trial-metric-mib", "1e300"},     {"--max-trial-metric-mib", "1e-7"},
      {"--max-trial-metric-mib", "nan"},       {"--max-trial-checkpoint-mib", "2000000"},
      {"--max-checkpoint-metadata-kib", "0.5"}, {"--max-log-line-kib", "1e30"},
      {"--max-artifact-mib", "0.0001"},
  };
  int i = 0;
  for (const auto& [flag, value] : bad) {
    const std::string d = dir / absl::StrCat("m", ++i);
    Subprocess master({std::string(DET_BIN_DIR) + "/det-master", "--data-dir", d, "--grpc-port", "0", "--http-port",
                       "0", flag, value},
                      d + ".out", d + ".err");
    EXPECT_EQ(master.Wait(30s), 2) << flag << " " << value << ": " << master.Stderr();
    EXPECT_THAT(master.Stderr(), HasSubstr("det-master: error: " + flag + " ")) << value;
    EXPECT_FALSE(fs::exists(d)) << "refused before the data dir is opened";
  }
  const std::string d = dir / "unbounded";
  Subprocess master({std::string(DET_BIN_DIR) + "/det-master", "--data-dir", d, "--grpc-port", "0", "--http-port",
                     "0", "--ports-file", d + ".ports", "--max-trial-metric-mib", "0", "--max-trial-checkpoint-mib",
                     "0", "--max-checkpoint-metadata-kib", "0"},
                    d + ".out", d + ".err");
  EXPECT_TRUE(PollUntil([&] { return fs::exists(d + ".ports"); }, 30s)) << master.Stderr();
}

// Unmounts (lazily) what a test mounted, when the test ends.
struct Unmount {
  std::string path;
  ~Unmount() {
    if (!path.empty()) umount2(path.c_str(), MNT_DETACH);
  }
};

// Appends to `path` until the file system is full (chunks down to one
// byte, so that no page is left for a small commit); the bytes written.
int64_t FillDisk(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd < 0) return 0;
  const std::string chunk(1 << 16, 'f');
  int64_t n = 0;
  for (size_t size = chunk.size(); size >= 1; size /= 4) {
    ssize_t w;
    while ((w = write(fd, chunk.data(), size)) > 0) n += w;
  }
  close(fd);
  return n;
}

// Finding 6, the disk full: with the master's data dir on a small tmpfs
// filled to ENOSPC, `det-cli experiment kill` (and cancel, pause) still
// stops the flooding trial's processes, and says honestly that the state is not recorded yet;
// once space is freed the master records it, and a restarted master still
// has it. CI runs as root: mounting is a requirement, not a skip.
class SecurityMetricsDiskFullTest : public ::testing::TestWithParam<std::string> {};

// The experiment state each stop leads to, and the word the master logs.
bool EndedBy(const std::string& verb, const std::string& state) {
  return verb == "pause" ? state == "STATE_PAUSED" : Stopped(state);
}
std::string Done(const std::string& verb) {
  return verb == "kill" ? "killed" : verb == "cancel" ? "canceled" : "paused";
}

TEST_P(SecurityMetricsDiskFullTest, StopWorksWithTheDiskFullAndIsRecordedOnceThereIsSpace) {
  const std::string verb = GetParam();
  TempDir dir;
  const std::string data = dir / "master";
  fs::create_directories(data);
  ASSERT_EQ(mount("tmpfs", data.c_str(), "tmpfs", 0, "size=64m,mode=0700"), 0)
      << "mount -t tmpfs on " << data << ": " << std::strerror(errno)
      << " (this test needs root with CAP_SYS_ADMIN, as CI runs it)";
  Unmount unmount{data};
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--max-trial-metric-mib", "1000"}));
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s));
  const std::string marker = "diskfull-" + fs::path(dir.path()).filename().string();
  const int exp = cluster.CreateExperiment(FloodYaml(dir / "checkpoints", marker), "flood", kFloodTrial);
  ASSERT_GT(exp, 0);
  const int64_t trial = FirstTrial(cluster, exp);
  ASSERT_GT(trial, 0);
  ASSERT_TRUE(PollUntil([&] { return !PidsWithEnv("FLOOD_MARKER=" + marker).empty(); }, 120s));

  // The disk fills (a filler file, and the flood's own metrics).
  const std::string filler = data + "/filler";
  EXPECT_GT(FillDisk(filler), 0);
  ASSERT_TRUE(PollUntil([&] { return cluster.MasterLog().find("committing the master's state") != std::string::npos; },
                        120s))
      << "no write failed yet";

  FillDisk(filler);  // whatever a failed write gave back
  std::string out, err;
  EXPECT_NE(cluster.Cli({"experiment", verb, std::to_string(exp)}, &out, &err), 0) << out;
  EXPECT_THAT(err, HasSubstr(absl::StrCat("experiment ", exp, ": its running trials were killed")));
  EXPECT_THAT(err, HasSubstr("could not record it as " + Done(verb)));
  EXPECT_TRUE(PollUntil([&] { return PidsWithEnv("FLOOD_MARKER=" + marker).empty(); }, 60s))
      << "the flood still runs with the disk full";
  ExpectAlive(cluster);

  // Space again: the stop is recorded, and survives a restart.
  fs::remove(filler);
  EXPECT_TRUE(PollUntil([&] { return EndedBy(verb, cluster.ExperimentState(exp)); }, 120s))
      << cluster.ExperimentState(exp) << "\n" << cluster.MasterLog().substr(0, 4000);
  const std::string recorded =
      absl::StrCat("experiment ", exp, ": recorded as ", Done(verb), " by the user now that the database");
  EXPECT_TRUE(PollUntil([&] { return cluster.MasterLog().find(recorded) != std::string::npos; }, 30s))
      << recorded << "\n" << cluster.MasterLog();
  EXPECT_TRUE(PidsWithEnv("FLOOD_MARKER=" + marker).empty()) << "restarted after the " << verb;
  cluster.KillMaster();
  cluster.RestartMaster();
  EXPECT_TRUE(EndedBy(verb, cluster.ExperimentState(exp))) << cluster.ExperimentState(exp);
  ExpectAlive(cluster);
}

INSTANTIATE_TEST_SUITE_P(Stops, SecurityMetricsDiskFullTest, ::testing::Values("kill", "cancel", "pause"));

// A long synthetic trial that checkpoints when paused.
std::string LongYaml(const std::string& checkpoint_dir) {
  return absl::StrCat(
      "name: long\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 16\n"
      "  dropout: 0.1\n  batch_delay_ms: 5\nsearcher:\n  name: single\n  metric: validation_loss\n"
      "  smaller_is_better: true\n  max_length:\n    batches: 100000\nscheduling_unit: 10\n"
      "checkpoint_storage:\n  type: shared_fs\n  host_path: ",
      checkpoint_dir, "\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
                      "data:\n  train_size: 256\n  val_size: 64\n");
}

// The less serious item: ".tmp-*" checkpoint directories left after a disk
// full. A trial's unfinished saves (.tmp-t<ID>-*) are removed when it starts
// again, and by the master at its start for a trial that is not running;
// another trial's save in progress and every finished checkpoint in the same
// storage directory are left alone.
TEST(SecurityMetricsTest, StaleCheckpointTempDirsAreRemovedAtStartAndNothingElse) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s));
  const std::string storage = dir / "checkpoints";
  const int exp = cluster.CreateExperiment(LongYaml(storage), "long");
  ASSERT_GT(exp, 0);
  const int64_t trial = FirstTrial(cluster, exp);
  ASSERT_GT(trial, 0);
  auto batches = [&] { return Int(cluster.Trial(trial).value("total_batches_processed", nlohmann::json(0))); };
  ASSERT_TRUE(PollUntil([&] { return batches() >= 10; }, 120s));
  ASSERT_EQ(cluster.Cli({"experiment", "pause", std::to_string(exp)}), 0);
  ASSERT_TRUE(PollUntil([&] { return cluster.Trial(trial).value("state", "") == "STATE_PAUSED"; }, 120s));
  // What a run that died mid-save leaves, and another trial's save in progress.
  const std::string dead = absl::StrCat(storage, "/.tmp-t", trial, "-0f0e0d0c-dead");
  const std::string live = absl::StrCat(storage, "/.tmp-t", trial + 1000, "-0f0e0d0c-live");
  for (const std::string& d : {dead, live}) {
    fs::create_directories(d);
    WriteFile(d + "/model_0.pt", "partial");
  }
  std::map<std::string, std::string> finished;
  for (const auto& [path, bytes] : FilesUnder(storage)) {
    if (path.rfind(".tmp-", 0) != 0) finished[path] = bytes;
  }
  ASSERT_FALSE(finished.empty()) << "the paused trial checkpointed";

  ASSERT_EQ(cluster.Cli({"experiment", "activate", std::to_string(exp)}), 0);
  ASSERT_TRUE(PollUntil([&] { return !fs::exists(dead); }, 120s)) << cluster.TrialLogs(trial);
  EXPECT_TRUE(PollUntil(
      [&] {
        return cluster.TrialLogs(trial).find(absl::StrCat("[det-trial] removed 1 unfinished checkpoint directory "
                                                          "of an earlier run of trial ",
                                                          trial)) != std::string::npos;
      },
      60s));
  EXPECT_EQ(ReadFile(live + "/model_0.pt"), "partial") << "another trial's save in progress is untouched";
  const auto now = FilesUnder(storage);
  for (const auto& [path, bytes] : finished) {
    auto it = now.find(path);
    EXPECT_TRUE(it != now.end() && it->second == bytes) << path << " changed";
  }
  ASSERT_EQ(cluster.Cli({"experiment", "kill", std::to_string(exp)}), 0);
  EXPECT_TRUE(PollUntil([&] { return Stopped(cluster.ExperimentState(exp)); }, 120s));
  // Review item 6: a killed trial never starts again, so det-trial cannot
  // clean up after it: the master (the storage root's owner) removes its
  // leftovers at start; another trial's save is still left alone.
  fs::create_directories(dead);
  WriteFile(dead + "/model_0.pt", "partial");
  cluster.KillMaster();
  cluster.RestartMaster();
  EXPECT_TRUE(PollUntil([&] { return !fs::exists(dead); }, 30s)) << cluster.MasterLog();
  EXPECT_EQ(ReadFile(live + "/model_0.pt"), "partial") << "another trial's save in progress is untouched";
  ExpectAlive(cluster);
}

}  // namespace
}  // namespace det::testing
