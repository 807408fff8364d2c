// The daemons' metrics token files end to end (issue 48 reviews, findings 9
// and 11, then 1 of the second): det-master and det-agent read them with one
// reader (common/secret_token_file.h), so a FIFO (which used to block
// det-master at start), a link to a file others can read or a non-ASCII
// token is refused by both at start, within a deadline, naming their flag,
// and both serve /metrics with a token from a Kubernetes Secret volume (a
// link into ..data); an agent serving /metrics on loopback without a token
// warns that trial code on the node can read it.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// det-master with `flags` and a fresh data dir must exit 2 within 30 s (a
// daemon that blocks on the file is killed then, and the test fails);
// returns its stderr.
std::string MasterRefusal(const TempDir& dir, const std::string& name, const std::vector<std::string>& flags) {
  std::vector<std::string> argv{std::string(DET_BIN_DIR) + "/det-master", "--data-dir", dir / name,
                                "--grpc-port", "0", "--http-port", "0"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::string out, err;
  EXPECT_EQ(RunProcess(argv, &out, &err, 30s), 2) << "det-master " << name << " did not exit 2 within 30 s:\n"
                                                   << out << err;
  return err;
}

// det-agent `name` with `token_file` must exit 2 within 30 s; its output.
std::string AgentRefusal(TestCluster& cluster, const std::string& name, const std::string& token_file) {
  Subprocess& agent = cluster.StartAgent(
      name, AgentOptions().add_flags({"--metrics-listen", "127.0.0.1:0", "--metrics-token-file", token_file}));
  EXPECT_EQ(agent.Wait(30s), 2) << "det-agent " << name << " did not exit 2 within 30 s:\n" << cluster.AgentLogs();
  return agent.Stdout() + agent.Stderr();
}

// The status of GET /metrics with `token` on the agent's listener (its port
// from "metrics listening on HOST:PORT", polled for 30 s); 0 when none.
int AgentScrapeStatus(Subprocess& agent, const std::string& token) {
  static const std::regex kLine("metrics listening on [^ ]+:([0-9]+)");
  int port = 0;
  PollUntil(
      [&] {
        std::smatch m;
        const std::string log = agent.Stdout() + agent.Stderr();
        if (std::regex_search(log, m, kLine)) port = std::stoi(m[1]);
        return port > 0;
      },
      30s);
  if (port == 0) return 0;
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  httplib::Result res = client.Get("/metrics", {{"Authorization", "Bearer " + token}});
  return res ? res->status : 0;
}

std::string OwnerOnly(const std::string& path, const std::string& text) {
  WriteFile(path, text);
  EXPECT_EQ(::chmod(path.c_str(), 0600), 0);
  return path;
}

TEST(MetricsTokenFile, AFifoStopsBothDaemonsAtStartInsteadOfBlockingThem) {
  TempDir dir;
  const std::string fifo = dir / "token-fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(MasterRefusal(dir, "master-fifo", {"--metrics-token-file", fifo}),
              HasSubstr("--metrics-token-file " + fifo + " is not a regular file (it is a FIFO)"));
  TestCluster cluster(dir);
  EXPECT_THAT(AgentRefusal(cluster, "fifo", fifo),
              HasSubstr("metrics-token-file " + fifo + " is not a regular file (it is a FIFO)"));
}

TEST(MetricsTokenFile, BothDaemonsRefuseTheSameNonAsciiTokenAndALinkToAFileOthersCanRead) {
  TempDir dir;
  const std::string accented = OwnerOnly(dir / "accented", "caf\xc3\xa9-token\n");
  const std::string link = dir / "link";
  const std::string target = OwnerOnly(dir / "target", "tok");
  ASSERT_EQ(::chmod(target.c_str(), 0644), 0);
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_THAT(MasterRefusal(dir, "master-accented", {"--metrics-token-file", accented}),
              HasSubstr("--metrics-token-file " + accented + ": the token holds a space, control or non-ASCII"));
  EXPECT_THAT(MasterRefusal(dir, "master-link", {"--metrics-token-file", link}),
              HasSubstr("--metrics-token-file " + link + ": group or others may access it (mode 644)"));
  TestCluster cluster(dir);
  EXPECT_THAT(AgentRefusal(cluster, "accented", accented),
              HasSubstr("metrics-token-file " + accented + ": the token holds a space, control or non-ASCII"));
  EXPECT_THAT(AgentRefusal(cluster, "link", link),
              HasSubstr("metrics-token-file " + link + ": group or others may access it (mode 644)"));
}

// A Kubernetes Secret volume (deploy/k8s mounts det-master-secrets with
// defaultMode 0400): KEY -> ..data/KEY, ..data -> a timestamped directory
// of root-owned files. Both daemons follow the link and serve /metrics to
// the token in it.
TEST(MetricsTokenFile, BothDaemonsServeTheTokenOfAKubernetesSecretVolume) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root for the root-owned files of a Secret volume: run the tests as root";
  TempDir dir;
  const std::string secrets = dir / "det-secrets";
  ASSERT_EQ(::mkdir(secrets.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((secrets + "/..2026_11_28_11_50_36.1234").c_str(), 0755), 0);
  const std::string file = OwnerOnly(secrets + "/..2026_11_28_11_50_36.1234/metrics-token", "k8s-scrape-token\n");
  ASSERT_EQ(::chown(file.c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(file.c_str(), 0400), 0);
  ASSERT_EQ(::symlink("..2026_11_28_11_50_36.1234", (secrets + "/..data").c_str()), 0);
  const std::string key = secrets + "/metrics-token";
  ASSERT_EQ(::symlink("..data/metrics-token", key.c_str()), 0);
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--metrics-token-file", key}));
  httplib::Result master = cluster.Http("GET", "/metrics", {{"Authorization", "Bearer k8s-scrape-token"}});
  ASSERT_TRUE(master) << cluster.MasterLog();
  EXPECT_EQ(master->status, 200) << master->body;
  EXPECT_THAT(master->body, HasSubstr("det_agents"));
  Subprocess& agent = cluster.StartAgent(
      "k8s", AgentOptions().add_flags({"--metrics-listen", "127.0.0.1:0", "--metrics-token-file", key}));
  EXPECT_EQ(AgentScrapeStatus(agent, "k8s-scrape-token"), 200) << cluster.AgentLogs();
  EXPECT_EQ(AgentScrapeStatus(agent, "wrong"), 401) << cluster.AgentLogs();
}

TEST(MetricsTokenFile, AnotherOwnersFileIsRefusedByBoth) {
  // Root is a required capability of the test command (CI runs tests as root).
  ASSERT_EQ(::geteuid(), 0u) << "needs root to chown a file to another user: run the tests as root";
  TempDir dir;
  const std::string other = OwnerOnly(dir / "other", "tok");
  ASSERT_EQ(::chown(other.c_str(), 65534, 65534), 0);
  EXPECT_THAT(MasterRefusal(dir, "master-other", {"--metrics-token-file", other}),
              HasSubstr("--metrics-token-file " + other + " is owned by uid 65534, neither this daemon's uid 0 nor root"));
  TestCluster cluster(dir);
  EXPECT_THAT(AgentRefusal(cluster, "other", other),
              HasSubstr("metrics-token-file " + other + " is owned by uid 65534"));
}

TEST(MetricsTokenFile, ALoopbackListenerWithoutATokenWarnsThatTrialsCanReadIt) {
  TempDir dir;
  TestCluster cluster(dir);
  Subprocess& agent = cluster.StartAgent("open", AgentOptions().add_flags({"--metrics-listen", "127.0.0.1:0"}));
  ASSERT_TRUE(PollUntil([&] { return (agent.Stdout() + agent.Stderr()).find("metrics listening on") != std::string::npos; },
                        30s))
      << cluster.AgentLogs();
  EXPECT_THAT(agent.Stdout() + agent.Stderr(),
              HasSubstr("has no metrics-token-file: any process on this node, trial code included, can read its "
                        "/metrics"));
}

}  // namespace
}  // namespace det::testing
