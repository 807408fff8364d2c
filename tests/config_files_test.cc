// The shipped deploy/config/master.toml and agent.toml: every key names a
// flag, so det-master and det-agent start from them (with the paths and
// ports a test needs given as flags, which win over the file), and the agent
// registers. A key that names no flag, as a typo would, is refused with an
// error naming it, before anything is opened.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;

const std::string kBin = DET_BIN_DIR;
const std::string kSource = DET_SOURCE_DIR;

TEST(ConfigFilesTest, ShippedMasterAndAgentConfigsStartACluster) {
  TempDir dir;
  WriteFile(dir / "secret", "s3cret-s3cret\n");
  WriteFile(dir / "password", "first-password\n");
  Subprocess master({kBin + "/det-master", "--config", kSource + "/deploy/config/master.toml", "--host", "127.0.0.1",
                     "--advertise-address", "127.0.0.1", "--grpc-port", "0", "--http-port", "0", "--data-dir",
                     dir / "data", "--checkpoint-root", dir / "checkpoints", "--cluster-secret-file", dir / "secret",
                     "--initial-admin-password-file", dir / "password", "--ports-file", dir / "ports.json"},
                    dir / "master.out", dir / "master.err");
  ASSERT_TRUE(PollUntil([&] { return !ReadFile(dir / "ports.json").empty(); }, 30s)) << master.Stderr();
  const int grpc = nlohmann::json::parse(ReadFile(dir / "ports.json")).value("grpc", 0);
  ASSERT_GT(grpc, 0);
  Subprocess agent({kBin + "/det-agent", "--config", kSource + "/deploy/config/agent.toml", "--master",
                    absl::StrCat("127.0.0.1:", grpc), "--id", "shipped", "--work-dir", dir / "agent",
                    "--det-trial", kBin + "/det-trial", "--cluster-secret-file", dir / "secret"},
                   dir / "agent.out", dir / "agent.err");
  // The agent logs its registration; the master answers agent list.
  EXPECT_TRUE(PollUntil([&] { return agent.Stdout().find("registered") != std::string::npos; }, 30s))
      << agent.Stdout() << agent.Stderr() << master.Stdout();
}

TEST(ConfigFilesTest, AKeyThatNamesNoFlagIsRefusedNamingIt) {
  TempDir dir;
  WriteFile(dir / "master.toml", "data-dir = \"" + (dir / "data") + "\"\nheartbeat-timout-ms = 1000\n");
  Subprocess master({kBin + "/det-master", "--config", dir / "master.toml", "--grpc-port", "0", "--http-port", "0"},
                    dir / "master.out", dir / "master.err");
  // CLI11 refuses the file (its ConfigError exit code) before the master
  // opens anything; without the check it would serve (Wait: -1).
  const int kConfigError = 110;
  EXPECT_EQ(master.Wait(30s), kConfigError) << master.Stdout();
  EXPECT_THAT(master.Stderr(), ::testing::HasSubstr("parse heartbeat-timout-ms"));
  WriteFile(dir / "agent.toml", "master = \"127.0.0.1:1\"\nslot = 2\n");
  Subprocess agent({kBin + "/det-agent", "--config", dir / "agent.toml"}, dir / "agent.out", dir / "agent.err");
  EXPECT_EQ(agent.Wait(30s), kConfigError) << agent.Stdout();
  EXPECT_THAT(agent.Stderr(), ::testing::HasSubstr("parse slot\n"));
}

}  // namespace
}  // namespace det::testing
