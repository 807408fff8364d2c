// Security: the attacks of the security issue, each tried end to end against
// a real master (and agents where they matter) and refused with the stated
// status, nothing deleted or changed, and the master alive and small.
//
// One section per area; each test is the attack as an attacker would run it:
//   1. Ownership and the authorization sweep
//   2. Secure defaults (passwords, throttling, TLS)
//   3. Paths (checkpoint storage roots, checkpoint ids, GC)
//   4. Agents (placement, per-agent credential, secret, --trial-user)
//   5. Containment (a trial's processes, the artifact cache)
//   6. Bounds (configs, ids, logs, message sizes, long-polls)
//   7. Tokens (revocation races, allocation tokens)
//   8. Fuzzers (RSS and malloc limits)
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "det/agent/v1/agent.grpc.pb.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;
namespace agentv1 = ::det::agent::v1;

// Resident set size of `pid` in MiB (VmRSS of /proc/PID/status), -1 when
// unknown.
int64_t RssMiB(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) / 1024;
  }
  return -1;
}

// The master is still serving and small: every attack test ends with this.
void ExpectMasterHealthy(TestCluster& cluster) {
  int status = 0;
  cluster.Get("/api/v1/master", &status);
  EXPECT_EQ(status, 200) << "the master stopped answering";
  int64_t rss = RssMiB(cluster.master().pid());
  EXPECT_GT(rss, 0);
  EXPECT_LT(rss, 400) << "master RSS " << rss << " MiB";
}

// ---------------------------------------------------------------------------
// 1. Ownership and the authorization sweep
// ---------------------------------------------------------------------------

// (section 1 tests)

// ---------------------------------------------------------------------------
// 2. Secure defaults
// ---------------------------------------------------------------------------

// (section 2 tests)

// ---------------------------------------------------------------------------
// 3. Paths
// ---------------------------------------------------------------------------

// (section 3 tests)

// ---------------------------------------------------------------------------
// 4. Agents
// ---------------------------------------------------------------------------

// Helpers of sections 4 and 5: a master with a cluster secret, fake agents
// speaking det.agent.v1 with it, and the processes of a running trial.

constexpr char kAgentSecret[] = "agents-secret-5d1c0e7a94b3";

// A master whose agents must present dir/secret.
TestClusterOptions SecretClusterOptions(const TempDir& dir) {
  WriteFile(dir / "secret", std::string(kAgentSecret) + "\n");
  return TestClusterOptions().add_master_flags({"--cluster-secret-file", dir / "secret"});
}

AgentOptions SecretAgent(const TempDir& dir) {
  return AgentOptions().add_flags({"--cluster-secret-file", dir / "secret"});
}

// One synthetic trial of `batches` batches, each `delay_ms` long, with
// `env` ("NAME=value" lines) in its environment.
std::string OneTrial(const std::string& name, int batches, int delay_ms, const std::vector<std::string>& env = {}) {
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
  max_length:
    batches: )", batches, R"(
max_restarts: 0
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
)");
  for (const auto& e : env) absl::StrAppend(&out, "    - ", e, "\n");
  absl::StrAppend(&out, "data:\n  train_size: 256\n  val_size: 64\n");
  return out;
}

// The allocation agent `agent_id` runs ("" when none).
std::string AllocationOn(TestCluster& cluster, const std::string& agent_id) {
  auto agents = cluster.Get("/api/v1/agents");
  if (!agents.is_object() || !agents.contains("agents")) return "";
  for (const auto& a : agents["agents"]) {
    if (a.value("id", "") != agent_id) continue;
    for (const auto& id : a.value("allocation_ids", nlohmann::json::array())) return id.get<std::string>();
  }
  return "";
}

// Pids of live processes whose environment holds `entry` ("NAME=value").
std::vector<pid_t> PidsWithEnv(const std::string& entry) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = ReadFile(e.path() / "environ");
    if (std::string("\0", 1).append(env).find(std::string("\0", 1) + entry + std::string("\0", 1)) !=
        std::string::npos) {
      out.push_back(static_cast<pid_t>(std::stoi(name)));
    }
  }
  return out;
}

// Pids of live (not zombie) processes whose command line holds `marker`.
std::vector<pid_t> PidsWithCmdline(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadFile(e.path() / "stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') continue;
    std::string cmdline = ReadFile(e.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) != std::string::npos) out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

// The "Uid:" line's real uid of /proc/PID/status, -1 when unknown.
int64_t ProcessUid(pid_t pid) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/status")));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Uid:", 0) == 0) return std::stoll(line.substr(4));
  }
  return -1;
}

// A fake agent: det.agent.v1 calls with the cluster secret.
class FakeAgent {
 public:
  explicit FakeAgent(const std::string& address)
      : stub_(agentv1::AgentService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {}

  grpc::Status Register(const std::string& id, const std::string& credential,
                        agentv1::RegisterAgentResponse* resp) {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_hostname("evil-host");
    req.add_addresses("127.0.0.1");
    req.add_devices()->set_id(0);
    req.set_version("0.1.0");
    req.set_agent_credential(credential);
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-cluster-secret", kAgentSecret);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->RegisterAgent(&ctx, req, resp);
  }

  // Downloads artifact `sha256` (discarding it); the call's status.
  grpc::Status Fetch(const std::string& session_token, const std::string& sha256) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-cluster-secret", kAgentSecret);
    ctx.AddMetadata("authorization", "Bearer " + session_token);
    agentv1::FetchArtifactRequest req;
    req.set_sha256(sha256);
    auto reader = stub_->FetchArtifact(&ctx, req);
    agentv1::FetchArtifactResponse chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  }

  // Opens the session's Connect stream and sends `messages` on it.
  void Send(const std::string& session_token, const std::vector<agentv1::AgentMessage>& messages) {
    ctx_ = std::make_unique<grpc::ClientContext>();
    ctx_->AddMetadata("x-det-cluster-secret", kAgentSecret);
    ctx_->AddMetadata("authorization", "Bearer " + session_token);
    stream_ = stub_->Connect(ctx_.get());
    for (const auto& m : messages) ASSERT_TRUE(stream_->Write(m));
  }

  ~FakeAgent() {
    if (stream_) {
      stream_->WritesDone();
      ctx_->TryCancel();
      stream_->Finish();
    }
  }

 private:
  std::unique_ptr<agentv1::AgentService::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<agentv1::AgentMessage, agentv1::MasterMessage>> stream_;
};

// An agent's message may only be about allocations placed on it: a fake
// agent (with the cluster secret, registered under its own id) downloading
// another agent's trial.so, reporting its allocation TERMINATED and writing
// its trial's logs is refused; the real allocation keeps running and
// completes.
TEST(SecurityTest, AgentMessagesAboutAnotherAgentsAllocationAreRefused) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  cluster.StartAgent("a", SecretAgent(dir));
  const int exp = cluster.CreateExperiment(OneTrial("placement", 150, 20), "placement");
  ASSERT_GT(exp, 0);
  std::string alloc;
  ASSERT_TRUE(PollUntil([&] { return !(alloc = AllocationOn(cluster, "a")).empty(); }, 60s)) << cluster.AgentLogs();
  const int64_t trial = cluster.Trials(exp)[0].value("id", int64_t{0});
  ASSERT_GT(trial, 0);

  FakeAgent evil(cluster.grpc_address());
  agentv1::RegisterAgentResponse reg;
  grpc::Status st = evil.Register("evil", "", &reg);
  ASSERT_TRUE(st.ok()) << st.error_message();
  std::vector<agentv1::AgentMessage> attack(2);
  auto* ps = attack[0].mutable_process_state();
  ps->set_allocation_id(alloc);
  ps->set_rank(0);
  ps->set_state(agentv1::PROCESS_STATE_TERMINATED);
  ps->set_exit_code(1);
  auto* log = attack[1].mutable_logs()->add_logs();
  log->set_allocation_id(alloc);
  log->set_trial_id(trial);
  log->set_message("forged-log-line-by-evil");
  // Another agent's trial.so is not this agent's to download either.
  grpc::Status fetch = evil.Fetch(reg.session_token(), Sha256File(kTestSyntheticTrial).value());
  EXPECT_EQ(fetch.error_code(), grpc::StatusCode::PERMISSION_DENIED) << fetch.error_message();
  evil.Send(reg.session_token(), attack);
  ASSERT_TRUE(PollUntil(
      [&] {
        const std::string log = cluster.MasterLog();
        return absl::StrContains(log, "agent evil: refused a state change") &&
               absl::StrContains(log, "agent evil: refused log lines");
      },
      30s))
      << cluster.MasterLog();

  EXPECT_EQ(AllocationOn(cluster, "a"), alloc) << "the forged TERMINATED ended the allocation";
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 120s)) << cluster.MasterLog();
  auto t = cluster.Trials(exp)[0];
  EXPECT_EQ(t.value("restarts", 0), 0);
  auto logs = cluster.Get(absl::StrCat("/api/v1/trials/", trial, "/logs"));
  EXPECT_FALSE(absl::StrContains(logs.dump(), "forged-log-line-by-evil"));
  ExpectMasterHealthy(cluster);
}

// The cluster secret alone cannot take over a known (here disconnected)
// agent id: without its per-agent credential, or with a wrong one,
// RegisterAgent is PERMISSION_DENIED; the real agent, restarted with its
// credential file, comes back.
TEST(SecurityTest, RegisterAgentWithoutItsCredentialIsRefused) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  cluster.StartAgent("a", SecretAgent(dir));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s)) << cluster.AgentLogs();
  const std::string credential_file = dir / "agent-a/agent-credential";
  struct stat st {};
  ASSERT_EQ(stat(credential_file.c_str(), &st), 0) << "the agent did not keep its credential";
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  cluster.KillAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 0; }, 30s));

  FakeAgent evil(cluster.grpc_address());
  agentv1::RegisterAgentResponse resp;
  grpc::Status none = evil.Register("a", "", &resp);
  EXPECT_EQ(none.error_code(), grpc::StatusCode::PERMISSION_DENIED) << none.error_message();
  EXPECT_THAT(none.error_message(), ::testing::HasSubstr("credential"));
  grpc::Status wrong = evil.Register("a", std::string(64, 'f'), &resp);
  EXPECT_EQ(wrong.error_code(), grpc::StatusCode::PERMISSION_DENIED) << wrong.error_message();
  EXPECT_EQ(cluster.ConnectedAgents(), 0);

  // The real agent (its work dir holds the credential) registers again.
  std::filesystem::create_directories(dir / "agent-a-1");
  std::filesystem::copy_file(credential_file, dir / "agent-a-1/agent-credential");
  cluster.StartAgent("a", SecretAgent(dir));
  EXPECT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, 30s)) << cluster.AgentLogs();
  ExpectMasterHealthy(cluster);
}

// The cluster secret is read from its file only: it is in no process's
// environment (master, agent, trial), and an agent given it only through
// DET_CLUSTER_SECRET does not use it (refused, exits).
TEST(SecurityTest, ClusterSecretIsInNoProcessEnvironment) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  Subprocess& agent = cluster.StartAgent("a", SecretAgent(dir));
  const int exp = cluster.CreateExperiment(OneTrial("environ", 100, 50), "environ");
  ASSERT_GT(exp, 0);
  std::string alloc;
  std::vector<pid_t> trial_pids;
  ASSERT_TRUE(PollUntil(
      [&] {
        alloc = AllocationOn(cluster, "a");
        if (!alloc.empty()) trial_pids = PidsWithEnv("DET_ALLOCATION_ID=" + alloc);
        return !trial_pids.empty();
      },
      60s))
      << cluster.AgentLogs();
  for (pid_t pid : std::vector<pid_t>{cluster.master().pid(), agent.pid(), trial_pids[0]}) {
    const std::string env = ReadFile(absl::StrCat("/proc/", pid, "/environ"));
    EXPECT_FALSE(env.empty()) << "cannot read /proc/" << pid << "/environ";
    EXPECT_FALSE(absl::StrContains(env, kAgentSecret)) << "the secret is in /proc/" << pid << "/environ";
    EXPECT_FALSE(absl::StrContains(env, "DET_CLUSTER_SECRET")) << pid;
  }

  Subprocess& env_only = cluster.StartAgent(
      "b", AgentOptions().set_prefix({"/usr/bin/env", std::string("DET_CLUSTER_SECRET=") + kAgentSecret}));
  const int rc = env_only.Wait(30s);
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "an agent without the secret file kept running";
  EXPECT_THAT(env_only.Stdout() + env_only.Stderr(), ::testing::HasSubstr("UNAUTHENTICATED"));
  EXPECT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 120s)) << cluster.MasterLog();
  ExpectMasterHealthy(cluster);
}

// --trial-user: the trial process runs as that user (nobody), and still
// reads its trial.so, works in its directory and checkpoints.
TEST(SecurityTest, TrialUserRunsTrialsAsThatUser) {
  if (geteuid() != 0) GTEST_SKIP() << "--trial-user needs the agent to run as root; this test runs as uid " << geteuid();
  TempDir dir;
  // The trial (uid 65534) must reach the agent's work dir and write its
  // checkpoints: the test dir is 0700 by default.
  chmod(dir.path().c_str(), 0755);
  TestCluster cluster(dir, SecretClusterOptions(dir));
  std::filesystem::create_directories(dir / "master/checkpoints");
  chmod((dir / "master/checkpoints").c_str(), 01777);
  cluster.StartAgent("a", SecretAgent(dir).add_flags({"--trial-user", "nobody"}));
  const int exp = cluster.CreateExperiment(OneTrial("trial-user", 100, 30), "trial-user");
  ASSERT_GT(exp, 0);
  std::vector<pid_t> pids;
  ASSERT_TRUE(PollUntil(
      [&] {
        const std::string alloc = AllocationOn(cluster, "a");
        if (!alloc.empty()) pids = PidsWithEnv("DET_ALLOCATION_ID=" + alloc);
        return !pids.empty();
      },
      60s))
      << cluster.AgentLogs();
  for (pid_t pid : pids) EXPECT_EQ(ProcessUid(pid), 65534) << "pid " << pid;
  const int64_t trial = cluster.Trials(exp)[0].value("id", int64_t{0});
  EXPECT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 120s))
      << cluster.Get(absl::StrCat("/api/v1/trials/", trial, "/logs")).dump(1) << cluster.MasterLog();

  // Only root may use it.
  Subprocess& unprivileged = cluster.StartAgent(
      "b", SecretAgent(dir).add_flags({"--trial-user", "nobody"}).set_prefix({"/usr/sbin/runuser", "-u", "nobody", "--"}));
  const int rc = unprivileged.Wait(30s);
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(unprivileged.Stdout() + unprivileged.Stderr(), ::testing::HasSubstr("needs det-agent to run as root"));
  ExpectMasterHealthy(cluster);
}

// ---------------------------------------------------------------------------
// 5. Containment
// ---------------------------------------------------------------------------

// A trial that starts a daemon escaping its process group (setsid, like
// `setsid sleep inf &`) and then finishes: once the trial has ended, the
// daemon is gone too. With the agent's cgroups, and without them (process
// group and reaper only).
void ExpectEscapedProcessEndsWithTheTrial(const std::vector<std::string>& agent_flags) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  cluster.StartAgent("a", SecretAgent(dir).add_flags(agent_flags));
  // escape_trial.so runs `setsid sleep $ESCAPE_SLEEP_SECONDS &` when loaded.
  const std::string marker = absl::StrCat("3141.", getpid(), agent_flags.size());
  const int exp = cluster.CreateExperiment(OneTrial("escape", 60, 50, {"ESCAPE_SLEEP_SECONDS=" + marker}), "escape",
                                           std::string(DET_TRIALS_DIR) + "/escape_trial.so");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(PollUntil([&] { return !PidsWithCmdline("sleep " + marker).empty(); }, 60s))
      << "the trial never started its daemon\n" << cluster.AgentLogs();
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", 120s)) << cluster.MasterLog() << cluster.AgentLogs();
  // The rank's exit is reported only after its processes are gone.
  EXPECT_EQ(PidsWithCmdline("sleep " + marker), std::vector<pid_t>{}) << "a process outlived its trial";
  EXPECT_EQ(cluster.BusySlots(), 0);
  ExpectMasterHealthy(cluster);
}

TEST(SecurityTest, EscapedTrialProcessEndsWithTheTrial) { ExpectEscapedProcessEndsWithTheTrial({}); }

TEST(SecurityTest, EscapedTrialProcessEndsWithTheTrialWithoutCgroups) {
  ExpectEscapedProcessEndsWithTheTrial({"--no-cgroups"});
}

// The agent's artifact cache: a cached trial.so is read-only, and one
// swapped by someone with the agent's uid (who chmods it writable first) is
// detected at the next launch, deleted and fetched again; the trial runs
// the real library.
TEST(SecurityTest, SwappedCachedTrialSoIsDetectedAndFetchedAgain) {
  TempDir dir;
  TestCluster cluster(dir, SecretClusterOptions(dir));
  cluster.StartAgent("a", SecretAgent(dir));
  const int first = cluster.CreateExperiment(OneTrial("cache-1", 20, 0), "cache-1");
  ASSERT_GT(first, 0);
  ASSERT_TRUE(cluster.WaitForState(first, "STATE_COMPLETED", 120s)) << cluster.MasterLog() << cluster.AgentLogs();
  const std::string sha = Sha256File(kTestSyntheticTrial).value();
  const std::string cached = dir / ("agent-a/cache/" + sha + ".so");
  struct stat st {};
  ASSERT_EQ(stat(cached.c_str(), &st), 0) << cached;
  EXPECT_EQ(st.st_mode & 0777, 0444u) << "cached artifacts must be read-only";

  // The attack: another experiment's library in place of this one.
  ASSERT_EQ(chmod(cached.c_str(), 0644), 0);
  std::filesystem::copy_file(std::string(DET_TRIALS_DIR) + "/no_entry_trial.so", cached,
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_NE(Sha256File(cached).value(), sha);

  const int second = cluster.CreateExperiment(OneTrial("cache-2", 20, 0), "cache-2");
  ASSERT_GT(second, 0);
  EXPECT_TRUE(cluster.WaitForState(second, "STATE_COMPLETED", 120s)) << cluster.MasterLog() << cluster.AgentLogs();
  EXPECT_THAT(cluster.AgentLogs(), ::testing::HasSubstr("was tampered with"));
  EXPECT_EQ(Sha256File(cached).value(), sha);
  ASSERT_EQ(stat(cached.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  ExpectMasterHealthy(cluster);
}

// ---------------------------------------------------------------------------
// 6. Bounds
// ---------------------------------------------------------------------------

// (section 6 tests)

// ---------------------------------------------------------------------------
// 7. Tokens
// ---------------------------------------------------------------------------

// (section 7 tests)

// ---------------------------------------------------------------------------
// 8. Fuzzers
// ---------------------------------------------------------------------------

// (section 8 tests)

TEST(SecurityTest, MasterStartsHealthy) {
  TempDir dir;
  TestCluster cluster(dir);
  ExpectMasterHealthy(cluster);
}

}  // namespace
}  // namespace det::testing
