// Issue 47, part 1: several machines deployed as an operator deploys them
// (docs/operations/multi-node.md). An "operator's cluster"
// (tests/multi_host/operator_cluster.h): a master host, two agent hosts of
// 2 slots each and a client host, network namespaces on a bridge, each
// installed by deploy/install.sh and configured from the shipped
// deploy/config/*.toml in the documented keys only, TLS on, the master
// reached at its advertised name. The example search and a 4-slot
// distributed trial spanning both agent hosts run to completion.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <vector>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/multi_host/operator_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

const std::string kExamples = std::string(DET_SOURCE_DIR) + "/examples/synthetic";
// Each run takes about 10 s on a 2-core VM; a trial that cannot reach the
// master retries for DET_MASTER_RETRY_TIMEOUT_S (10 min) without failing.
constexpr auto kRun = std::chrono::minutes(2);

// `yaml` with `from` replaced by `to`, which must occur exactly once (a
// length key of the shipped example).
std::string Edit(const std::string& yaml, const std::string& from, const std::string& to) {
  size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << "'" << from << "' is not in the example";
  EXPECT_EQ(yaml.find(from, at + 1), std::string::npos) << "'" << from << "' is in the example twice";
  if (at == std::string::npos) return yaml;
  return yaml.substr(0, at) + to + yaml.substr(at + from.size());
}

// The example search (examples/synthetic/random.yaml, as the deployment
// page runs it) with its length keys shortened for test time.
std::string SearchConfig() {
  std::string y = ReadFile(kExamples + "/random.yaml");
  y = Edit(y, "max_length:\n    batches: 200", "max_length:\n    batches: 40");
  return Edit(y, "min_validation_period:\n  batches: 50", "min_validation_period:\n  batches: 20");
}

// examples/synthetic/distributed.yaml on 4 slots, shortened.
std::string DistributedConfig() {
  std::string y = ReadFile(kExamples + "/distributed.yaml");
  y = Edit(y, "slots_per_trial: 2", "slots_per_trial: 4");
  y = Edit(y, "max_length:\n    batches: 200", "max_length:\n    batches: 40");
  return Edit(y, "min_validation_period:\n  batches: 50", "min_validation_period:\n  batches: 20");
}

// What install.sh and the operator's edits left on the hosts.
void ExpectInstalledAsDocumented(OperatorCluster& c) {
  const std::string master_toml = ReadFile(c.root(Host::kMaster) + "/etc/det/master.toml");
  EXPECT_EQ(GetTomlKey(master_toml, "advertise-address"), absl::StrCat("\"", OperatorCluster::kMasterName, "\""));
  EXPECT_EQ(GetTomlKey(master_toml, "host"), "\"0.0.0.0\"");
  EXPECT_EQ(GetTomlKey(master_toml, "data-dir"), "\"" + c.root(Host::kMaster) + "/var/lib/det\"");
  const std::string secret = ReadFile(c.root(Host::kMaster) + "/etc/det/cluster-secret");
  EXPECT_GE(secret.size(), 32u);
  for (Host h : {Host::kAgent1, Host::kAgent2}) {
    SCOPED_TRACE(c.root(h));
    // The master's secret, copied (never a fresh one), mode 0600; the copy
    // the operator brought over is gone.
    EXPECT_EQ(ReadFile(c.root(h) + "/etc/det/cluster-secret"), secret);
    struct stat st {};
    ASSERT_EQ(stat((c.root(h) + "/etc/det/cluster-secret").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_NE(access((c.root(h) + "/root/cluster-secret").c_str(), F_OK), 0);
    const std::string agent_toml = ReadFile(c.root(h) + "/etc/det/agent.toml");
    EXPECT_EQ(GetTomlKey(agent_toml, "det-trial"), "\"" + c.root(h) + "/usr/local/bin/det-trial\"");
    EXPECT_EQ(GetTomlKey(agent_toml, "master"), absl::StrCat("\"", OperatorCluster::kMasterName, ":8090\""));
  }
}

// The trials of experiment `id`, each COMPLETED with validation metrics.
void ExpectTrialsCompleted(OperatorCluster& c, int id, size_t n) {
  json trials = c.Trials(id);
  ASSERT_EQ(trials.size(), n) << trials.dump();
  for (const auto& t : trials) {
    EXPECT_EQ(t.value("state", ""), "STATE_COMPLETED") << t.dump();
    EXPECT_FALSE(c.Metrics(t.value("id", 0), "validation").empty()) << t.dump();
  }
}

// ------------------------------------------------------------ install.sh

// Runs deploy/install.sh ARGS with `env` ("K=V") in the environment.
CliResult InstallSh(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  std::vector<std::string> argv = {"/usr/bin/env", std::string("DET_BUILD_DIR=") + DET_BUILD_ROOT};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), {"/bin/bash", std::string(DET_SOURCE_DIR) + "/deploy/install.sh"});
  argv.insert(argv.end(), args.begin(), args.end());
  CliResult r;
  r.rc = RunProcess(argv, &r.out, &r.err, std::chrono::minutes(1));
  return r;
}

// Each bad option stops install.sh before it installs anything, naming the
// option and an example of a good value.
TEST(MultiHostInstall, BadOptionsAreRefusedNamingThem) {
  TempDir dir;
  CliResult r = InstallSh({"--prefix", "usr/local", "--no-system", "client"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--prefix 'usr/local' must be an absolute path"));
  r = InstallSh({"--root", "/", "--no-system", "client"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--root '/' must be an absolute path"));
  r = InstallSh({"--root", dir.path() + "/a b", "--no-system", "client"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--root"));
  r = InstallSh({"--root"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("usage: "));
  r = InstallSh({"--root", dir.path(), "--no-system", "worker"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown argument 'worker'"));
  // An agent node without the master's secret.
  r = InstallSh({"--root", dir.path(), "--no-system", "agent"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("CLUSTER_SECRET_FILE=/root/cluster-secret"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/usr")) << "installed before refusing";
}

// --prefix and --root: binaries under ROOT/PREFIX, and the installed
// configs and units name those binaries and ROOT's /etc/det and /var/lib.
TEST(MultiHostInstall, PrefixAndRootPointConfigsAndUnitsAtTheNode) {
  TempDir dir;
  const std::string root = dir.path();
  CliResult r = InstallSh({"--prefix", "/opt/det", "--root", root, "--no-system", "all"});
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(access((root + "/opt/det/bin/det-master").c_str(), X_OK), 0);
  const std::string master = ReadFile(root + "/etc/det/master.toml");
  const std::string agent = ReadFile(root + "/etc/det/agent.toml");
  EXPECT_EQ(GetTomlKey(master, "data-dir"), "\"" + root + "/var/lib/det\"");
  EXPECT_EQ(GetTomlKey(master, "cluster-secret-file"), "\"" + root + "/etc/det/cluster-secret\"");
  EXPECT_EQ(GetTomlKey(master, "checkpoint-root"), "\"" + root + "/mnt/det-checkpoints\"");
  EXPECT_EQ(GetTomlKey(agent, "det-trial"), "\"" + root + "/opt/det/bin/det-trial\"");
  EXPECT_EQ(GetTomlKey(agent, "work-dir"), "\"" + root + "/var/lib/det-agent\"");
  EXPECT_THAT(agent, HasSubstr("# tls-ca = \"" + root + "/etc/det/tls/ca.pem\""));
  EXPECT_THAT(ReadFile(root + "/etc/systemd/system/det-master.service"),
              HasSubstr("ExecStart=" + root + "/opt/det/bin/det-master --config " + root + "/etc/det/master.toml\n"));
  EXPECT_THAT(ReadFile(root + "/etc/systemd/system/det-agent.service"),
              HasSubstr("ExecStart=" + root + "/opt/det/bin/det-agent --config " + root + "/etc/det/agent.toml\n"));
  // The secrets: made once, private.
  struct stat st {};
  ASSERT_EQ(stat((root + "/etc/det/cluster-secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat((root + "/var/lib/det").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

// ---------------------------------------------------------- the cluster

// Must show 1 (part 1): deployed from the shipped files, TLS on, det-cli on
// the client host; the example search and a 4-slot trial across both agent
// hosts complete.
TEST(MultiHost, DeployedFromTheShippedFilesRunsTheSearchAndASpanningTrial) {
  const auto start = std::chrono::steady_clock::now();
  OperatorCluster c;
  ASSERT_TRUE(c.ok()) << c.error() << c.Logs();
  ASSERT_NO_FATAL_FAILURE(ExpectInstalledAsDocumented(c));

  // det-cli on the client host, over TLS at the advertised name.
  CliResult agents = c.Cli({"agent", "list"});
  ASSERT_EQ(agents.rc, 0) << agents.err;
  EXPECT_THAT(agents.out, HasSubstr("agent-1"));
  EXPECT_THAT(agents.out, HasSubstr("agent-2"));
  CliResult who = c.Cli({"user", "whoami"});
  EXPECT_THAT(who.out, HasSubstr("admin")) << who.err;

  const int spanning = c.CreateExperiment(DistributedConfig(), "distributed");
  ASSERT_GT(spanning, 0);
  const int search = c.CreateExperiment(SearchConfig(), "random");
  ASSERT_GT(search, 0);
  ASSERT_EQ(c.WaitUntilEnded(spanning, kRun), "STATE_COMPLETED") << c.Trials(spanning).dump() << c.Logs();
  ASSERT_EQ(c.WaitUntilEnded(search, kRun), "STATE_COMPLETED") << c.Trials(search).dump() << c.Logs();

  ASSERT_NO_FATAL_FAILURE(ExpectTrialsCompleted(c, spanning, 1));
  ASSERT_NO_FATAL_FAILURE(ExpectTrialsCompleted(c, search, 4));
  // The 4 ranks spanned both agent hosts: the chief's store on one agent's
  // address, reached from the other across the bridge.
  const int64_t trial = c.Trials(spanning)[0].value("id", 0);
  const std::string logs = c.TrialLogs(trial);
  EXPECT_THAT(logs, HasSubstr("rank 0 of 4: process group over ")) << logs;
  EXPECT_THAT(logs, HasSubstr("(2 node(s))")) << logs;
  const bool on1 = logs.find(c.address(Host::kAgent1) + ":") != std::string::npos;
  const bool on2 = logs.find(c.address(Host::kAgent2) + ":") != std::string::npos;
  EXPECT_TRUE(on1 != on2) << "the chief listens on one agent host's address\n" << logs;
  // All 4 ranks ran and logged, 2 on each agent host, each exiting 0 (the
  // agents' own logs: stored trial log lines carry no agent id).
  std::set<int> ranks;
  std::string allocation;
  json lines = c.Rest("GET", absl::StrCat("/api/v1/trials/", trial, "/logs"));
  for (const auto& l : lines.value("logs", json::array())) {
    if (l.contains("rank") && l["rank"].is_number()) ranks.insert(l["rank"].get<int>());
    if (allocation.empty()) allocation = l.value("allocation_id", "");
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3})) << lines.dump();
  ASSERT_FALSE(allocation.empty()) << lines.dump();
  for (int i = 1; i <= 2; ++i) {
    const std::string log = c.AgentLog(i);
    int exited = 0;
    for (int rank = 0; rank < 4; ++rank) {
      exited += log.find(absl::StrCat("allocation ", allocation, " rank ", rank, " exited with code 0")) !=
                std::string::npos;
    }
    EXPECT_EQ(exited, 2) << "agent " << i << " ran " << exited << " of the 4 ranks\n" << log;
  }
  std::printf("[ timing   ] operator cluster: built, search and 4-slot trial completed in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

}  // namespace
}  // namespace det::testing
