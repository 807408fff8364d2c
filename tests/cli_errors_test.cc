// det-cli's errors name the fix (issue 45), against a real master: no
// master at the address, the master's REST port given instead of its gRPC
// port, and a cluster config error that names the user's file.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kDetCli = std::string(DET_BIN_DIR) + "/det-cli";

// A loopback port nobody listens on: the kernel's choice for port 0, closed
// again (no other test of this process binds ports meanwhile).
int UnusedLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// det-cli -m MASTER ARGS with its token file under `dir`; returns the exit
// status, stderr in `err`.
int CliAt(const TempDir& dir, const std::string& master, std::vector<std::string> args, std::string* err) {
  std::vector<std::string> argv = {"/usr/bin/env", "HOME=" + dir.path(), kDetCli, "-m", master};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  return RunProcess(argv, &out, err, std::chrono::minutes(1));
}

TEST(CliErrorsTest, NoMasterSaysStartOneOrSetDetMaster) {
  TempDir dir;
  const int port = UnusedLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string master = absl::StrCat("127.0.0.1:", port);
  std::string err;
  EXPECT_EQ(CliAt(dir, master, {"experiment", "list"}, &err), 1);
  EXPECT_THAT(err, HasSubstr("det-cli: error: no master answered at " + master)) << err;
  EXPECT_THAT(err, HasSubstr("start one (deploy/cluster.sh start)")) << err;
  EXPECT_THAT(err, HasSubstr("-m HOST:PORT or DET_MASTER")) << err;
  EXPECT_THAT(err, Not(HasSubstr("REST port"))) << err;
}

TEST(CliErrorsTest, RestPortSaysUseTheGrpcPort) {
  TempDir dir;
  TestCluster cluster(dir);
  const std::string rest = absl::StrCat("127.0.0.1:", cluster.http_port());
  std::string err;
  EXPECT_EQ(CliAt(dir, rest, {"experiment", "list"}, &err), 1);
  EXPECT_THAT(err, HasSubstr("this looks like the master's REST port; det-cli speaks gRPC: use the gRPC port "
                             "(8090 by default)"))
      << err;
  EXPECT_THAT(err, HasSubstr(rest)) << err;
}

TEST(CliErrorsTest, ClusterConfigErrorNamesTheFile) {
  TempDir dir;
  TestCluster cluster(dir);
  WriteFile(dir / "const.yaml", "name: bad\nsearcher:\n  name: single\n  metric: loss\n  max_length:\n"
                                "    batches: 10\nhyperparameters: {}\nbogus: 1\n");
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"experiment", "create", dir / "const.yaml", kTestSyntheticTrial}, &out, &err), 1) << out;
  EXPECT_THAT(err, HasSubstr(dir.path() + "/const.yaml:8: unknown field 'bogus'")) << err;
  EXPECT_THAT(err, Not(HasSubstr("config:8"))) << err;
}

}  // namespace
}  // namespace det::testing
