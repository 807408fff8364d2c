#include "agent/metrics_server.h"

#include <sys/stat.h>

#include <string>

#include <httplib.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace det::agent {
namespace {

using ::testing::HasSubstr;

TEST(MetricsListenTest, ParsesHostAndPort) {
  absl::StatusOr<MetricsListenAddress> a = ParseMetricsListen("127.0.0.1:9100");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 9100);
  EXPECT_TRUE(a->loopback);
  a = ParseMetricsListen("[::1]:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 0);
  EXPECT_TRUE(a->loopback);
  EXPECT_TRUE(ParseMetricsListen("localhost:1")->loopback);
  EXPECT_TRUE(ParseMetricsListen("127.4.5.6:1")->loopback);
  EXPECT_FALSE(ParseMetricsListen("0.0.0.0:9100")->loopback);
  EXPECT_FALSE(ParseMetricsListen("10.1.2.3:9100")->loopback);
  EXPECT_FALSE(ParseMetricsListen("[::]:9100")->loopback);
  EXPECT_FALSE(ParseMetricsListen("node.example:9100")->loopback);
}

TEST(MetricsListenTest, RefusesMalformedSpecsNamingTheKey) {
  for (const char* bad : {"9100", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:x", ":9100",
                          "::1:9100"}) {
    absl::StatusOr<MetricsListenAddress> a = ParseMetricsListen(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("metrics-listen")) << bad;
  }
  EXPECT_FALSE(ParseMetricsListen(std::string(300, 'h') + ":1").ok());
}

TEST(MetricsTokenTest, ReadsAnOwnerOnlyFile) {
  det::testing::TempDir dir;
  const std::string path = dir / "token";
  det::testing::WriteFile(path, "  s3cret-token\n");
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  absl::StatusOr<std::string> token = ReadMetricsToken(path);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cret-token");
}

TEST(MetricsTokenTest, RefusesUnsafeOrUselessFiles) {
  det::testing::TempDir dir;
  auto error = [](const std::string& path) {
    absl::StatusOr<std::string> t = ReadMetricsToken(path);
    return t.ok() ? std::string("ok") : std::string(t.status().message());
  };
  const std::string open = dir / "open";
  det::testing::WriteFile(open, "token");
  ASSERT_EQ(chmod(open.c_str(), 0644), 0);
  EXPECT_THAT(error(open), HasSubstr("chmod 600"));
  const std::string empty = dir / "empty";
  det::testing::WriteFile(empty, " \n");
  ASSERT_EQ(chmod(empty.c_str(), 0600), 0);
  EXPECT_THAT(error(empty), HasSubstr(": empty"));
  const std::string big = dir / "big";
  det::testing::WriteFile(big, std::string(5000, 'a'));
  ASSERT_EQ(chmod(big.c_str(), 0600), 0);
  EXPECT_THAT(error(big), HasSubstr("larger than 4096 bytes"));
  const std::string spaced = dir / "spaced";
  det::testing::WriteFile(spaced, "two words");
  ASSERT_EQ(chmod(spaced.c_str(), 0600), 0);
  EXPECT_THAT(error(spaced), HasSubstr("printable ASCII"));
  EXPECT_THAT(error(dir / "missing"), HasSubstr("metrics-token-file"));
  EXPECT_THAT(error(dir.path()), HasSubstr("not a regular file"));
}

std::unique_ptr<MetricsServer> StartOnLoopback(const std::string& token) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start(*ParseMetricsListen("127.0.0.1:0"), token, [] { return std::string("up 1\n"); });
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(MetricsServerTest, ServesMetricsOnlyAt404Elsewhere) {
  std::unique_ptr<MetricsServer> server = StartOnLoopback("");
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->port(), 0);
  httplib::Client client("127.0.0.1", server->port());
  httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res) << "no answer";
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "up 1\n");
  EXPECT_THAT(res->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
  res = client.Get("/api/v1/agents");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST(MetricsServerTest, ATokenIsRequiredWhenConfigured) {
  std::unique_ptr<MetricsServer> server = StartOnLoopback("a-token-longer-than-the-sso-buffer");
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_THAT(res->body, Not(HasSubstr("up 1")));
  res = client.Get("/metrics", {{"Authorization", "Bearer wrong"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = client.Get("/metrics", {{"Authorization", "Bearer a-token-longer-than-the-sso-buffer"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "up 1\n");
}

TEST(MetricsServerTest, ANonLoopbackAddressNeedsAToken) {
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start(*ParseMetricsListen("0.0.0.0:0"), "", [] { return std::string(); });
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("metrics-token-file"));
  server = MetricsServer::Start(*ParseMetricsListen("0.0.0.0:0"), "tok", [] { return std::string(); });
  EXPECT_TRUE(server.ok()) << server.status();
}

// More clients than workers and queue: every one is answered (the accept
// loop waits for room rather than dropping them).
TEST(MetricsServerTest, ManyClientsAreAllAnswered) {
  std::unique_ptr<MetricsServer> server = StartOnLoopback("");
  ASSERT_NE(server, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 3 * (kMetricsWorkers + kMetricsQueued); ++i) {
    threads.emplace_back([&] {
      httplib::Client client("127.0.0.1", server->port());
      httplib::Result res = client.Get("/metrics");
      if (res && res->status == 200) ++ok;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), 3 * (kMetricsWorkers + kMetricsQueued));
}

}  // namespace
}  // namespace det::agent
