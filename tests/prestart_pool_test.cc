// det-agent --prestart-pool (issue 50; agent/prestart_pool.h,
// docs/operations/prestart-pool.md), end to end as root with two tenants
// (det-master --trial-uid-range, as tests/security_tenants_test.cc): each
// prestarted det-trial serves one trial and exits, another user's trial
// never runs in a process that served someone else, the pool refills, a
// SIGKILL of an idle process is harmless, and an assigned process runs as
// its user's uid (in its allocation's cgroup where the agent uses cgroups)
// before it reads the token.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr char kSecret[] = "prestart-secret-7c1e93";
constexpr int64_t kFirstUid = 200300;
constexpr int kPool = 2;

std::string Config(const std::string& name, int batches, int delay_ms, const std::string& checkpoints) {
  return absl::StrCat("name: ", name, R"(
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
  max_length:
    batches: )", batches, R"(
min_validation_period:
  batches: 10
scheduling_unit: 10
max_restarts: 0
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoints, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
)");
}

int64_t Int(const nlohmann::json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());
  return v.is_number() ? v.get<int64_t>() : 0;
}

std::string StatusField(pid_t pid, const std::string& field) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/status")));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::string(absl::StripAsciiWhitespace(line.substr(field.size() + 1)));
  }
  return "";
}

std::string CgroupOf(pid_t pid) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/cgroup")));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  }
  return "";
}

// Where the cgroup v2 hierarchy is mounted ("" when it is not).
std::string Cgroup2Mount() {
  std::istringstream in(ReadFile("/proc/self/mountinfo"));
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string id, parent, dev, root, mount_point;
    if (fields >> id >> parent >> dev >> root >> mount_point && root == "/") return mount_point;
  }
  return "";
}

// The idle prestarted det-trial processes of agent `agent`: `det-trial
// --prestart`, children of a reaper that is the agent's child.
std::set<pid_t> IdlePool(pid_t agent) {
  std::set<pid_t> out;
  const std::string want = std::string(DET_BIN_DIR) + "/det-trial" + std::string("\0--prestart\0", 12);
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadFile(e.path() / "cmdline") != want) continue;
    const pid_t pid = static_cast<pid_t>(std::stoi(name));
    const std::string reaper = StatusField(pid, "PPid");
    if (reaper.empty() || StatusField(std::stoi(reaper), "PPid") != std::to_string(agent)) continue;
    out.insert(pid);
  }
  return out;
}

// What a trial's det-trial said when assigned: its pid and Uid line, and its
// cgroup line; pid 0 when it was not a prestarted process.
struct Assigned {
  pid_t pid = 0;
  std::string uid;
  std::string cgroup;
  std::string fds;  // what it held then: "0 1 2 4" (4: the channel)
};

Assigned AssignedIn(const std::string& logs) {
  static const std::regex kLine(R"(\[det-trial\] prestarted pid (\d+) assigned: Uid: ([0-9 ]+); cgroup (\S*); fds ([0-9 ]+))");
  std::smatch m;
  Assigned a;
  if (!std::regex_search(logs, m, kLine)) return a;
  a.pid = static_cast<pid_t>(std::stoi(m[1]));
  a.uid = m[2];
  a.cgroup = m[3];
  a.fds = m[4];
  return a;
}

std::string Uids(int64_t uid) { return absl::StrCat(uid, " ", uid, " ", uid, " ", uid); }

class PrestartPoolClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(geteuid(), 0u) << "the prestart pool test needs root (det-agent drops each prestarted process to the "
                                "trial owner's uid); CI runs it as root";
    ASSERT_EQ(chmod(dir_.path().c_str(), 0711), 0);
    fs::create_directories(Checkpoints());
    ASSERT_EQ(chmod(Checkpoints().c_str(), 03733), 0);
    WriteFile(dir_ / "secret", std::string(kSecret) + "\n");
    cluster_ = std::make_unique<TestCluster>(
        dir_, TestClusterOptions().add_master_flags({"--cluster-secret-file", dir_ / "secret", "--trial-uid-range",
                                                     absl::StrCat(kFirstUid, "-", kFirstUid + 9)}));
    agent_ = cluster_
                 ->StartAgent("a", AgentOptions().set_slots(1).add_flags(
                                       {"--cluster-secret-file", dir_ / "secret", "--prestart-pool",
                                        std::to_string(kPool)}))
                 .pid();
    ASSERT_TRUE(PollUntil([&] { return cluster_->ConnectedAgents() == 1; }, 30s)) << cluster_->AgentLogs();
    std::string out, err;
    ASSERT_EQ(cluster_->Cli({"user", "login", "admin", "--password-stdin"}, &out, &err, "\n"), 0) << err;
    for (const char* user : {"alice", "bob"}) {
      ASSERT_EQ(cluster_->Cli({"user", "create", user, "--password-stdin"}, &out, &err, "pw-of-tenant\n"), 0) << err;
    }
  }

  std::string Checkpoints() const { return dir_ / "checkpoints"; }

  // kPool idle processes, none of them in `not_these`, within the deadline.
  std::set<pid_t> FullPool(const std::set<pid_t>& not_these = {}) {
    std::set<pid_t> idle;
    EXPECT_TRUE(PollUntil(
        [&] {
          idle = IdlePool(agent_);
          return static_cast<int>(idle.size()) == kPool &&
                 std::none_of(idle.begin(), idle.end(), [&](pid_t p) { return not_these.count(p) > 0; });
        },
        60s))
        << "the pool did not refill to " << kPool << "\n" << cluster_->AgentLogs();
    return idle;
  }

  // `user` creates a trial; returns its experiment once its det-trial said
  // it was assigned (*assigned filled).
  int StartTrial(const std::string& user, int batches, int delay_ms, int64_t* trial, Assigned* assigned) {
    std::string out, err;
    EXPECT_EQ(cluster_->Cli({"user", "login", user, "--password-stdin"}, &out, &err, "pw-of-tenant\n"), 0) << err;
    const int exp = cluster_->CreateExperiment(Config(user, batches, delay_ms, Checkpoints()), user);
    EXPECT_GT(exp, 0);
    nlohmann::json trials;
    EXPECT_TRUE(PollUntil([&] { return !(trials = cluster_->Trials(exp)).empty(); }, 30s));
    *trial = trials.empty() ? 0 : Int(trials[0]["id"]);
    EXPECT_TRUE(PollUntil([&] { return (*assigned = AssignedIn(cluster_->TrialLogs(*trial))).pid != 0; }, 120s))
        << "no prestarted process took the trial\n" << cluster_->TrialLogs(*trial) << cluster_->AgentLogs();
    return exp;
  }

  // Where the agent puts trial processes: "" without cgroups (the agent
  // says so), else "/det-alloc-" to look for in a trial's cgroup.
  std::string AllocCgroupMark() {
    const std::string logs = cluster_->AgentLogs();
    if (absl::StrContains(logs, "trial containment: cgroup v2")) return "/det-alloc-";
    EXPECT_TRUE(absl::StrContains(logs, "trial containment: process group and reaper only")) << logs;
    return "";
  }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
  pid_t agent_ = 0;
};

TEST_F(PrestartPoolClusterTest, EachProcessServesOneTrialAndNeverAnotherTenant) {
  const std::set<pid_t> first = FullPool();
  int64_t alice_trial = 0;
  Assigned alice;
  const int alice_exp = StartTrial("alice", 40, 100, &alice_trial, &alice);
  ASSERT_NE(alice.pid, 0);
  EXPECT_EQ(first.count(alice.pid), 1u) << "alice's trial did not run in one of the idle processes";
  // Dropped before the token: what it said then, and what /proc says now.
  EXPECT_EQ(alice.uid, Uids(kFirstUid));
  EXPECT_EQ(StatusField(alice.pid, "Uid"), absl::StrCat(kFirstUid, "\t", kFirstUid, "\t", kFirstUid, "\t", kFirstUid));
  EXPECT_EQ(StatusField(alice.pid, "Groups"), "");
  // Only the standard streams and the channel before the token, whatever
  // the idle process had opened; no capability left, as after a fresh
  // launch's exec.
  EXPECT_EQ(alice.fds, "0 1 2 4");
  EXPECT_EQ(StatusField(alice.pid, "CapEff"), "0000000000000000");
  EXPECT_EQ(StatusField(alice.pid, "CapPrm"), "0000000000000000");
  EXPECT_EQ(StatusField(alice.pid, "CapAmb"), "0000000000000000");
  const std::string mark = AllocCgroupMark();
  std::string alice_cgroup;  // the allocation's cgroup directory
  if (!mark.empty()) {
    EXPECT_TRUE(absl::StrContains(alice.cgroup, mark)) << alice.cgroup;
    EXPECT_TRUE(absl::StrContains(CgroupOf(alice.pid), mark)) << CgroupOf(alice.pid);
    alice_cgroup = Cgroup2Mount() + CgroupOf(alice.pid);
    EXPECT_TRUE(fs::is_directory(alice_cgroup)) << alice_cgroup;
  } else {
    // Said, not skipped silently: the agent found no writable cgroup v2
    // tree here (it logged why); the uid, fd and capability checks ran.
    RecordProperty("cgroup_check", "not run: the agent runs trials without cgroups on this host");
    std::cout << "[ NOTE     ] cgroup check not run: the agent found no writable cgroup v2 tree on this host\n";
  }
  // The pool refills while alice's trial runs.
  const std::set<pid_t> second = FullPool({alice.pid});
  ASSERT_TRUE(cluster_->WaitForState(alice_exp, "STATE_COMPLETED", 180s)) << cluster_->TrialLogs(alice_trial);
  // It served one trial and exited.
  EXPECT_TRUE(PollUntil([&] { return !fs::exists(absl::StrCat("/proc/", alice.pid)); }, 30s));
  // Its allocation's cgroup is removed as a fresh launch's is.
  if (!alice_cgroup.empty()) {
    EXPECT_TRUE(PollUntil([&] { return !fs::exists(alice_cgroup); }, 30s)) << alice_cgroup << " is left behind";
  }

  int64_t bob_trial = 0;
  Assigned bob;
  const int bob_exp = StartTrial("bob", 10, 0, &bob_trial, &bob);
  ASSERT_NE(bob.pid, 0);
  EXPECT_NE(bob.pid, alice.pid) << "bob's trial ran in the process that served alice";
  EXPECT_EQ(second.count(bob.pid), 1u);
  EXPECT_EQ(bob.uid, Uids(kFirstUid + 1));
  ASSERT_TRUE(cluster_->WaitForState(bob_exp, "STATE_COMPLETED", 180s)) << cluster_->TrialLogs(bob_trial);
  // Each trial has all its metrics.
  EXPECT_EQ(Int(cluster_->Metrics(alice_trial, "training").back()["total_batches"]), 40);
  EXPECT_EQ(Int(cluster_->Metrics(bob_trial, "training").back()["total_batches"]), 10);
  // Two ranks, two prestarted processes, as the agent logged.
  const std::string logs = cluster_->AgentLogs();
  size_t n = 0;
  for (size_t at = logs.find("rank 0: prestarted process"); at != std::string::npos;
       at = logs.find("rank 0: prestarted process", at + 1)) {
    ++n;
  }
  EXPECT_EQ(n, 2u) << logs;
}

TEST_F(PrestartPoolClusterTest, AKilledIdleProcessIsReplacedAndTheNextTrialRuns) {
  const std::set<pid_t> idle = FullPool();
  const pid_t victim = *idle.begin();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const std::set<pid_t> refilled = FullPool({victim});
  EXPECT_TRUE(absl::StrContains(cluster_->AgentLogs(), "exited unassigned")) << cluster_->AgentLogs();
  int64_t trial = 0;
  Assigned a;
  const int exp = StartTrial("alice", 10, 0, &trial, &a);
  EXPECT_NE(a.pid, victim);
  EXPECT_EQ(refilled.count(a.pid), 1u);
  ASSERT_TRUE(cluster_->WaitForState(exp, "STATE_COMPLETED", 180s)) << cluster_->TrialLogs(trial);
}

TEST(PrestartPoolFlagTest, APoolOverTheBoundIsRefusedNamingTheFlag) {
  TempDir dir;
  std::string out, err;
  EXPECT_NE(RunProcess({std::string(DET_BIN_DIR) + "/det-agent", "--master", "127.0.0.1:1", "--work-dir",
                        dir / "w", "--prestart-pool", "65"},
                       &out, &err, 30s),
            0);
  EXPECT_TRUE(absl::StrContains(out + err, "--prestart-pool")) << out << err;
  EXPECT_TRUE(absl::StrContains(out + err, "64")) << out << err;
  // The TOML key is the flag's name, as for every agent flag.
  WriteFile(dir / "agent.toml", "prestart-pool = -1\n");
  EXPECT_NE(RunProcess({std::string(DET_BIN_DIR) + "/det-agent", "--master", "127.0.0.1:1", "--work-dir",
                        dir / "w", "--config", dir / "agent.toml"},
                       &out, &err, 30s),
            0);
  EXPECT_TRUE(absl::StrContains(out + err, "prestart-pool")) << out << err;
}

}  // namespace
}  // namespace det::testing
