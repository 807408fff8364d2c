#include "master/http/rest_server.h"

#include <httplib.h>

#include <algorithm>
#include <cstring>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/proto_json.h"
#include "master/http/dashboard_assets.h"
#include "master/service/request_auth.h"

namespace det::master {
namespace {

int HttpCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists: return 409;
    case absl::StatusCode::kFailedPrecondition: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

void SendError(httplib::Response& res, const absl::Status& status) {
  nlohmann::json body = {{"code", static_cast<int>(status.code())},
                         {"error", absl::StatusCodeToString(status.code())},
                         {"message", std::string(status.message())}};
  res.status = HttpCode(status.code());
  // Messages may quote a client's bytes (e.g. a bad id from a %ff path):
  // replace invalid UTF-8 rather than throw from dump().
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

void SendMessage(httplib::Response& res, const google::protobuf::Message& m) {
  res.status = 200;
  res.set_content(MessageToJson(m), "application/json");
}

template <typename T>
void Send(httplib::Response& res, const absl::StatusOr<T>& result) {
  if (!result.ok()) return SendError(res, result.status());
  SendMessage(res, *result);
}

void SendStatus(httplib::Response& res, const absl::Status& st) {
  if (!st.ok()) return SendError(res, st);
  res.status = 200;
  res.set_content("{}", "application/json");
}

absl::StatusOr<int64_t> Id(const httplib::Request& req, int index, const char* what) {
  int64_t id = 0;
  if (!absl::SimpleAtoi(std::string(req.matches[index]), &id)) {
    return absl::InvalidArgumentError(absl::StrCat("bad ", what, " id '", std::string(req.matches[index]), "'"));
  }
  return id;
}

bool BoolParam(const httplib::Request& req, const char* name) {
  if (!req.has_param(name)) return false;
  std::string v = req.get_param_value(name);
  return v == "1" || v == "true";
}

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
    process_request(stream, /*close_connection=*/true, closed, nullptr);
    return stream.out();
  }
};

RestServer::RestServer(MasterCore* core, AuthCore* auth)
    : core_(core), auth_(auth), server_(std::make_unique<Server>()) {
  Routes();
}

void RestServer::set_max_request_bytes(int64_t bytes) { server_->set_payload_max_length(static_cast<size_t>(bytes)); }

std::string RestServer::ServeRawForTesting(const std::string& request) { return server_->ServeRaw(request); }

RestServer::~RestServer() { Stop(); }

void RestServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<int> RestServer::Start(const std::string& host, int port) {
  int bound = port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) return absl::UnavailableError(absl::StrCat("cannot bind the REST API to ", host, ":", port));
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return bound;
}

void RestServer::Routes() {
  httplib::Server& s = *server_;
  // Every API route is registered through `api`, so routes_ lists them all.
  auto api = [this, &s](const char* method, const std::string& pattern, httplib::Server::Handler handler,
                        bool authenticated = true) {
    routes_.push_back(Route{method, pattern, authenticated});
    std::string m = method;
    if (m == "GET") s.Get(pattern, std::move(handler));
    else if (m == "POST") s.Post(pattern, std::move(handler));
    else if (m == "PATCH") s.Patch(pattern, std::move(handler));
    else if (m == "PUT") s.Put(pattern, std::move(handler));
    else s.Delete(pattern, std::move(handler));
  };
  // The one authentication check of the REST API (the gRPC services make the
  // same one through request_auth.h): before routing, so no /api/ path, known
  // or not, is answered without a valid token unless it is public.
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!absl::StartsWith(req.path, "/api/")) return httplib::Server::HandlerResponse::Unhandled;
    for (const Route& r : routes_) {
      if (!r.authenticated && r.method == req.method && std::regex_match(req.path, std::regex(r.pattern))) {
        return httplib::Server::HandlerResponse::Unhandled;
      }
    }
    absl::Status st = absl::UnauthenticatedError("authentication is not configured");
    if (auth_ != nullptr) {
      st = AuthenticateUser(*auth_, req.get_header_value("Authorization"), req.get_header_value("Cookie")).status();
    }
    if (st.ok()) return httplib::Server::HandlerResponse::Unhandled;
    SendError(res, st);
    res.set_header("WWW-Authenticate", "Bearer");
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_payload_max_length(300u << 20);
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

  // Public (no token): the master's version, and logging in.
  api(
      "GET", "/api/v1/master",
      [this](const httplib::Request&, httplib::Response& res) {
        apiv1::GetMasterResponse m = core_->GetMaster();
        m.set_auth_required(true);
        SendMessage(res, m);
      },
      /*authenticated=*/false);

  // LoginRequest as JSON; answers LoginResponse and sets the det_token cookie
  // (HttpOnly, SameSite=Strict) for the dashboard.
  api(
      "POST", "/api/v1/auth/login",
      [this](const httplib::Request& req, httplib::Response& res) {
        if (auth_ == nullptr) return SendError(res, absl::UnauthenticatedError("authentication is not configured"));
        apiv1::LoginRequest r;
        absl::Status st = JsonToMessage(req.body.empty() ? "{}" : req.body, &r);
        if (!st.ok()) return SendError(res, st);
        auto login = auth_->Login(r.username(), r.password());
        if (!login.ok()) return SendError(res, login.status());
        res.set_header("Set-Cookie", absl::StrCat(kTokenCookie, "=", login->token(),
                                                  "; Path=/; HttpOnly; SameSite=Strict"));
        SendMessage(res, *login);
      },
      /*authenticated=*/false);

  // Authenticated from here on (the pre-routing handler has checked the
  // token; handlers that need the user look it up again, from the cache).
  auto caller = [this](const httplib::Request& req) {
    return AuthenticateUser(*auth_, req.get_header_value("Authorization"), req.get_header_value("Cookie"));
  };
  auto token = [](const httplib::Request& req) {
    return UserToken(req.get_header_value("Authorization"), req.get_header_value("Cookie"));
  };

  api("POST", "/api/v1/auth/logout", [this, token](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Set-Cookie", absl::StrCat(kTokenCookie, "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"));
    SendStatus(res, auth_->Logout(token(req)));
  });

  api("GET", "/api/v1/me", [caller](const httplib::Request& req, httplib::Response& res) {
    auto user = caller(req);
    if (!user.ok()) return SendError(res, user.status());
    apiv1::GetMeResponse r;
    *r.mutable_user() = *user;
    SendMessage(res, r);
  });

  api("GET", "/api/v1/users", [this](const httplib::Request& req, httplib::Response& res) {
    apiv1::GetUsersRequest r;
    int64_t v = 0;
    if (req.has_param("limit") && absl::SimpleAtoi(req.get_param_value("limit"), &v)) r.set_limit(static_cast<int32_t>(v));
    if (req.has_param("offset") && absl::SimpleAtoi(req.get_param_value("offset"), &v)) r.set_offset(static_cast<int32_t>(v));
    Send(res, auth_->GetUsers(r));
  });

  // PostUserRequest as JSON. Admin only.
  api("POST", "/api/v1/users", [this, caller](const httplib::Request& req, httplib::Response& res) {
    auto user = caller(req);
    if (!user.ok()) return SendError(res, user.status());
    apiv1::PostUserRequest r;
    absl::Status st = JsonToMessage(req.body.empty() ? "{}" : req.body, &r);
    if (!st.ok()) return SendError(res, st);
    auto created = auth_->PostUser(*user, r);
    if (!created.ok()) return SendError(res, created.status());
    apiv1::PostUserResponse out;
    *out.mutable_user() = *created;
    SendMessage(res, out);
  });

  // PatchUserRequest as JSON; the id comes from the path.
  api("PATCH", R"(/api/v1/users/([^/]+))", [this, caller, token](const httplib::Request& req, httplib::Response& res) {
    auto user = caller(req);
    if (!user.ok()) return SendError(res, user.status());
    auto id = Id(req, 1, "user");
    if (!id.ok()) return SendError(res, id.status());
    apiv1::PatchUserRequest r;
    absl::Status st = JsonToMessage(req.body.empty() ? "{}" : req.body, &r);
    if (!st.ok()) return SendError(res, st);
    r.set_user_id(static_cast<int32_t>(*id));
    auto patched = auth_->PatchUser(*user, token(req), r);
    if (!patched.ok()) return SendError(res, patched.status());
    apiv1::PatchUserResponse out;
    *out.mutable_user() = *patched;
    SendMessage(res, out);
  });

  // The API's routes: [{"method", "pattern", "authenticated"}].
  api("GET", "/api/v1/routes", [this](const httplib::Request&, httplib::Response& res) {
    nlohmann::json out = nlohmann::json::array();
    for (const Route& r : routes_) {
      out.push_back({{"method", r.method}, {"pattern", r.pattern}, {"authenticated", r.authenticated}});
    }
    res.status = 200;
    res.set_content(nlohmann::json{{"routes", out}}.dump(), "application/json");
  });

  api("GET", "/api/v1/experiments", [this](const httplib::Request& req, httplib::Response& res) {
    apiv1::GetExperimentsRequest r;
    if (req.has_param("name")) r.set_name(req.get_param_value("name"));
    int64_t v = 0;
    if (req.has_param("limit") && absl::SimpleAtoi(req.get_param_value("limit"), &v)) r.set_limit(static_cast<int32_t>(v));
    if (req.has_param("offset") && absl::SimpleAtoi(req.get_param_value("offset"), &v)) r.set_offset(static_cast<int32_t>(v));
    Send(res, core_->GetExperiments(r));
  });

  api("POST", "/api/v1/experiments", [this](const httplib::Request& req, httplib::Response& res) {
    apiv1::CreateExperimentRequest r;
    absl::Status st = JsonToMessage(req.body, &r);
    if (!st.ok()) return SendError(res, st);
    Send(res, core_->CreateExperiment(r));
  });

  api("GET", R"(/api/v1/experiments/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "experiment");
    if (!id.ok()) return SendError(res, id.status());
    auto e = core_->GetExperiment(*id);
    if (!e.ok()) return SendError(res, e.status());
    apiv1::GetExperimentResponse r;
    *r.mutable_experiment() = *e;
    SendMessage(res, r);
  });

  // PatchExperimentRequest as JSON; the id comes from the path.
  api("PATCH", R"(/api/v1/experiments/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "experiment");
    if (!id.ok()) return SendError(res, id.status());
    apiv1::PatchExperimentRequest r;
    absl::Status st = JsonToMessage(req.body.empty() ? "{}" : req.body, &r);
    if (!st.ok()) return SendError(res, st);
    r.set_experiment_id(static_cast<int32_t>(*id));
    auto e = core_->PatchExperiment(r);
    if (!e.ok()) return SendError(res, e.status());
    apiv1::PatchExperimentResponse out;
    *out.mutable_experiment() = *e;
    SendMessage(res, out);
  });

  api("GET", R"(/api/v1/experiments/([^/]+)/trials)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "experiment");
    if (!id.ok()) return SendError(res, id.status());
    apiv1::GetExperimentTrialsRequest r;
    r.set_experiment_id(static_cast<int32_t>(*id));
    Send(res, core_->GetExperimentTrials(r));
  });

  api("GET", R"(/api/v1/experiments/([^/]+)/checkpoints)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "experiment");
    if (!id.ok()) return SendError(res, id.status());
    auto cks = core_->GetCheckpoints(*id, std::nullopt);
    if (!cks.ok()) return SendError(res, cks.status());
    apiv1::GetExperimentCheckpointsResponse r;
    for (auto& c : *cks) *r.add_checkpoints() = std::move(c);
    SendMessage(res, r);
  });

  api("POST", R"(/api/v1/experiments/([^/]+)/(activate|pause|cancel|kill))",
         [this](const httplib::Request& req, httplib::Response& res) {
           auto id = Id(req, 1, "experiment");
           if (!id.ok()) return SendError(res, id.status());
           std::string action = req.matches[2];
           if (action == "activate") return SendStatus(res, core_->ActivateExperiment(*id));
           if (action == "pause") return SendStatus(res, core_->PauseExperiment(*id));
           if (action == "cancel") return SendStatus(res, core_->CancelExperiment(*id));
           return SendStatus(res, core_->KillExperiment(*id));
         });

  api("GET", R"(/api/v1/trials/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "trial");
    if (!id.ok()) return SendError(res, id.status());
    auto t = core_->GetTrial(*id);
    if (!t.ok()) return SendError(res, t.status());
    apiv1::GetTrialResponse r;
    *r.mutable_trial() = *t;
    SendMessage(res, r);
  });

  api("POST", R"(/api/v1/trials/([^/]+)/kill)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "trial");
    if (!id.ok()) return SendError(res, id.status());
    SendStatus(res, core_->KillTrial(*id));
  });

  api("GET", R"(/api/v1/trials/([^/]+)/metrics)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "trial");
    if (!id.ok()) return SendError(res, id.status());
    apiv1::GetTrialMetricsRequest r;
    r.set_trial_id(static_cast<int32_t>(*id));
    if (req.has_param("group")) r.set_group(req.get_param_value("group"));
    r.set_include_archived(BoolParam(req, "include_archived"));
    Send(res, core_->GetTrialMetrics(r));
  });

  api("GET", R"(/api/v1/trials/([^/]+)/checkpoints)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "trial");
    if (!id.ok()) return SendError(res, id.status());
    auto cks = core_->GetCheckpoints(std::nullopt, *id);
    if (!cks.ok()) return SendError(res, cks.status());
    apiv1::GetTrialCheckpointsResponse r;
    for (auto& c : *cks) *r.add_checkpoints() = std::move(c);
    SendMessage(res, r);
  });

  api("GET", R"(/api/v1/trials/([^/]+)/logs)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "trial");
    if (!id.ok()) return SendError(res, id.status());
    int64_t after = 0;
    if (req.has_param("after_id")) absl::SimpleAtoi(req.get_param_value("after_id"), &after);
    auto logs = core_->GetTrialLogs(*id, after, 0);
    if (!logs.ok()) return SendError(res, logs.status());
    apiv1::TrialLogsResponse r;
    for (auto& l : *logs) *r.add_logs() = std::move(l);
    SendMessage(res, r);
  });

  api("GET", R"(/api/v1/checkpoints/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto c = core_->GetCheckpoint(req.matches[1]);
    if (!c.ok()) return SendError(res, c.status());
    apiv1::GetCheckpointResponse r;
    *r.mutable_checkpoint() = *c;
    SendMessage(res, r);
  });

  api("GET", "/api/v1/agents", [this](const httplib::Request&, httplib::Response& res) { SendMessage(res, core_->GetAgents()); });
  api("GET", "/api/v1/slots", [this](const httplib::Request&, httplib::Response& res) { SendMessage(res, core_->GetSlots()); });

  // The web dashboard: GET / (and /index.html, /dashboard) is its page,
  // GET /dashboard/<file> its scripts and styles; one path component only.
  s.Get(R"(/|/index\.html|/dashboard/?)", [this](const httplib::Request&, httplib::Response& res) {
    SendDashboardFile(res, "index.html", dashboard_dir_);
  });
  s.Get(R"(/dashboard/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    SendDashboardFile(res, req.matches[1], dashboard_dir_);
  });

  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      SendError(res, absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path)));
    }
  });
}

}  // namespace det::master
