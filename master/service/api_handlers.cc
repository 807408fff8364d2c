#include "master/service/api_handlers.h"

#include <chrono>
#include <thread>

#include <google/protobuf/generated_message_reflection.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "det/api/v1/api.grpc.pb.h"
#include "master/service/checkpoint_download.h"
#include "master/service/database_backup.h"
#include "master/service/preview_search.h"
#include "master/service/request_auth.h"
#include "master/service/stream_cursors.h"
#include "master/service/trial_log_cursor.h"

namespace det::master {
namespace pb = google::protobuf;
namespace {

// Writes what `cursor` (stream_cursors.h) yields until it is done, the client
// goes away or `cancelled`; a following cursor is asked again every 200 ms.
template <typename Cursor, typename Write>
absl::Status DrainCursor(Cursor& cursor, const Write& write, const std::function<bool()>& cancelled) {
  while (!cancelled()) {
    DET_ASSIGN_OR_RETURN(auto step, cursor.Next());
    if (step.has_batch && !write(step.batch)) return absl::OkStatus();
    if (step.done) return absl::OkStatus();
    if (step.wait) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return absl::CancelledError("the client went away");
}

}  // namespace

ApiHandlers::ApiHandlers(MasterCore* core, AuthCore* auth) : core_(core), auth_(auth) {
  // ---- master
  Bind<apiv1::GetMasterRequest, apiv1::GetMasterResponse>("GetMaster", [this](const ApiCaller&, const auto& req) {
    auto resp = core_->GetMaster(req);
    if (resp.ok()) resp->set_auth_required(true);
    return resp;
  });
  // ---- auth (AuthCore)
  Bind<apiv1::LoginRequest, apiv1::LoginResponse>(
      "Login", [this](const ApiCaller& caller, const auto& req) { return auth_->Login(req.username(), req.password(), caller.peer_address); });
  Bind<apiv1::LogoutRequest, apiv1::LogoutResponse>(
      "Logout", [this](const ApiCaller& caller, const auto&) -> absl::StatusOr<apiv1::LogoutResponse> {
        DET_RETURN_IF_ERROR(auth_->Logout(caller.token));
        return apiv1::LogoutResponse();
      });
  Bind<apiv1::GetMeRequest, apiv1::GetMeResponse>("GetMe", [](const ApiCaller& caller, const auto&) {
    apiv1::GetMeResponse resp;
    *resp.mutable_user() = caller.user;
    return absl::StatusOr<apiv1::GetMeResponse>(resp);
  });
  Bind<apiv1::GetUsersRequest, apiv1::GetUsersResponse>(
      "GetUsers", [this](const ApiCaller&, const auto& req) { return auth_->GetUsers(req); });
  Bind<apiv1::PostUserRequest, apiv1::PostUserResponse>(
      "PostUser", [this](const ApiCaller& caller, const auto& req) -> absl::StatusOr<apiv1::PostUserResponse> {
        apiv1::PostUserResponse resp;
        DET_ASSIGN_OR_RETURN(*resp.mutable_user(), auth_->PostUser(caller.user, req));
        return resp;
      });
  Bind<apiv1::PatchUserRequest, apiv1::PatchUserResponse>(
      "PatchUser", [this](const ApiCaller& caller, const auto& req) -> absl::StatusOr<apiv1::PatchUserResponse> {
        apiv1::PatchUserResponse resp;
        DET_ASSIGN_OR_RETURN(*resp.mutable_user(), auth_->PatchUser(caller.user, caller.token, req));
        return resp;
      });
  // ---- experiments (MasterCore)
  Bind<apiv1::PreviewSearchRequest, apiv1::PreviewSearchResponse>(
      "PreviewSearch", [](const ApiCaller&, const auto& req) { return PreviewSearchFor(req); });
  Bind<apiv1::CreateExperimentRequest, apiv1::CreateExperimentResponse>(
      "CreateExperiment",
      [this](const ApiCaller& caller, const auto& req) { return core_->CreateExperiment(req, caller.user); });
  BindCore("GetExperiments", &MasterCore::GetExperiments);
  BindCore("GetExperiment", &MasterCore::GetExperiment);
  BindCore("ActivateExperiment", &MasterCore::ActivateExperiment);
  BindCore("PauseExperiment", &MasterCore::PauseExperiment);
  BindCore("CancelExperiment", &MasterCore::CancelExperiment);
  BindCore("KillExperiment", &MasterCore::KillExperiment);
  BindCore("PatchExperiment", &MasterCore::PatchExperiment);
  BindCore("GetExperimentTrials", &MasterCore::GetExperimentTrials);
  BindCore("GetExperimentCheckpoints", &MasterCore::GetExperimentCheckpoints);
  BindCore("ArchiveExperiment", &MasterCore::ArchiveExperiment);
  BindCore("UnarchiveExperiment", &MasterCore::UnarchiveExperiment);
  BindCore("DeleteExperiment", &MasterCore::DeleteExperiment);
  // ---- trials and checkpoints
  BindCore("GetTrial", &MasterCore::GetTrial);
  BindCore("KillTrial", &MasterCore::KillTrial);
  BindCore("GetTrialMetrics", &MasterCore::GetTrialMetrics);
  BindCore("GetTrialCheckpoints", &MasterCore::GetTrialCheckpoints);
  BindCore("GetCheckpoint", &MasterCore::GetCheckpoint);
  // ---- forks, continue, one trial's pause (experiment_fork.cc, trial_pause.cc)
  BindCore("ContinueExperiment", &MasterCore::ContinueExperiment);
  BindCore("PauseTrial", &MasterCore::PauseTrial);
  BindCore("ActivateTrial", &MasterCore::ActivateTrial);
  BindCore("DeleteCheckpoints", &MasterCore::DeleteCheckpoints);
  BindCore("PatchCheckpoint", &MasterCore::PatchCheckpoint);
  BindStreaming<apiv1::DownloadCheckpointRequest, apiv1::DownloadCheckpointResponse>(
      "DownloadCheckpoint", [this](const ApiCaller&, const auto& req, const auto& write, const auto& cancelled) {
        return StreamCheckpoint(core_, req, write, cancelled);
      });
  BindStreaming<apiv1::TrialLogsRequest, apiv1::TrialLogsResponse>(
      "TrialLogs", [this](const ApiCaller&, const auto& req, const auto& write, const auto& cancelled) {
        TrialLogCursor cursor(core_, req);
        while (!cancelled()) {
          DET_ASSIGN_OR_RETURN(TrialLogCursor::Step step, cursor.Next());
          if (step.batch.logs_size() > 0 && !write(step.batch)) return absl::OkStatus();
          if (step.done) return absl::OkStatus();
          if (step.wait) std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        return absl::CancelledError("the client went away");
      });
  // ---- metrics and logs (issue 15; streams: master/service/stream_cursors.h)
  BindCore("GetExperimentValidationHistory", &MasterCore::GetExperimentValidationHistory);
  BindStreaming<apiv1::StreamTrialMetricsRequest, apiv1::StreamTrialMetricsResponse>(
      "StreamTrialMetrics", [this](const ApiCaller& caller, const auto& req, const auto& write, const auto& cancelled) {
        DET_ASSIGN_OR_RETURN(auto lease, MetricStreamLease::Acquire(caller.user.username()));
        TrialMetricCursor cursor(core_, req);
        return DrainCursor(cursor, write, cancelled);
      });
  BindAdminStreams();  // MasterLogs, BackupDatabase
  // ---- cluster
  BindCore("GetAgents", &MasterCore::GetAgents);
  BindCore("GetSlots", &MasterCore::GetSlots);
  // ---- resource pools, agent and slot control (issue 16; core/agent_control.cc)
  BindCore("GetAgent", &MasterCore::GetAgent);
  BindCore("EnableAgent", &MasterCore::EnableAgent);
  BindCore("DisableAgent", &MasterCore::DisableAgent);
  BindCore("EnableSlot", &MasterCore::EnableSlot);
  BindCore("DisableSlot", &MasterCore::DisableSlot);
  BindCore("GetResourcePools", &MasterCore::GetResourcePools);
  // ---- the job queue (job_queue.cc)
  BindCore("GetJobQueue", &MasterCore::GetJobQueue);
  BindCore("UpdateJob", &MasterCore::UpdateJob);
  // ---- workspaces and projects (core/workspaces.cc): the caller owns what it
  // creates; the core lets only the owner or an admin archive
  BindCore("PostWorkspace", &MasterCore::PostWorkspace);
  BindCore("GetWorkspaces", &MasterCore::GetWorkspaces);
  BindCore("GetWorkspace", &MasterCore::GetWorkspace);
  BindCore("GetWorkspaceProjects", &MasterCore::GetWorkspaceProjects);
  BindCore("PostProject", &MasterCore::PostProject);
  BindCore("GetProject", &MasterCore::GetProject);
  BindCore("ArchiveWorkspace", &MasterCore::ArchiveWorkspace);
  BindCore("UnarchiveWorkspace", &MasterCore::UnarchiveWorkspace);
  BindCore("ArchiveProject", &MasterCore::ArchiveProject);
  BindCore("UnarchiveProject", &MasterCore::UnarchiveProject);
}

void ApiHandlers::BindAdminStreams() {
  BindStreaming<apiv1::MasterLogsRequest, apiv1::MasterLogsResponse>(
      "MasterLogs", [](const ApiCaller&, const auto& req, const auto& write, const auto& cancelled) {
        MasterLogCursor cursor(req);
        return DrainCursor(cursor, write, cancelled);
      });
  // The database's snapshot (database_backup.h; the gRPC transport runs
  // BackupDatabaseReactor instead).
  BindStreaming<apiv1::BackupDatabaseRequest, apiv1::BackupDatabaseResponse>(
      "BackupDatabase", [this](const ApiCaller&, const auto&, const auto& write, const auto& cancelled) {
        return StreamDatabaseBackup(core_, write, cancelled);
      });
}

const pb::ServiceDescriptor* ApiHandlers::Service() {
  // api.proto defines only the service: make sure its file is in the pool.
  pb::internal::AssignDescriptors(&descriptor_table_det_2fapi_2fv1_2fapi_2eproto);
  return pb::DescriptorPool::generated_pool()->FindServiceByName(apiv1::Determined::service_full_name());
}

absl::StatusOr<const pb::MethodDescriptor*> ApiHandlers::FindMethod(absl::string_view method) {
  const pb::MethodDescriptor* m = Service()->FindMethodByName(std::string(method));
  if (m == nullptr) return absl::NotFoundError(absl::StrCat("no RPC '", method, "' in det.api.v1.Determined"));
  return m;
}

absl::StatusOr<ApiCaller> ApiHandlers::Authenticate(absl::string_view method, absl::string_view authorization,
                                                    absl::string_view cookie) const {
  ApiCaller caller;
  if (IsUnauthenticatedMethod(method)) return caller;
  if (auth_ == nullptr) return absl::UnauthenticatedError("authentication is not configured");
  caller.token = UserToken(authorization, cookie);
  DET_ASSIGN_OR_RETURN(caller.user, auth_->Authenticate(caller.token));
  return caller;
}

absl::Status ApiHandlers::CallUnary(absl::string_view method, const ApiCaller& caller, const Message& request,
                                    Message* response) const {
  DET_ASSIGN_OR_RETURN(const pb::MethodDescriptor* m, FindMethod(method));
  if (m->client_streaming() || m->server_streaming()) {
    return absl::InvalidArgumentError(absl::StrCat(method, " is a streaming RPC"));
  }
  if (request.GetDescriptor() != m->input_type() || response->GetDescriptor() != m->output_type()) {
    return absl::InvalidArgumentError(absl::StrCat(method, ": request or response of the wrong type"));
  }
  DET_RETURN_IF_ERROR(Authorize(method, caller, request));
  auto it = unary_.find(method);
  if (it == unary_.end()) return absl::UnimplementedError(absl::StrCat(method, " is not implemented by this master"));
  return it->second(caller, request, response);
}

absl::Status ApiHandlers::CallServerStreaming(absl::string_view method, const ApiCaller& caller,
                                              const Message& request, const Writer& write,
                                              const std::function<bool()>& cancelled) const {
  DET_ASSIGN_OR_RETURN(const pb::MethodDescriptor* m, FindMethod(method));
  if (m->client_streaming() || !m->server_streaming()) {
    return absl::InvalidArgumentError(absl::StrCat(method, " is not a server-streaming RPC"));
  }
  if (request.GetDescriptor() != m->input_type()) {
    return absl::InvalidArgumentError(absl::StrCat(method, ": request of the wrong type"));
  }
  DET_RETURN_IF_ERROR(Authorize(method, caller, request));
  auto it = streaming_.find(method);
  if (it == streaming_.end()) {
    return absl::UnimplementedError(absl::StrCat(method, " is not implemented by this master"));
  }
  return it->second(caller, request, write, cancelled);
}

absl::Status ApiHandlers::Authorize(absl::string_view method, const ApiCaller& caller,
                                   const Message& request) const {
  const MethodAccess access = AccessOf(method);
  switch (access.access) {
    case Access::kPublic:
    case Access::kUser:
    case Access::kSelfOrAdmin:  // AuthCore checks which fields need an admin
      return absl::OkStatus();
    case Access::kAdmin:
      if (caller.user.admin() && caller.user.active()) return absl::OkStatus();
      return absl::PermissionDeniedError(
          absl::StrCat(method, " needs an admin; user '", caller.user.username(), "' is not one"));
    case Access::kExperimentOwner: {
      DET_ASSIGN_OR_RETURN(std::vector<int64_t> ids, OwnedExperiments(access, request));
      for (int64_t id : ids) DET_RETURN_IF_ERROR(core_->AuthorizeExperimentChange(caller.user, id));
      return absl::OkStatus();
    }
    case Access::kUnlisted:
      break;
  }
  return absl::PermissionDeniedError(absl::StrCat(method, " has no access rule; refused"));
}

absl::StatusOr<std::vector<int64_t>> ApiHandlers::OwnedExperiments(const MethodAccess& access,
                                                                   const Message& request) const {
  const pb::FieldDescriptor* f = request.GetDescriptor()->FindFieldByName(access.field);
  if (f == nullptr) return absl::InternalError(absl::StrCat("no field '", access.field, "' in the request"));
  const pb::Reflection* r = request.GetReflection();
  std::vector<int64_t> ids;
  switch (access.owned_by) {
    case OwnedBy::kExperimentId:
      if (int64_t id = r->GetInt64(request, f); id > 0) ids.push_back(id);
      break;
    case OwnedBy::kTrialId:
      if (int64_t id = r->GetInt64(request, f); id > 0) {
        DET_ASSIGN_OR_RETURN(int64_t exp, core_->ExperimentOfTrial(id));
        ids.push_back(exp);
      }
      break;
    case OwnedBy::kCheckpointUuids: {
      if (!f->is_repeated()) {  // one uuid (PatchCheckpoint)
        DET_ASSIGN_OR_RETURN(int64_t exp, core_->ExperimentOfCheckpoint(r->GetString(request, f)));
        ids.push_back(exp);
        break;
      }
      constexpr int kMaxUuids = 1000;
      const int n = r->FieldSize(request, f);
      if (n > kMaxUuids) {
        return absl::InvalidArgumentError(absl::StrCat(access.field, ": ", n, " uuids; at most ", kMaxUuids));
      }
      for (int i = 0; i < n; ++i) {
        DET_ASSIGN_OR_RETURN(int64_t exp, core_->ExperimentOfCheckpoint(r->GetRepeatedString(request, f, i)));
        ids.push_back(exp);
      }
      break;
    }
    case OwnedBy::kJobId: {
      DET_ASSIGN_OR_RETURN(int64_t exp, MasterCore::ExperimentOfJob(r->GetString(request, f)));
      ids.push_back(exp);
      break;
    }
    case OwnedBy::kNone:
      break;
  }
  return ids;
}

template <typename Req, typename Resp>
void ApiHandlers::Bind(const char* name, std::function<absl::StatusOr<Resp>(const ApiCaller&, const Req&)> fn) {
  // CallUnary has checked both messages' descriptors: the casts are exact.
  unary_[name] = [fn = std::move(fn)](const ApiCaller& caller, const Message& request, Message* response) {
    absl::StatusOr<Resp> r = fn(caller, static_cast<const Req&>(request));
    if (!r.ok()) return r.status();
    static_cast<Resp*>(response)->Swap(&*r);
    return absl::OkStatus();
  };
}

template <typename Req, typename Resp>
void ApiHandlers::BindCore(const char* name, absl::StatusOr<Resp> (MasterCore::*fn)(const Req&)) {
  Bind<Req, Resp>(name, [this, fn](const ApiCaller&, const Req& req) { return (core_->*fn)(req); });
}

template <typename Req, typename Resp>
void ApiHandlers::BindCore(const char* name,
                           absl::StatusOr<Resp> (MasterCore::*fn)(const Req&, const apiv1::User&)) {
  Bind<Req, Resp>(name, [this, fn](const ApiCaller& caller, const Req& req) { return (core_->*fn)(req, caller.user); });
}

template <typename Req, typename Resp>
void ApiHandlers::BindStreaming(
    const char* name,
    std::function<absl::Status(const ApiCaller&, const Req&, const std::function<bool(const Resp&)>&,
                               const std::function<bool()>&)>
        fn) {
  streaming_[name] = [fn = std::move(fn)](const ApiCaller& caller, const Message& request, const Writer& write,
                                          const std::function<bool()>& cancelled) {
    std::function<bool(const Resp&)> typed = [&write](const Resp& r) { return write(r); };
    return fn(caller, static_cast<const Req&>(request), typed, cancelled);
  };
}

}  // namespace det::master
