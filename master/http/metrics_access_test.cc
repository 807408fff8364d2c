#include "master/http/metrics_access.h"

#include <sys/stat.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

std::string TokenFile(const det::testing::TempDir& dir, const std::string& text, mode_t mode) {
  const std::string path = dir / "token";
  det::testing::WriteFile(path, text);
  ::chmod(path.c_str(), mode);
  return path;
}

TEST(MetricsAccessTest, ReadsAnOwnerOnlyTokenTrimmed) {
  det::testing::TempDir dir;
  auto token = ReadMetricsTokenFile(TokenFile(dir, "  abc123\n", 0600), "--metrics-token-file");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc123");
}

TEST(MetricsAccessTest, RefusesReadableEmptyLargeOrMissingFilesNamingTheFlag) {
  det::testing::TempDir dir;
  auto open = ReadMetricsTokenFile(TokenFile(dir, "abc\n", 0644), "--metrics-token-file");
  EXPECT_THAT(open.status().message(), HasSubstr("--metrics-token-file " + (dir / "token") + ": group or others"));
  EXPECT_THAT(open.status().message(), HasSubstr("chmod 600"));
  auto empty = ReadMetricsTokenFile(TokenFile(dir, " \n", 0600), "metrics-token-file");
  EXPECT_THAT(empty.status().message(), HasSubstr(": empty"));
  auto large = ReadMetricsTokenFile(TokenFile(dir, std::string(kMaxMetricsTokenBytes + 1, 'a'), 0600), "f");
  EXPECT_THAT(large.status().message(), HasSubstr("larger than 4096 bytes"));
  auto spaced = ReadMetricsTokenFile(TokenFile(dir, "a b\n", 0600), "f");
  EXPECT_THAT(spaced.status().message(), HasSubstr("space, control or non-ASCII character"));
  auto accented = ReadMetricsTokenFile(TokenFile(dir, "caf\xc3\xa9\n", 0600), "--metrics-token-file");
  EXPECT_THAT(accented.status().message(), HasSubstr("--metrics-token-file " + (dir / "token") + ": the token holds"));
  auto missing = ReadMetricsTokenFile(dir / "none", "--metrics-token-file");
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot read it"));
  // A FIFO would block det-master at start: refused at once.
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  auto fifo = ReadMetricsTokenFile(dir / "fifo", "--metrics-token-file");
  EXPECT_THAT(fifo.status().message(), HasSubstr("--metrics-token-file " + (dir / "fifo") + " is not a regular file"));
}

TEST(MetricsAccessTest, ListenAddresses) {
  auto v4 = ParseMetricsListen("127.0.0.1:9091", false);
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 9091);
  auto v6 = ParseMetricsListen("[::1]:0", false);
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  EXPECT_TRUE(ParseMetricsListen("0.0.0.0:9091", true).ok()) << "a token allows any address";
  auto open = ParseMetricsListen("0.0.0.0:9091", false);
  EXPECT_THAT(open.status().message(), HasSubstr("not a loopback address"));
  EXPECT_THAT(open.status().message(), HasSubstr("--metrics-token-file"));
  EXPECT_THAT(ParseMetricsListen("10.0.0.5:9091", false).status().message(), HasSubstr("--metrics-listen"));
  for (const char* bad : {"9091", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", ":9091", "[::1:9091"}) {
    EXPECT_FALSE(ParseMetricsListen(bad, true).ok()) << bad;
  }
}

}  // namespace
}  // namespace det::master
