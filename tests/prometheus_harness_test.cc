// The harness of the Prometheus tests on its own: a real Prometheus scrapes
// a fixed exposition served here (with a bearer token), PromQL reads it
// back; the exposition parser and the log-address reader.
#include "tests/prometheus_harness.h"

#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

namespace det::testing {
namespace {

using namespace std::chrono_literals;

constexpr char kExposition[] = R"(# HELP det_example_total An example counter.
# TYPE det_example_total counter
det_example_total{kind="training"} 42
det_example_total{kind="other",path="a \"quoted\" \\ value"} 1
# HELP det_example_seconds An example histogram.
# TYPE det_example_seconds histogram
det_example_seconds_bucket{le="0.5"} 1
det_example_seconds_bucket{le="+Inf"} 2
det_example_seconds_sum 1.5
det_example_seconds_count 2
)";

TEST(PrometheusHarness, ScrapesAServedExpositionWithTheTokenAndAnswersPromQL) {
  ASSERT_EQ(MissingPrometheusTools(), "");
  TempDir dir;
  httplib::Server server;
  server.Get("/metrics", [](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer harness-token") {
      res.status = 401;
      return;
    }
    res.set_content(kExposition, "text/plain; version=0.0.4");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  WriteFile(dir / "token", "harness-token");
  {
    PrometheusServer prom(dir, {{"served", "127.0.0.1:" + std::to_string(port), dir / "token"}});
    ASSERT_EQ(prom.Start(60s), "");
    EXPECT_GT(prom.port(), 0);
    EXPECT_EQ(prom.Value(R"(det_example_total{kind="training"})"), 42.0);
    std::string error;
    nlohmann::json range = prom.QueryRange("sum(det_example_total)", UnixNow() - 5, UnixNow(), 1, &error);
    ASSERT_TRUE(range.is_array()) << error;
    EXPECT_FALSE(range.empty());
    std::string lint;
    EXPECT_EQ(PromtoolCheckMetrics(dir, kExposition, &lint), 0) << lint;
    EXPECT_NE(PromtoolCheckMetrics(dir, "det_bad_total 1\n", &lint), 0) << "an untyped series without HELP";
  }
  server.stop();
  serving.join();
}

TEST(PrometheusHarness, ParsesSeriesAndLogAddresses) {
  std::vector<std::string> bad;
  const std::set<Series> series = ParseSeries(std::string(kExposition) + "not a sample\n", &bad);
  EXPECT_EQ(series.size(), 6u);
  EXPECT_EQ(bad, std::vector<std::string>{"not a sample"});
  Series quoted{"det_example_total", {{"kind", "other"}, {"path", "a \"quoted\" \\ value"}}};
  EXPECT_EQ(series.count(quoted), 1u) << quoted.ToString();
  EXPECT_EQ(AddressAfter("x\nI metrics listening on 127.0.0.1:4242\nmore", "metrics listening on "),
            "127.0.0.1:4242");
  EXPECT_EQ(AddressAfter("nothing here", "metrics listening on "), "");
}

}  // namespace
}  // namespace det::testing
