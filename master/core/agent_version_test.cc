// The agent version check at registration (agent_version.h): the pure rule,
// and MasterCore::RegisterAgent refusing an agent of another MAJOR.MINOR
// without recording it.
#include "master/core/agent_version.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "common/det_version.h"
#include "master/core/core_test_fixture.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

TEST(AgentVersionTest, SameMajorMinorIsAcceptedWhateverThePatch) {
  EXPECT_TRUE(CheckAgentVersion("a", "0.2.0", "0.2.0").ok());
  EXPECT_TRUE(CheckAgentVersion("a", "0.2.7", "0.2.0").ok());
  EXPECT_TRUE(CheckAgentVersion("a", "0.2.0", "0.2.3").ok());
  EXPECT_TRUE(CheckAgentVersion("a", "0.2.1-rc1", "0.2.0").ok());
  EXPECT_TRUE(CheckAgentVersion("a", "12.34.56", "12.34.0").ok());
}

TEST(AgentVersionTest, AnotherMinorOrMajorIsRefusedNamingBothVersionsAndTheFix) {
  for (const char* agent : {"0.1.0", "0.3.0", "1.2.0", "10.2.0"}) {
    absl::Status st = CheckAgentVersion("gpu-7", agent, "0.2.0");
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << agent << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr("agent 'gpu-7' runs det-cpp " + std::string(agent)));
    EXPECT_THAT(st.message(), HasSubstr("this master runs det-cpp 0.2.0"));
    EXPECT_THAT(st.message(), HasSubstr("install det-cpp 0.2.0 on every node"));
    EXPECT_THAT(st.message(), HasSubstr("docs/operations/upgrade.md"));
  }
}

TEST(AgentVersionTest, AMalformedOrOversizedVersionIsInvalidArgument) {
  for (const std::string bad : {"", "0.2", "0.2.0.1", "v0.2.0", "0.x.0", "0..0", "-1.2.0", "0.+2.0", " 0.2.0",
                                "0.2.0 ", "1234567890.2.0"}) {
    absl::Status st = CheckAgentVersion("a", bad, "0.2.0");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << "'" << bad << "': " << st;
    EXPECT_THAT(st.message(), HasSubstr("this master is det-cpp 0.2.0")) << bad;
  }
  absl::Status st = CheckAgentVersion("a", std::string(kMaxAgentVersionBytes + 1, '1'), "0.2.0");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(st.message(), HasSubstr("at most 64"));
  EXPECT_TRUE(CheckAgentVersion("a", "0.2.0-" + std::string(kMaxAgentVersionBytes - 6, 'x'), "0.2.0").ok());
}

// The suffix is SemVer's pre-release or build metadata, nothing else: it is
// stored and shown by GET /api/v1/agents and det-cli agent describe.
TEST(AgentVersionTest, TheSuffixIsSemVerCharactersOnly) {
  for (const char* good : {"0.2.0-rc.1", "0.2.0+git.abc123", "0.2.0-rc-1+build.7", "0.2.0-A.z9"}) {
    EXPECT_TRUE(CheckAgentVersion("a", good, "0.2.0").ok()) << good;
  }
  const std::vector<std::string> bad_versions = {
      "0.2.0-", "0.2.0+", "0.2.0-rc\n1", "0.2.0-\x1b[31mred", "0.2.0-a b", "0.2.0-\xc3\xa9", "0.2.0-rc/1",
      std::string("0.2.0-rc\0x", 10)};
  for (const std::string& bad : bad_versions) {
    absl::Status st = CheckAgentVersion("a", bad, "0.2.0");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << absl::CHexEscape(bad) << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr("optional -suffix or +suffix of [0-9A-Za-z.+-]")) << absl::CHexEscape(bad);
    for (char c : std::string(st.message())) EXPECT_GE(static_cast<unsigned char>(c), 0x20) << "unescaped in " << st;
  }
}

class AgentVersionCoreTest : public MasterCoreFixture {
 protected:
  absl::Status Register(const std::string& id, const std::string& version) {
    agentv1::RegisterAgentRequest req;
    req.set_agent_id(id);
    req.set_hostname("localhost");
    req.set_version(version);
    req.add_devices()->set_id(0);
    return core_->RegisterAgent(req).status();
  }
};

// An agent of the previous minor release is refused before anything about
// it is recorded; one of the master's own release registers.
TEST_F(AgentVersionCoreTest, RegisterAgentRefusesAnotherMinorReleaseAndRecordsNothing) {
  absl::Status old = Register("old", "0.1.0");
  EXPECT_EQ(old.code(), absl::StatusCode::kFailedPrecondition) << old;
  EXPECT_THAT(old.message(), HasSubstr(absl::StrCat("runs det-cpp 0.1.0 but this master runs det-cpp ", kDetVersion)));
  auto agents = core_->GetAgents(apiv1::GetAgentsRequest());
  ASSERT_TRUE(agents.ok()) << agents.status();
  EXPECT_EQ(agents->agents_size(), 0);

  EXPECT_TRUE(Register("same", kDetVersion).ok());
  EXPECT_TRUE(Register("patch", absl::StrCat(kDetVersionMajor, ".", kDetVersionMinor, ".", kDetVersionPatch + 1)).ok());
  agents = core_->GetAgents(apiv1::GetAgentsRequest());
  ASSERT_TRUE(agents.ok()) << agents.status();
  EXPECT_EQ(agents->agents_size(), 2);
}

// An agent id labels det_slots{agent} and names the agent everywhere: more
// than 128 bytes, or a character outside [A-Za-z0-9._-], is refused at
// registration naming agent_id and the fix, and nothing is recorded.
TEST_F(AgentVersionCoreTest, RegisterAgentRefusesAnOverlongOrOddAgentId) {
  for (const std::string& bad : std::vector<std::string>{std::string(129, 'a'), "node 1", "node/1", "n\xc3\xa9",
                                                         std::string("a\0b", 3), "a{b=\"c\"}"}) {
    absl::Status status = Register(bad, kDetVersion);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr("an agent id is 1 to 128 bytes of letters, digits, '.', '_' and '-'"));
    EXPECT_THAT(status.message(), HasSubstr("--id"));
  }
  auto agents = core_->GetAgents(apiv1::GetAgentsRequest());
  ASSERT_TRUE(agents.ok()) << agents.status();
  EXPECT_EQ(agents->agents_size(), 0);
  EXPECT_TRUE(Register(std::string(128, 'a'), kDetVersion).ok());
  EXPECT_TRUE(Register("gpu-node_07.example.org", kDetVersion).ok());
}

}  // namespace
}  // namespace det::master
