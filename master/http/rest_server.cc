#include "master/http/rest_server.h"

#include <httplib.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "master/http/csrf.h"
#include "master/http/dashboard_assets.h"
#include "master/http/rest_dispatch.h"
#include "master/http/rest_reply.h"
#include "master/service/api_handlers.h"
#include "master/service/request_auth.h"

namespace det::master {
namespace {

// Whether this thread is serving a request held in memory (ServeRaw).
thread_local bool serving_in_memory = false;

// A Stream over a request held in memory: reads come from `in`, writes are
// collected in out().
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(const std::string& in) : in_(in) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    size_t n = std::min(size, in_.size() - pos_);
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    out_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 0;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = "127.0.0.1";
    port = 0;
  }
  socket_t socket() const override { return INVALID_SOCKET; }
  const std::string& out() const { return out_; }

 private:
  const std::string& in_;
  size_t pos_ = 0;
  std::string out_;
};

// The dashboard's pages and scripts (not under /api/): they carry no data, so
// they need no token; the page logs in through the API itself.
void SendDashboardFile(httplib::Response& res, const std::string& name, const std::string& dir) {
  auto file = LoadDashboardFile(name, dir);
  if (!file.ok()) return SendError(res, file.status());
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  if (absl::EndsWith(name, ".html")) {
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                   "frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
    res.set_header("X-Frame-Options", "DENY");
  }
  res.set_content(file->body, file->content_type);
}

}  // namespace

class RestServer::Server : public httplib::Server {
 public:
  std::string ServeRaw(const std::string& request) {
    MemoryStream stream(request);
    bool closed = false;
    struct InMemory {
      InMemory() { serving_in_memory = true; }
      ~InMemory() { serving_in_memory = false; }
    } in_memory;
    process_request(stream, /*close_connection=*/true, closed, nullptr);
    return stream.out();
  }
  // One request from a RestListener connection. httplib ends a chunked
  // response (NDJSON streams, tar downloads) at once while its own listening
  // socket is invalid; this server never listens (the listener does), so a
  // placeholder stands for it. Safe because fd 0 is never used as a socket
  // here: only httplib's listen() (never called) reads svr_sock_ for I/O, and
  // stop() closes it only while listen() runs (is_running()); nothing calls
  // server_->stop() anyway (RestServer::Stop stops the listener). The assert
  // keeps it so.
  bool ServeStream(httplib::Stream& stream, bool close_connection, bool& connection_closed) {
    assert(!is_running() && "this httplib::Server must never listen: svr_sock_ holds a placeholder");
    svr_sock_ = 0;
    return process_request(stream, close_connection, connection_closed, nullptr);
  }
};

namespace {
// Another method on /healthz or /livez (health.h): 405, its body never read.
bool AnswerHealthMethodNotAllowed(const httplib::Request& req, httplib::Response& res) {
  if (!IsHealthPathWithOtherMethod(req.method, req.path)) return false;
  res.set_header("Connection", "close");
  res.set_header("Allow", "GET, HEAD");
  SendError(res, absl::InvalidArgumentError(req.path + " answers GET and HEAD only"));
  res.status = 405;
  return true;
}
}  // namespace

RestServer::RestServer(MasterCore* core, AuthCore* auth)
    : handlers_(std::make_unique<ApiHandlers>(core, auth)),
      dispatcher_(std::make_unique<RestDispatcher>(handlers_.get(), AllRestRoutes())),
      health_(std::make_unique<HealthCheck>(
          core != nullptr ? AllProbes({CoreHealthProbe(core), StoreHealthProbe(core->store())}) : nullptr)),
      liveness_(std::make_unique<HealthCheck>(core != nullptr ? CoreHealthProbe(core) : nullptr)),
      server_(std::make_unique<Server>()) {
  Routes(*server_);
}

const std::vector<RestServer::Route>& RestServer::routes() const { return dispatcher_->routes(); }

void RestServer::set_max_request_bytes(int64_t bytes) {
  max_request_bytes_ = bytes;
  server_->set_payload_max_length(static_cast<size_t>(bytes));
}

absl::Status RestServer::EnableTls(const std::string& cert_file, const std::string& key_file) {
  if (absl::Status st = RestListener::CheckTls(cert_file, key_file); !st.ok()) return st;
  // The listener serves HTTPS (its own OpenSSL sessions, the same routes
  // through server_); tls_server_ only marks the port as HTTPS and never
  // listens.
  tls_server_ = std::make_unique<httplib::SSLServer>(cert_file.c_str(), key_file.c_str());
  tls_cert_file_ = cert_file;
  tls_key_file_ = key_file;
  return absl::OkStatus();
}

std::string RestServer::ServeRawForTesting(const std::string& request) { return server_->ServeRaw(request); }

RestServer::~RestServer() { Stop(); }

void RestServer::Stop() {
  if (listener_) listener_->Stop();
}

absl::StatusOr<int> RestServer::Start(const std::string& host, int port) {
  RestListenerOptions options = listener_options_;
  options.max_body_bytes = max_request_bytes_;
  options.tls_cert_file = tls_cert_file_;
  options.tls_key_file = tls_key_file_;
  // The Keep-Alive header httplib writes states the listener's bounds.
  server_->set_keep_alive_timeout(static_cast<time_t>(std::ceil(options.keep_alive_timeout_s)));
  server_->set_keep_alive_max_count(static_cast<size_t>(options.max_requests_per_connection));
  listener_ = std::make_unique<RestListener>(
      options, [this](httplib::Stream& stream, bool close_connection, bool& connection_closed) {
        return server_->ServeStream(stream, close_connection, connection_closed);
      });
  absl::StatusOr<int> bound = listener_->Bind(host, port);
  if (!bound.ok()) return bound;
  listener_->Start();
  return bound;
}

void RestServer::Routes(httplib::Server& s) {
  // The one authentication check of the REST API, before routing (and before
  // a body is read), so no /api/ path, known or not, is answered without the
  // credentials its RPC needs, and no anonymous body over the small limit is
  // read.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    bool has_user = false;
    if (BeginRequest(req, res)) return httplib::Server::HandlerResponse::Handled;
    if (AnswerHealthMethodNotAllowed(req, res)) return httplib::Server::HandlerResponse::Handled;
    if (absl::StartsWith(req.path, "/api/") && !IsHealthRequest(req.method, req.path)) {
      absl::Status st = dispatcher_->Authenticate(req);
      if (st.ok()) st = CheckCookieWrite(req, tls_server_ != nullptr);  // csrf.h: cookie writes same-origin only
      if (!st.ok()) {
        res.set_header("Connection", "close");  // its body is never read
        SendError(res, st);
        return httplib::Server::HandlerResponse::Handled;
      }
      has_user = !IsUnauthenticatedMethod(dispatcher_->RpcOf(req.method, req.path));
    }
    if (!has_user) {
      const std::string length = req.get_header_value("Content-Length");
      uint64_t n = 0;
      const bool too_long = !length.empty() && (!absl::SimpleAtoi(length, &n) ||
                                                n > static_cast<uint64_t>(kMaxUnauthenticatedBodyBytes));
      if (too_long || req.has_header("Transfer-Encoding")) {
        res.set_header("Connection", "close");
        SendError(res, absl::ResourceExhaustedError(absl::StrCat(
                           "request body over ", kMaxUnauthenticatedBodyBytes, " bytes without a user token")));
        res.status = 413;
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_payload_max_length(static_cast<size_t>(max_request_bytes_));
  MetricsRoutes(s);
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    SendError(res, absl::InternalError(what));
  });

  // The health check (health.h): public and cheap, before the API's routes.
  s.Get(R"(/api/v1/health|/healthz|/livez)", [this](const httplib::Request& req, httplib::Response& res) {
    HealthReply reply = HealthAnswer(req.path == kLivezPath ? liveness_->Check() : health_->Check());
    res.status = reply.status;
    res.set_header("Cache-Control", "no-store");
    res.set_content(reply.body, "application/json");
  });

  // Every other /api/ request goes to the dispatcher's route table.
  const std::string api = "/api/.*";
  auto serve = [this](const httplib::Request& req, httplib::Response& res) {
    dispatcher_->Serve(req, res, serving_in_memory);
  };
  // A request with a body reads it here, whatever Content-Type it declares:
  // `curl -d` and Python's urllib declare form encoding for JSON bodies, and
  // httplib's own reading refuses such a body over 8 KiB with an empty 413.
  // The body is JSON for every route; the size limit stays
  // --max-request-mib (the error handler below explains a 413).
  auto serve_body = [this](const httplib::Request& req, httplib::Response& res,
                           const httplib::ContentReader& read) {
    if (req.is_multipart_form_data()) {
      res.set_header("Connection", "close");
      SendError(res, absl::InvalidArgumentError("Content-Type: multipart/form-data is not accepted; send JSON"));
      res.status = 415;
      return;
    }
    httplib::Request with_body = req;
    if (!read([&](const char* data, size_t n) {
          with_body.body.append(data, n);
          return true;
        })) {
      return;  // httplib answers (413 over the limit, 400 on a broken stream)
    }
    dispatcher_->Serve(with_body, res, serving_in_memory);
  };
  s.Get(api, serve);
  s.Post(api, serve);
  s.Patch(api, serve);
  s.Put(api, serve);
  s.Delete(api, serve);
  s.Post(api, serve_body);
  s.Patch(api, serve_body);
  s.Put(api, serve_body);
  s.Delete(api, serve_body);

  // The web dashboard: GET / (and /index.html, /dashboard) is its page,
  // GET /dashboard/<file> its scripts and styles; one path component only.
  s.Get(R"(/|/index\.html|/dashboard/?)", [this](const httplib::Request&, httplib::Response& res) {
    SendDashboardFile(res, "index.html", dashboard_dir_);
  });
  s.Get(R"(/dashboard/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    SendDashboardFile(res, req.matches[1], dashboard_dir_);
  });

  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      SendError(res, absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path)));
    } else if (res.status == 413 && res.body.empty()) {
      SendError(res, absl::ResourceExhaustedError(absl::StrCat("request body over ", max_request_bytes_,
                                                               " bytes (the master's --max-message-mib)")));
      res.status = 413;
    } else if (res.status >= 400 && res.body.empty()) {
      // httplib's own refusals before any route (a POST, PUT or PATCH without
      // Content-Length, a malformed request line, ...): a JSON body too.
      const int status = res.status;
      SendError(res, absl::InvalidArgumentError(absl::StrCat(
                         "HTTP ", status, ": the request could not be read before any route (", req.method, " ",
                         req.path, "); send a JSON body with a Content-Length, \"{}\" when there is nothing to send")));
      res.status = status;
    }
  });
}

}  // namespace det::master
