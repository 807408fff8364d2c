// The REST/JSON API under /api/v1/, served from the same MasterCore as gRPC
// with protobuf's JSON mapping, so both always agree.
#ifndef DET_MASTER_HTTP_REST_SERVER_H_
#define DET_MASTER_HTTP_REST_SERVER_H_

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "master/core/auth.h"
#include "master/core/master_core.h"
#include "master/http/health.h"
#include "master/http/rest_listener.h"
#include "master/http/rest_routes.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace det::master {

// The largest body of a request without a valid user token.
inline constexpr int64_t kMaxUnauthenticatedBodyBytes = 64 << 10;

class ApiHandlers;
class MasterMetrics;
class RestDispatcher;

// Routes (rest_dispatch.h): the declared route table (rest_routes.h, one
// file per resource group), POST /api/v1/<RpcName> for every RPC that is not
// client-streaming (server-streaming ones answer newline-delimited JSON), and
// GET /api/v1/routes listing both; all of them call ApiHandlers, the same
// handlers as gRPC.
//
// Authentication: every /api/ path except the routes of GetMaster and Login
// needs a user token (`Authorization: Bearer <token>` or the det_token
// cookie), checked once in a pre-routing handler through
// ApiHandlers::Authenticate, the same check the gRPC services make; the
// dashboard's files (/, /dashboard/*) and the health check (GET
// /api/v1/health, /healthz and /livez, health.h) need none.
//
// Bodies: a request that carries no valid user token (Login, GetMaster, the
// dashboard, anything refused with 401) may have a body of at most
// kMaxUnauthenticatedBodyBytes, checked from Content-Length before the body
// is read (413 otherwise; chunked bodies are refused too), so an anonymous
// client cannot make the master allocate more; authenticated bodies are
// bounded by set_max_request_bytes.
//
// Connections: RestListener (rest_listener.h) accepts them and reads each
// request head (after the TLS handshake, with EnableTls) in one epoll
// thread, with a head deadline and limits per address and in all, then runs
// the complete request on a worker through httplib's parser;
// set_listener_options sets those bounds.
//
// TLS: after EnableTls the port serves HTTPS only (a plain HTTP request is
// closed without an answer); ServeRawForTesting stays plain.
class RestServer {
 public:
  // One API route: method, path template, RPC, and how it is served.
  using Route = RestRouteInfo;

  // `auth` checks tokens; null: every authenticated route answers 401 (tests
  // of the unauthenticated routes and the dashboard need no AuthCore).
  // Neither is owned; both must outlive the server.
  explicit RestServer(MasterCore* core, AuthCore* auth = nullptr);
  ~RestServer();
  // Binds host:port (0: any free port) and serves in a background thread;
  // returns the bound port.
  absl::StatusOr<int> Start(const std::string& host, int port);
  void Stop();

  // Serves the web dashboard's files from `dir` (e.g. master/http/dashboard,
  // to edit them without rebuilding) instead of the copies embedded in the
  // binary. Call before Start; empty: embedded (the default).
  void set_dashboard_dir(std::string dir) { dashboard_dir_ = std::move(dir); }

  // Largest accepted authenticated request body (default 8 MiB). Call before
  // Start.
  void set_max_request_bytes(int64_t bytes);

  // The connection bounds of the port (validated by the caller;
  // max_body_bytes comes from set_max_request_bytes, the TLS files from
  // EnableTls). Call before Start.
  void set_listener_options(const RestListenerOptions& options) { listener_options_ = options; }

  // Serves HTTPS with this PEM certificate chain and key instead of HTTP.
  // Call before Start (and before set_max_request_bytes and
  // set_dashboard_dir, or call those again). InvalidArgument naming the
  // files when they do not load.
  absl::Status EnableTls(const std::string& cert_file, const std::string& key_file);

  // Serves GET /metrics (master_metrics.h, text format 0.0.4) to an admin's
  // token (401 without a valid token, 403 for a user who is not an admin)
  // or, when `scrape_token` is not empty, to `Authorization: Bearer
  // <scrape_token>`, and times every request into it (route label: the
  // route's pattern, "other" for a path no route serves). `metrics_only`
  // (det-master --metrics-listen): this server answers GET /metrics and
  // nothing else (404), open to all when `scrape_token` is empty (the
  // caller allows that on loopback only). Call before Start; `metrics` is
  // not owned and must outlive the server.
  void set_metrics(MasterMetrics* metrics, std::string scrape_token, bool metrics_only = false);

  // The health check behind GET /api/v1/health and /healthz (probing the
  // core and its store); SetShuttingDown on it when the master begins to
  // stop. liveness(): GET /livez (the core only; never shutting down).
  HealthCheck& health() { return *health_; }
  HealthCheck& liveness() { return *liveness_; }

  // Every API route (also served as GET /api/v1/routes), for tests that must
  // cover all of them.
  const std::vector<Route>& routes() const;

  // Runs one raw HTTP/1.1 request (request line, headers, body) through the
  // same parser and routes as a connection would, in-process and without a
  // socket, and returns the raw response ("HTTP/1.1 200 OK\r\n..."), or ""
  // when the request could not be parsed far enough to answer. For fuzzing
  // and tests; needs no Start. Thread-safe. A streaming RPC's lines come in
  // one body (not chunked), the call cancelled after 5 s (rest_stream.h).
  std::string ServeRawForTesting(const std::string& request);

 private:
  // Installs the handlers and routes on `s`.
  void Routes(httplib::Server& s);
  // GET /metrics and the request timing (rest_metrics.cc).
  void MetricsRoutes(httplib::Server& s);
  // Starts timing a request; answers it (true) when this server serves
  // /metrics only and `req` is for another path.
  bool BeginRequest(const httplib::Request& req, httplib::Response& res) const;
  void ServeMetrics(const httplib::Request& req, httplib::Response& res) const;
  std::string RouteLabel(const httplib::Request& req) const;
  class Server;  // httplib::Server that can also serve an in-memory stream
  std::unique_ptr<ApiHandlers> handlers_;
  std::unique_ptr<RestDispatcher> dispatcher_;
  std::unique_ptr<HealthCheck> health_;
  std::unique_ptr<HealthCheck> liveness_;
  std::string dashboard_dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<httplib::Server> tls_server_;  // set by EnableTls: HTTPS (never listens)
  int64_t max_request_bytes_ = 8 << 20;
  RestListenerOptions listener_options_;
  std::string tls_cert_file_, tls_key_file_;  // set by EnableTls
  std::unique_ptr<RestListener> listener_;  // once started
  MasterMetrics* metrics_ = nullptr;
  std::string scrape_token_;
  bool metrics_only_ = false;
};

}  // namespace det::master

#endif  // DET_MASTER_HTTP_REST_SERVER_H_
