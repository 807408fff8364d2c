// The operator cluster's TOML key setter, and the keys the docs tell an
// operator to set against the shipped files (no root needed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "tests/multi_host/operator_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

const std::string kSource = DET_SOURCE_DIR;

TEST(MultiHostToml, SetReplacesASetKey) {
  std::string toml = "a = 1\nslots = 1\n# slots = 9\n";
  ASSERT_TRUE(SetTomlKey(&toml, "slots", "2").ok());
  EXPECT_EQ(toml, "a = 1\nslots = 2\n# slots = 9\n");
  EXPECT_EQ(GetTomlKey(toml, "slots"), "2");
}

TEST(MultiHostToml, SetUncommentsACommentedKey) {
  std::string toml = "# The CA.\n# tls-ca = \"/etc/det/tls/ca.pem\"\nlog-level = \"info\"\n";
  ASSERT_TRUE(SetTomlKey(&toml, "tls-ca", "\"/x/ca.pem\"").ok());
  EXPECT_EQ(toml, "# The CA.\ntls-ca = \"/x/ca.pem\"\nlog-level = \"info\"\n");
}

TEST(MultiHostToml, AKeyNotInTheFileIsAnErrorNamingIt) {
  std::string toml = "slots = 1\n# a comment mentioning tls-cert\n";
  absl::Status s = SetTomlKey(&toml, "tls-cert", "\"x\"");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'tls-cert'"));
  EXPECT_EQ(toml, "slots = 1\n# a comment mentioning tls-cert\n");
  // A key whose name ends another's is not that key.
  EXPECT_FALSE(SetTomlKey(&toml, "lots", "2").ok());
}

// Every key docs/operations/multi-node.md's tables tell an operator to set
// is in the shipped file it names, set or commented out: what the
// OperatorCluster edits (and an operator edits) exists.
TEST(MultiHostToml, EveryKeyTheDocsSayToSetIsInTheShippedFile) {
  const std::string doc = ReadFile(kSource + "/docs/operations/multi-node.md");
  ASSERT_FALSE(doc.empty());
  // Rows "| `key` | master.toml | ..." of the "Keys to set" tables.
  std::regex row(R"(\n\| `([a-z-]+)` \| `(master|agent)\.toml` \|)");
  std::set<std::string> seen;
  for (std::sregex_iterator it(doc.begin(), doc.end(), row), end; it != end; ++it) {
    const std::string key = (*it)[1], file = (*it)[2];
    std::string toml = ReadFile(kSource + "/deploy/config/" + file + ".toml");
    ASSERT_FALSE(toml.empty()) << file;
    EXPECT_TRUE(SetTomlKey(&toml, key, "\"x\"").ok()) << key << " in " << file << ".toml";
    seen.insert(file + ":" + key);
  }
  // The keys OperatorCluster sets are among them.
  for (const char* k : {"master:advertise-address", "master:checkpoint-root", "master:tls-cert", "master:tls-key",
                        "master:heartbeat-timeout-ms", "agent:master", "agent:id", "agent:slots", "agent:address",
                        "agent:tls-ca"}) {
    EXPECT_EQ(seen.count(k), 1u) << k << " is not in multi-node.md's tables of keys to set";
  }
}

}  // namespace
}  // namespace det::testing
