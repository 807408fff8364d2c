// RestServer's GET /metrics without a core: the route labels of timed
// requests (patterns, never raw paths; "other" for unknown paths), the
// scrape token, and the metrics-only mode of --metrics-listen.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "master/core/master_metrics.h"
#include "master/http/rest_server.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

std::string Get(RestServer& server, const std::string& path, const std::string& token = "") {
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\n";
  if (!token.empty()) request += "Authorization: Bearer " + token + "\r\n";
  return server.ServeRawForTesting(request + "\r\n");
}

TEST(RestMetricsTest, RoutesAreLabelledByPatternAndUnknownPathsAsOther) {
  MasterMetrics metrics(nullptr);
  RestServer server(nullptr);
  server.set_metrics(&metrics, "tok-1");
  EXPECT_THAT(Get(server, "/api/v1/experiments/4242"), StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(Get(server, "/api/v1/trials/777/checkpoints"), StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(Get(server, "/no/such/path/31337"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(Get(server, "/healthz"), StartsWith("HTTP/1.1 503"));  // no core: no probe
  const std::string m = Get(server, "/metrics", "tok-1");
  ASSERT_THAT(m, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(m, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  EXPECT_THAT(m, HasSubstr("{code=\"401\",route=\"GET /api/v1/experiments/{experiment_id}\"} 1"));
  EXPECT_THAT(m, HasSubstr("{code=\"401\",route=\"GET /api/v1/trials/{trial_id}/checkpoints\"} 1"));
  EXPECT_THAT(m, HasSubstr("{code=\"404\",route=\"other\"} 1"));
  EXPECT_THAT(m, HasSubstr("route=\"GET /healthz\""));
  for (const char* id : {"4242", "777", "31337"}) EXPECT_THAT(m, Not(HasSubstr(id))) << id;
}

TEST(RestMetricsTest, TheScrapeTokenOrNothing) {
  MasterMetrics metrics(nullptr);
  RestServer server(nullptr);
  server.set_metrics(&metrics, "tok-1");
  const std::string none = Get(server, "/metrics");
  EXPECT_THAT(none, StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(none, HasSubstr("--metrics-token-file"));
  EXPECT_THAT(Get(server, "/metrics", "tok-2"), StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(Get(server, "/metrics", "tok-1"), StartsWith("HTTP/1.1 200"));
  RestServer no_token(nullptr);
  no_token.set_metrics(&metrics, "");
  EXPECT_THAT(Get(no_token, "/metrics"), StartsWith("HTTP/1.1 401")) << "the REST port never opens without a token";
  RestServer unset(nullptr);
  EXPECT_THAT(Get(unset, "/metrics"), StartsWith("HTTP/1.1 404"));
}

TEST(RestMetricsTest, AMetricsOnlyServerAnswersMetricsAlone) {
  MasterMetrics metrics(nullptr);
  RestServer open(nullptr);
  open.set_metrics(&metrics, "", /*metrics_only=*/true);
  EXPECT_THAT(Get(open, "/metrics"), StartsWith("HTTP/1.1 200"));
  const std::string api = Get(open, "/api/v1/master");
  EXPECT_THAT(api, StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(api, HasSubstr("serves GET /metrics only"));
  EXPECT_THAT(Get(open, "/"), StartsWith("HTTP/1.1 404"));
  RestServer with_token(nullptr);
  with_token.set_metrics(&metrics, "tok-1", /*metrics_only=*/true);
  EXPECT_THAT(Get(with_token, "/metrics"), StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(Get(with_token, "/metrics", "tok-1"), StartsWith("HTTP/1.1 200"));
}

}  // namespace
}  // namespace det::master
