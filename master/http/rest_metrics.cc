// RestServer's GET /metrics (master_metrics.h) and the timing of every
// request into det_rest_request_duration_seconds{route,code}.
#include <httplib.h>

#include <chrono>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "master/core/auth.h"
#include "master/core/master_metrics.h"
#include "master/http/health.h"
#include "master/http/rest_dispatch.h"
#include "master/http/rest_reply.h"
#include "master/http/rest_server.h"
#include "master/service/api_handlers.h"

namespace det::master {
namespace {

constexpr char kMetricsPath[] = "/metrics";

// When this thread began the request it serves (set by BeginRequest, taken
// by the logger, both on the worker thread that runs the request).
thread_local std::chrono::steady_clock::time_point request_began;
thread_local bool request_timed = false;

}  // namespace

void RestServer::set_metrics(MasterMetrics* metrics, std::string scrape_token, bool metrics_only) {
  metrics_ = metrics;
  dispatcher_->set_metrics(metrics);
  scrape_token_ = std::move(scrape_token);
  metrics_only_ = metrics_only;
}

bool RestServer::BeginRequest(const httplib::Request& req, httplib::Response& res) const {
  request_began = std::chrono::steady_clock::now();
  request_timed = true;
  if (!metrics_only_ || req.path == kMetricsPath) return false;
  res.set_header("Connection", "close");
  SendError(res, absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path.substr(0, 256),
                                                  ": this listener (--metrics-listen) serves GET /metrics only")));
  return true;
}

std::string RestServer::RouteLabel(const httplib::Request& req) const {
  const std::string& path = req.path;
  const std::string method = req.method == "HEAD" ? "GET" : req.method;
  if (method == "GET") {
    if (path == kHealthPath || path == kHealthzPath || path == kLivezPath || path == kMetricsPath) {
      return absl::StrCat("GET ", path);
    }
    if (path == "/" || path == "/index.html" || path == "/dashboard" || path == "/dashboard/") return "GET /";
    if (absl::StartsWith(path, "/dashboard/")) return "GET /dashboard/{file}";
  }
  if (absl::StartsWith(path, "/api/")) {
    std::string label = dispatcher_->RouteLabel(method, path);
    if (!label.empty()) return label;
  }
  return "other";
}

void RestServer::MetricsRoutes(httplib::Server& s) {
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    if (metrics_ == nullptr || !request_timed) return;
    request_timed = false;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - request_began).count();
    metrics_->ObserveRest(RouteLabel(req), res.status, seconds);
  });
  s.Get(kMetricsPath, [this](const httplib::Request& req, httplib::Response& res) { ServeMetrics(req, res); });
}

void RestServer::ServeMetrics(const httplib::Request& req, httplib::Response& res) const {
  if (metrics_ == nullptr) return SendError(res, absl::NotFoundError("no route GET /metrics"));
  const std::string authorization = req.get_header_value("Authorization");
  absl::string_view bearer = authorization;
  const bool has_bearer = absl::ConsumePrefix(&bearer, "Bearer ");
  bool allowed = !scrape_token_.empty() && has_bearer && AuthCore::ConstantTimeEquals(std::string(bearer), scrape_token_);
  if (!allowed && metrics_only_ && scrape_token_.empty()) allowed = true;  // a loopback listener (main.cc)
  if (!allowed) {
    auto caller = handlers_->Authenticate("GetMe", authorization, req.get_header_value("Cookie"));
    if (!caller.ok()) {
      SendError(res, absl::UnauthenticatedError(absl::StrCat(
                         "GET /metrics needs an admin's token or the scrape token (det-master --metrics-token-file) "
                         "as 'Authorization: Bearer <token>': ",
                         caller.status().message())));
      res.status = 401;
      return;
    }
    if (!caller->user.admin()) {
      SendError(res, absl::PermissionDeniedError(absl::StrCat(
                         "GET /metrics: user '", caller->user.username(),
                         "' is not an admin; use an admin's token or the scrape token (--metrics-token-file)")));
      res.status = 403;
      return;
    }
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-store");
  res.set_content(metrics_->Scrape(), kMetricsContentType);
}

}  // namespace det::master
