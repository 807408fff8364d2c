// Security, round three (issue 46). Finding 1: trials of different det users
// run as different uids and cannot read or signal each other.
// Part of the security_test executable (tests/CMakeLists.txt).
//
// The attack: on one agent, user bob's trial (snoop_trial.so,
// tests/data/snoop_trial.cc) scans /proc for allocation tokens, reads user
// alice's det-trial's environment and inherited fds, signals it (kill 0,
// SIGSTOP) and opens alice's checkpoint directory. Before issue 46 every
// trial ran as the agent's one --trial-user with DET_ALLOCATION_TOKEN in its
// environment: bob read alice's token and could stop her trial.
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr char kSecret[] = "tenants-secret-2f8a61c05e";
constexpr int64_t kFirstUid = 200000;

// A synthetic experiment of `batches` batches of `delay_ms`, checkpointing
// every 10 batches into `checkpoints`, with `env` ("NAME=value") set and
// `searcher` lines added to the searcher.
std::string Config(const std::string& name, int batches, int delay_ms, const std::string& checkpoints,
                   const std::vector<std::string>& env = {}, const std::string& searcher = "") {
  std::string out = absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
  batch_delay_ms: )", delay_ms, R"(
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
)", searcher, R"(  max_length:
    batches: )", batches, R"(
min_validation_period:
  batches: 20
min_checkpoint_period:
  batches: 10
scheduling_unit: 10
max_restarts: 0
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoints, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
)");
  for (const auto& e : env) absl::StrAppend(&out, "    - ", e, "\n");
  absl::StrAppend(&out, "data:\n  train_size: 256\n  val_size: 64\n");
  return out;
}

// An int64 of protobuf's JSON mapping (a string) or a number; 0 otherwise.
int64_t Int(const nlohmann::json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());
  return v.is_number() ? v.get<int64_t>() : 0;
}

// /proc/PID/environ as NUL-separated text ("" when unreadable).
std::string EnvironOf(pid_t pid) { return ReadFile(absl::StrCat("/proc/", pid, "/environ")); }

// The det-trial process of `allocation_id` (0 when none runs).
pid_t DetTrialOf(const std::string& allocation_id) {
  const std::string entry = std::string("\0DET_ALLOCATION_ID=", 19) + allocation_id + std::string("\0", 1);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadFile(e.path() / "comm").rfind("det-trial", 0) != 0) continue;
    if ((std::string("\0", 1) + ReadFile(e.path() / "environ")).find(entry) != std::string::npos) {
      return static_cast<pid_t>(std::stoi(name));
    }
  }
  return 0;
}

// A field of /proc/PID/status ("Uid", "Gid", "Groups"): its value, "" when
// unknown.
std::string StatusField(pid_t pid, const std::string& field) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/status")));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::string(absl::StripAsciiWhitespace(line.substr(field.size() + 1)));
  }
  return "";
}

// The allocation trial `trial_id` runs now ("" when none).
std::string AllocationOf(TestCluster& cluster, int64_t trial_id) {
  auto agents = cluster.Get("/api/v1/agents");
  if (!agents.is_object()) return "";
  const std::string prefix = absl::StrCat("trial-", trial_id, ".");
  for (const auto& a : agents.value("agents", nlohmann::json::array())) {
    for (const auto& id : a.value("allocation_ids", nlohmann::json::array())) {
      if (id.get<std::string>().rfind(prefix, 0) == 0) return id.get<std::string>();
    }
  }
  return "";
}

// key=value pairs of the first "SNOOP ..." line of `logs` (empty when none).
std::map<std::string, std::string> SnoopReport(const std::string& logs) {
  std::map<std::string, std::string> out;
  const size_t at = logs.find("SNOOP uid=");
  if (at == std::string::npos) return out;
  std::istringstream in(logs.substr(at + 6, logs.find('\n', at) - at - 6));
  for (std::string kv; in >> kv;) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

// Root, a 03733 checkpoint root, a master with --trial-uid-range UidRange(),
// one 2-slot agent, users alice and bob.
class TenantsTestBase : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "the cross-tenant test needs root (det-agent runs each user's trials as that "
                                "user's uid); CI runs it as root";
    // Other uids pass through the test dir to the agent's work dir and the
    // checkpoint storage; they list nothing.
    ASSERT_EQ(chmod(dir_.path().c_str(), 0711), 0);
    // The storage root as docs/operations/security.md says: setgid to the
    // daemons' group (here root's), sticky, writable and not listable by
    // others.
    fs::create_directories(Checkpoints());
    ASSERT_EQ(chmod(Checkpoints().c_str(), 03733), 0);
    WriteFile(dir_ / "secret", std::string(kSecret) + "\n");
    cluster_ = std::make_unique<TestCluster>(
        dir_, TestClusterOptions().add_master_flags(
                  {"--cluster-secret-file", dir_ / "secret", "--trial-uid-range", UidRange()}));
    cluster_->StartAgent("a", AgentOptions().set_slots(2).add_flags({"--cluster-secret-file", dir_ / "secret"}));
    ASSERT_TRUE(PollUntil([&] { return cluster_->ConnectedAgents() == 1; }, 30s)) << cluster_->AgentLogs();
    std::string out, err;
    ASSERT_EQ(cluster_->Cli({"user", "login", "admin", "--password-stdin"}, &out, &err, "\n"), 0) << err;
    for (const char* user : {"alice", "bob"}) {
      ASSERT_EQ(cluster_->Cli({"user", "create", user, "--password-stdin"}, &out, &err, "pw-of-tenant\n"), 0) << err;
    }
  }

  virtual std::string UidRange() const { return "200000-200009"; }
  void LoginAs(const std::string& user) {
    std::string out, err;
    ASSERT_EQ(cluster_->Cli({"user", "login", user, "--password-stdin"}, &out, &err, "pw-of-tenant\n"), 0) << err;
  }
  std::string Checkpoints() const { return dir_ / "checkpoints"; }
  int64_t FirstTrial(int exp) {
    nlohmann::json trials;
    EXPECT_TRUE(PollUntil([&] { return !(trials = cluster_->Trials(exp)).empty(); }, 30s));
    return trials.empty() ? 0 : Int(trials[0]["id"]);
  }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
};

// Alice's running trial: its experiment, trial, allocation, det-trial pid
// and latest checkpoint directory.
struct Victim {
  int exp = 0;
  int64_t trial = 0;
  std::string alloc;
  pid_t pid = 0;
  std::string ckpt;
};

// Bob's snoop trial and what it reported.
struct Snoop {
  int exp = 0;
  int64_t trial = 0;
  pid_t pid = 0;
  // The Uid line of /proc/pid/status, read as soon as the pid is known (the
  // trial may have exited by the time its report is seen).
  std::string status_uid;
  std::map<std::string, std::string> report;
};

class SecurityTenantsTest : public TenantsTestBase {
 protected:
  // Alice's long experiment, once its det-trial runs and has checkpointed.
  void StartAlicesTrial(Victim* v) {
    LoginAs("alice");
    v->exp = cluster_->CreateExperiment(Config("alice", 600, 50, Checkpoints()), "alice");
    ASSERT_GT(v->exp, 0);
    v->trial = FirstTrial(v->exp);
    std::string uuid;
    ASSERT_TRUE(PollUntil(
        [&] {
          v->alloc = AllocationOf(*cluster_, v->trial);
          v->pid = v->alloc.empty() ? 0 : DetTrialOf(v->alloc);
          uuid = cluster_->Trial(v->trial).value("latest_checkpoint_uuid", "");
          return v->pid != 0 && !uuid.empty();
        },
        120s))
        << cluster_->AgentLogs() << cluster_->MasterLog();
    v->ckpt = (fs::path(Checkpoints()) / uuid).string();
  }

  // Alice's trial: her own uid from the range, no supplementary groups, no
  // token in its environment (the agent passed it on fd 4), not dumpable;
  // her checkpoint and allocation dir closed to others.
  void ExpectOwnUidAndPrivateFiles(const Victim& v) {
    const std::string own = absl::StrCat(kFirstUid, "\t", kFirstUid, "\t", kFirstUid, "\t", kFirstUid);
    EXPECT_EQ(StatusField(v.pid, "Uid"), own);
    EXPECT_EQ(StatusField(v.pid, "Gid"), own);
    EXPECT_EQ(StatusField(v.pid, "Groups"), "");
    EXPECT_FALSE(absl::StrContains(EnvironOf(v.pid), "DET_ALLOCATION_TOKEN="));
    EXPECT_TRUE(absl::StrContains(EnvironOf(v.pid), "DET_ALLOCATION_TOKEN_FD=4"));
    struct stat st {};
    ASSERT_EQ(stat(absl::StrCat("/proc/", v.pid, "/environ").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u) << "det-trial is dumpable (its /proc/PID files belong to its uid)";
    // Her checkpoint: her uid, the storage root's group, nothing for others.
    ASSERT_EQ(stat(v.ckpt.c_str(), &st), 0) << v.ckpt;
    EXPECT_EQ(st.st_uid, static_cast<uid_t>(kFirstUid));
    EXPECT_EQ(st.st_gid, 0u) << "not the setgid storage root's group";
    EXPECT_EQ(st.st_mode & 07777, 02770u) << std::oct << (st.st_mode & 07777);
    ASSERT_EQ(stat((fs::path(v.ckpt) / "metadata.json").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0660u) << std::oct << (st.st_mode & 0777);
    // Her allocation's directory is hers alone.
    ASSERT_EQ(stat((fs::path(dir_ / "agent-a/allocations") / v.alloc).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, static_cast<uid_t>(kFirstUid));
    EXPECT_EQ(st.st_mode & 0777, 0700u) << std::oct << (st.st_mode & 0777);
  }

  // Bob's snoop, on the same agent, at the same time, until it reports.
  void RunSnoop(const Victim& v, Snoop* s) {
    LoginAs("bob");
    s->exp = cluster_->CreateExperiment(
        Config("snoop", 20, 0, Checkpoints(),
               {absl::StrCat("SNOOP_VICTIM_PID=", v.pid), "SNOOP_VICTIM_DIR=" + v.ckpt,
                "SNOOP_STORAGE_ROOT=" + Checkpoints()}),
        "snoop", std::string(DET_TRIALS_DIR) + "/snoop_trial.so");
    ASSERT_GT(s->exp, 0);
    s->trial = FirstTrial(s->exp);
    ASSERT_TRUE(PollUntil(
        [&] {
          const std::string alloc = AllocationOf(*cluster_, s->trial);
          if (s->pid == 0 && !alloc.empty()) s->pid = DetTrialOf(alloc);
          if (s->pid != 0 && s->status_uid.empty()) s->status_uid = StatusField(s->pid, "Uid");
          s->report = SnoopReport(cluster_->TrialLogs(s->trial));
          return !s->report.empty();
        },
        120s))
        << cluster_->TrialLogs(s->trial) << cluster_->AgentLogs();
  }

  void ExpectSnoopRefused(const Snoop& s) {
    EXPECT_EQ(s.report.at("uid"), std::to_string(kFirstUid + 1)) << "bob's trial runs as his own uid";
    if (s.pid != 0) EXPECT_EQ(s.status_uid.substr(0, 6), std::to_string(kFirstUid + 1));
    const std::map<std::string, std::string> refused = {
        {"token_hits", "0"},        {"cmdline_token_hits", "0"}, {"victim_environ", "EACCES"},
        {"victim_fd4", "EACCES"},   {"kill0", "EPERM"},          {"sigstop", "EPERM"},
        {"victim_dir", "EACCES"},   {"storage_root_list", "EACCES"}};
    for (const auto& [key, want] : refused) {
      EXPECT_EQ(s.report.count(key) ? s.report.at(key) : "(missing)", want) << key;
    }
    EXPECT_TRUE(cluster_->WaitForState(s.exp, "STATE_COMPLETED", 120s)) << cluster_->TrialLogs(s.trial);
  }

  // Alice pauses and resumes: the same uid reads her own checkpoint, and the
  // trial completes with all its metrics.
  void PauseResumeAndComplete(const Victim& v) {
    LoginAs("alice");
    std::string out, err;
    ASSERT_EQ(cluster_->Cli({"experiment", "pause", std::to_string(v.exp)}, &out, &err), 0) << err;
    ASSERT_TRUE(cluster_->WaitForState(v.exp, "STATE_PAUSED", 120s)) << cluster_->TrialLogs(v.trial);
    ASSERT_TRUE(PollUntil([&] { return AllocationOf(*cluster_, v.trial).empty(); }, 60s));
    ASSERT_EQ(cluster_->Cli({"experiment", "activate", std::to_string(v.exp)}, &out, &err), 0) << err;
    ASSERT_TRUE(cluster_->WaitForState(v.exp, "STATE_COMPLETED", 180s))
        << cluster_->TrialLogs(v.trial) << cluster_->MasterLog();
    const std::string logs = cluster_->TrialLogs(v.trial);
    EXPECT_TRUE(absl::StrContains(logs, "resumed from checkpoint")) << logs;
    const nlohmann::json training = cluster_->Metrics(v.trial, "training");
    ASSERT_FALSE(training.empty());
    EXPECT_EQ(Int(training.back()["total_batches"]), 600) << training.dump();
    EXPECT_FALSE(cluster_->Metrics(v.trial, "validation").empty());
  }

  // Alice warm-starts from bob's checkpoint, which her uid may not open:
  // the agent stages a copy owned by her uid, and the trial loads that.
  void WarmStartFromBobsCheckpoint(const Snoop& s) {
    const std::string bob_uuid = cluster_->Trial(s.trial).value("latest_checkpoint_uuid", "");
    ASSERT_FALSE(bob_uuid.empty());
    const int warm = cluster_->CreateExperiment(
        Config("warm", 20, 0, Checkpoints(), {}, "  source_checkpoint_uuid: " + bob_uuid + "\n"), "warm");
    ASSERT_GT(warm, 0);
    const int64_t warm_trial = FirstTrial(warm);
    EXPECT_TRUE(cluster_->WaitForState(warm, "STATE_COMPLETED", 120s))
        << cluster_->TrialLogs(warm_trial) << cluster_->AgentLogs();
    const std::string warm_logs = cluster_->TrialLogs(warm_trial);
    EXPECT_TRUE(absl::StrContains(warm_logs, "warm start: model weights from checkpoint")) << warm_logs;
    EXPECT_TRUE(absl::StrContains(warm_logs, "/warm-start")) << "not the agent's copy: " << warm_logs;
  }

  // Only an admin links a user to a uid of their choosing, never root's and
  // never another user's; det-cli shows the recorded uids.
  void ExpectOnlyAdminsLinkUnusedUids() {
    std::string out, err;
    EXPECT_NE(cluster_->Cli({"user", "link-with-agent-user", "alice", "--agent-uid", "250000", "--agent-gid",
                             "250000"},
                            &out, &err),
              0);
    EXPECT_TRUE(absl::StrContains(err, "PERMISSION_DENIED")) << err;
    ASSERT_EQ(cluster_->Cli({"user", "login", "admin", "--password-stdin"}, &out, &err, "\n"), 0) << err;
    EXPECT_NE(
        cluster_->Cli({"user", "link-with-agent-user", "bob", "--agent-uid", "0", "--agent-gid", "0"}, &out, &err),
        0);
    EXPECT_TRUE(absl::StrContains(err, "agent_uid 0: must be 1000..4294967294")) << err;
    EXPECT_NE(cluster_->Cli({"user", "link-with-agent-user", "bob", "--agent-uid", std::to_string(kFirstUid),
                             "--agent-gid", "250000"},
                            &out, &err),
              0);
    EXPECT_TRUE(absl::StrContains(err, "ALREADY_EXISTS")) << err;
    ASSERT_EQ(cluster_->Cli({"user", "link-with-agent-user", "bob", "--agent-uid", "250000", "--agent-gid", "250001"},
                            &out, &err),
              0)
        << err;
    ASSERT_EQ(cluster_->Cli({"user", "list"}, &out, &err), 0) << err;
    EXPECT_TRUE(absl::StrContains(out, std::to_string(kFirstUid))) << out;
    EXPECT_TRUE(absl::StrContains(out, "250001")) << out;
  }
};

TEST_F(SecurityTenantsTest, ATrialCannotReadOrSignalAnotherUsersTrial) {
  Victim alice;
  ASSERT_NO_FATAL_FAILURE(StartAlicesTrial(&alice));
  ASSERT_NO_FATAL_FAILURE(ExpectOwnUidAndPrivateFiles(alice));
  Snoop bob;
  ASSERT_NO_FATAL_FAILURE(RunSnoop(alice, &bob));
  // Whatever the snoop did, alice's trial goes on (a SIGSTOP that got through
  // is counted in the report).
  kill(alice.pid, SIGCONT);
  ExpectSnoopRefused(bob);
  ASSERT_NO_FATAL_FAILURE(PauseResumeAndComplete(alice));
  ASSERT_NO_FATAL_FAILURE(WarmStartFromBobsCheckpoint(bob));
  ASSERT_NO_FATAL_FAILURE(ExpectOnlyAdminsLinkUnusedUids());
  int status = 0;
  cluster_->Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << "the master stopped answering";
}

// A range of one uid: alice takes it; bob's trial is never started (not as
// the agents' --trial-user, not as root), it ends in ERROR saying the range
// is used up and how to fix it, and the master stays up.
class SecurityTenantsUsedUpRangeTest : public TenantsTestBase {
 protected:
  std::string UidRange() const override { return "200000-200000"; }
};

TEST_F(SecurityTenantsUsedUpRangeTest, AUserWithoutAUidOfTheirOwnGetsNoTrialNeverRoot) {
  LoginAs("alice");
  const int alice_exp = cluster_->CreateExperiment(Config("alice", 100, 20, Checkpoints()), "alice");
  ASSERT_GT(alice_exp, 0);
  const int64_t alice_trial = FirstTrial(alice_exp);
  pid_t alice_pid = 0;
  ASSERT_TRUE(PollUntil(
      [&] {
        const std::string alloc = AllocationOf(*cluster_, alice_trial);
        alice_pid = alloc.empty() ? 0 : DetTrialOf(alloc);
        return alice_pid != 0;
      },
      120s))
      << cluster_->AgentLogs();
  EXPECT_EQ(StatusField(alice_pid, "Uid").substr(0, 6), std::to_string(kFirstUid));

  LoginAs("bob");
  const int bob_exp = cluster_->CreateExperiment(Config("bob", 20, 0, Checkpoints()), "bob");
  ASSERT_GT(bob_exp, 0);
  const int64_t bob_trial = FirstTrial(bob_exp);
  ASSERT_TRUE(cluster_->WaitForState(bob_exp, "STATE_ERROR", 60s)) << cluster_->MasterLog();
  const nlohmann::json trial = cluster_->Trial(bob_trial);
  EXPECT_EQ(trial.value("state", ""), "STATE_ERROR") << trial.dump();
  const std::string why = trial.value("error_message", "");
  EXPECT_TRUE(absl::StrContains(why, "--trial-uid-range 200000-200000 is taken: widen the range")) << trial.dump();
  EXPECT_TRUE(absl::StrContains(cluster_->TrialLogs(bob_trial), "not started: no uid of its own for user 'bob'"))
      << cluster_->TrialLogs(bob_trial);
  // The agent never got bob's allocation: nothing of his ran, as any uid.
  EXPECT_FALSE(absl::StrContains(cluster_->AgentLogs(), absl::StrCat("(trial ", bob_trial, ",")))
      << cluster_->AgentLogs();
  EXPECT_TRUE(cluster_->Metrics(bob_trial, "training").empty());

  LoginAs("alice");
  EXPECT_TRUE(cluster_->WaitForState(alice_exp, "STATE_COMPLETED", 120s)) << cluster_->TrialLogs(alice_trial);
  int status = 0;
  cluster_->Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << "the master stopped answering";
}

// A --trial-uid-range that contains det-master's own uid or gid (the
// daemons' account, which owns the data dir and every checkpoint) is refused
// at start, naming the flag. det-master runs as nobody (65534) here.
TEST(SecurityTenantsRangeTest, ARangeWithTheMastersOwnUidIsRefusedAtStart) {
  ASSERT_EQ(geteuid(), 0u) << "runs det-master as another uid with setpriv; CI runs it as root";
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  std::string out, err;
  const int rc = RunProcess({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                             std::string(DET_BIN_DIR) + "/det-master", "--data-dir", dir / "data", "--trial-uid-range",
                             "65000-66000"},
                            &out, &err, 30s);
  EXPECT_EQ(rc, 2) << out << err;
  EXPECT_TRUE(absl::StrContains(err, "--trial-uid-range '65000-66000' contains 65534, det-master's own uid or gid"))
      << err;
}

}  // namespace
}  // namespace det::testing
