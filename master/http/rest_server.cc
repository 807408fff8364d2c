#include "master/http/rest_server.h"

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/proto_json.h"

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
  res.set_content(body.dump(), "application/json");
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

}  // namespace

RestServer::RestServer(MasterCore* core) : core_(core), server_(std::make_unique<httplib::Server>()) { Routes(); }

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

  s.Get("/api/v1/master", [this](const httplib::Request&, httplib::Response& res) { SendMessage(res, core_->GetMaster()); });

  s.Get("/api/v1/experiments", [this](const httplib::Request& req, httplib::Response& res) {
    apiv1::GetExperimentsRequest r;
    if (req.has_param("name")) r.set_name(req.get_param_value("name"));
    int64_t v = 0;
    if (req.has_param("limit") && absl::SimpleAtoi(req.get_param_value("limit"), &v)) r.set_limit(static_cast<int32_t>(v));
    if (req.has_param("offset") && absl::SimpleAtoi(req.get_param_value("offset"), &v)) r.set_offset(static_cast<int32_t>(v));
    Send(res, core_->GetExperiments(r));
  });

  s.Post("/api/v1/experiments", [this](const httplib::Request& req, httplib::Response& res) {
    apiv1::CreateExperimentRequest r;
    absl::Status st = JsonToMessage(req.body, &r);
    if (!st.ok()) return SendError(res, st);
    Send(res, core_->CreateExperiment(r));
  });

  s.Get(R"(/api/v1/experiments/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "experiment");
    if (!id.ok()) return SendError(res, id.status());
    auto e = core_->GetExperiment(*id);
    if (!e.ok()) return SendError(res, e.status());
    apiv1::GetExperimentResponse r;
    *r.mutable_experiment() = *e;
    SendMessage(res, r);
  });

  // PatchExperimentRequest as JSON; the id comes from the path.
  s.Patch(R"(/api/v1/experiments/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
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

  s.Get(R"(/api/v1/experiments/([^/]+)/trials)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "experiment");
    if (!id.ok()) return SendError(res, id.status());
    apiv1::GetExperimentTrialsRequest r;
    r.set_experiment_id(static_cast<int32_t>(*id));
    Send(res, core_->GetExperimentTrials(r));
  });

  s.Get(R"(/api/v1/experiments/([^/]+)/checkpoints)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "experiment");
    if (!id.ok()) return SendError(res, id.status());
    auto cks = core_->GetCheckpoints(*id, std::nullopt);
    if (!cks.ok()) return SendError(res, cks.status());
    apiv1::GetExperimentCheckpointsResponse r;
    for (auto& c : *cks) *r.add_checkpoints() = std::move(c);
    SendMessage(res, r);
  });

  s.Post(R"(/api/v1/experiments/([^/]+)/(activate|pause|cancel|kill))",
         [this](const httplib::Request& req, httplib::Response& res) {
           auto id = Id(req, 1, "experiment");
           if (!id.ok()) return SendError(res, id.status());
           std::string action = req.matches[2];
           if (action == "activate") return SendStatus(res, core_->ActivateExperiment(*id));
           if (action == "pause") return SendStatus(res, core_->PauseExperiment(*id));
           if (action == "cancel") return SendStatus(res, core_->CancelExperiment(*id));
           return SendStatus(res, core_->KillExperiment(*id));
         });

  s.Get(R"(/api/v1/trials/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "trial");
    if (!id.ok()) return SendError(res, id.status());
    auto t = core_->GetTrial(*id);
    if (!t.ok()) return SendError(res, t.status());
    apiv1::GetTrialResponse r;
    *r.mutable_trial() = *t;
    SendMessage(res, r);
  });

  s.Post(R"(/api/v1/trials/([^/]+)/kill)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "trial");
    if (!id.ok()) return SendError(res, id.status());
    SendStatus(res, core_->KillTrial(*id));
  });

  s.Get(R"(/api/v1/trials/([^/]+)/metrics)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "trial");
    if (!id.ok()) return SendError(res, id.status());
    apiv1::GetTrialMetricsRequest r;
    r.set_trial_id(static_cast<int32_t>(*id));
    if (req.has_param("group")) r.set_group(req.get_param_value("group"));
    r.set_include_archived(BoolParam(req, "include_archived"));
    Send(res, core_->GetTrialMetrics(r));
  });

  s.Get(R"(/api/v1/trials/([^/]+)/checkpoints)", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = Id(req, 1, "trial");
    if (!id.ok()) return SendError(res, id.status());
    auto cks = core_->GetCheckpoints(std::nullopt, *id);
    if (!cks.ok()) return SendError(res, cks.status());
    apiv1::GetTrialCheckpointsResponse r;
    for (auto& c : *cks) *r.add_checkpoints() = std::move(c);
    SendMessage(res, r);
  });

  s.Get(R"(/api/v1/trials/([^/]+)/logs)", [this](const httplib::Request& req, httplib::Response& res) {
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

  s.Get(R"(/api/v1/checkpoints/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    auto c = core_->GetCheckpoint(req.matches[1]);
    if (!c.ok()) return SendError(res, c.status());
    apiv1::GetCheckpointResponse r;
    *r.mutable_checkpoint() = *c;
    SendMessage(res, r);
  });

  s.Get("/api/v1/agents", [this](const httplib::Request&, httplib::Response& res) { SendMessage(res, core_->GetAgents()); });
  s.Get("/api/v1/slots", [this](const httplib::Request&, httplib::Response& res) { SendMessage(res, core_->GetSlots()); });

  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 && res.body.empty()) {
      SendError(res, absl::NotFoundError(absl::StrCat("no route ", req.method, " ", req.path)));
    }
  });
}

}  // namespace det::master
