#include "master/service/grpc_services.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include <grpcpp/alarm.h>

#include "absl/strings/str_cat.h"
#include "master/service/preview_search.h"
#include "master/service/request_auth.h"

namespace det::master {
namespace {

std::string Metadata(const grpc::ServerContextBase* ctx, const std::string& key) {
  auto it = ctx->client_metadata().find(key);
  if (it == ctx->client_metadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::string AllocationToken(const grpc::ServerContextBase* ctx) { return Metadata(ctx, kAllocationTokenKey); }

std::string BearerToken(const grpc::ServerContextBase* ctx) { return UserToken(Metadata(ctx, kAuthorizationKey), ""); }

absl::StatusOr<apiv1::User> AuthenticateCall(AuthCore& auth, const grpc::ServerContextBase* ctx) {
  return AuthenticateUser(auth, Metadata(ctx, kAuthorizationKey), Metadata(ctx, "cookie"));
}

template <typename T, typename Resp>
grpc::Status Reply(absl::StatusOr<T> result, Resp* out) {
  if (!result.ok()) return ToGrpc(result.status());
  *out = *std::move(result);
  return grpc::Status::OK;
}

grpc::Status Unimplemented(const char* method) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, absl::StrCat(method, " is not implemented by this master"));
}

// A reactor that finishes at once with `status` (streaming calls rejected
// before they start).
template <typename Base>
class FinishedReactor final : public Base {
 public:
  explicit FinishedReactor(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// Time left until the call's deadline (a huge value when it has none).
std::chrono::milliseconds UntilDeadline(const grpc::CallbackServerContext* ctx) {
  auto left = ctx->deadline() - std::chrono::system_clock::now();
  return std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(left));
}

// Streams a trial's logs (see ApiService::TrialLogs in the proto): one batch
// in flight at a time; an idle followed trial is polled every 200 ms on an
// Alarm, so no thread waits.
class TrialLogsReactor final : public grpc::ServerWriteReactor<apiv1::TrialLogsResponse> {
 public:
  TrialLogsReactor(MasterCore* core, grpc::CallbackServerContext* ctx, const apiv1::TrialLogsRequest& req)
      : core_(core), ctx_(ctx), req_(req), after_(req.after_id()), skip_(req.offset()) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return End(grpc::Status::OK);  // the client went away
    Next();
  }
  void OnCancel() override {
    bool armed;
    {
      std::lock_guard<std::mutex> l(mu_);
      cancelled_ = true;
      armed = alarm_used_;
    }
    // Outside mu_: a cancelled alarm may run its callback (Next) inline.
    if (armed) alarm_.Cancel();
  }
  void OnDone() override { delete this; }

 private:
  // Sends the next batch, or waits, or finishes. Only one of these is ever
  // pending, so no lock is needed.
  void Next() {
    while (true) {
      if (ctx_->IsCancelled()) return End(grpc::Status::CANCELLED);
      // Read "ended" before the logs so the last lines are never missed.
      auto ended = core_->TrialEnded(req_.trial_id());
      if (!ended.ok()) return End(ToGrpc(ended.status()));
      auto logs = core_->GetTrialLogs(req_.trial_id(), after_, kBatch);
      if (!logs.ok()) return End(ToGrpc(logs.status()));
      batch_.Clear();
      bool limit_reached = false;
      for (auto& log : *logs) {
        after_ = log.id();
        if (skip_ > 0) {
          --skip_;
          continue;
        }
        if (req_.limit() > 0 && sent_ >= req_.limit()) {
          limit_reached = true;
          break;
        }
        *batch_.add_logs() = std::move(log);
        ++sent_;
      }
      if (batch_.logs_size() > 0) {
        // After this write, a reached limit ends the stream.
        if (limit_reached) {
          StartWriteAndFinish(&batch_, grpc::WriteOptions(), grpc::Status::OK);
          return;
        }
        StartWrite(&batch_);
        return;
      }
      if (limit_reached) return End(grpc::Status::OK);
      if (static_cast<int64_t>(logs->size()) == kBatch) continue;
      if (!req_.follow() || *ended) return End(grpc::Status::OK);
      {
        std::lock_guard<std::mutex> l(mu_);
        if (!cancelled_) {
          alarm_.Set(std::chrono::system_clock::now() + std::chrono::milliseconds(200), [this](bool) { Next(); });
          alarm_used_ = true;
          return;
        }
      }
      // Cancelled before the alarm could be armed (OnCancel had nothing to
      // cancel).
      return End(grpc::Status::CANCELLED);
    }
  }
  void End(grpc::Status status) { Finish(std::move(status)); }

  static constexpr int64_t kBatch = 1000;
  MasterCore* const core_;
  grpc::CallbackServerContext* const ctx_;
  const apiv1::TrialLogsRequest req_;
  int64_t after_;
  int64_t skip_;
  int64_t sent_ = 0;
  apiv1::TrialLogsResponse batch_;
  grpc::Alarm alarm_;
  std::mutex mu_;
  bool cancelled_ = false;    // guarded by mu_
  bool alarm_used_ = false;   // guarded by mu_; Cancel() only an alarm once Set
};

}  // namespace

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// ---- det.api.v1.Determined

template <typename Body>
grpc::ServerUnaryReactor* ApiService::Authed(grpc::CallbackServerContext* ctx, Body&& body) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto user = AuthenticateCall(*auth_, ctx);
  reactor->Finish(user.ok() ? body(*user) : ToGrpc(user.status()));
  return reactor;
}

#define DET_API_UNIMPLEMENTED(M)                                                                          \
  grpc::ServerUnaryReactor* ApiService::M(grpc::CallbackServerContext* ctx, const apiv1::M##Request*,    \
                                          apiv1::M##Response*) {                                        \
    return Authed(ctx, [](const apiv1::User&) { return Unimplemented(#M); });                          \
  }

DET_API_UNIMPLEMENTED(ArchiveExperiment)
DET_API_UNIMPLEMENTED(UnarchiveExperiment)
DET_API_UNIMPLEMENTED(DeleteExperiment)
DET_API_UNIMPLEMENTED(GetExperimentValidationHistory)
DET_API_UNIMPLEMENTED(PauseTrial)
DET_API_UNIMPLEMENTED(ActivateTrial)
DET_API_UNIMPLEMENTED(DeleteCheckpoints)
DET_API_UNIMPLEMENTED(GetAgent)
DET_API_UNIMPLEMENTED(EnableAgent)
DET_API_UNIMPLEMENTED(DisableAgent)
DET_API_UNIMPLEMENTED(EnableSlot)
DET_API_UNIMPLEMENTED(DisableSlot)
DET_API_UNIMPLEMENTED(GetResourcePools)
DET_API_UNIMPLEMENTED(GetJobQueue)
DET_API_UNIMPLEMENTED(UpdateJob)
#undef DET_API_UNIMPLEMENTED

grpc::ServerUnaryReactor* ApiService::GetMaster(grpc::CallbackServerContext* ctx, const apiv1::GetMasterRequest*,
                                                apiv1::GetMasterResponse* resp) {
  // Needs no token (kUnauthenticatedMethods).
  *resp = core_->GetMaster();
  resp->set_auth_required(true);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* ApiService::Login(grpc::CallbackServerContext* ctx, const apiv1::LoginRequest* req,
                                            apiv1::LoginResponse* resp) {
  // Needs no token (kUnauthenticatedMethods).
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(Reply(auth_->Login(req->username(), req->password()), resp));
  return reactor;
}

grpc::ServerUnaryReactor* ApiService::Logout(grpc::CallbackServerContext* ctx, const apiv1::LogoutRequest*,
                                             apiv1::LogoutResponse*) {
  return Authed(ctx, [&](const apiv1::User&) { return ToGrpc(auth_->Logout(BearerToken(ctx))); });
}

grpc::ServerUnaryReactor* ApiService::GetMe(grpc::CallbackServerContext* ctx, const apiv1::GetMeRequest*,
                                            apiv1::GetMeResponse* resp) {
  return Authed(ctx, [&](const apiv1::User& user) {
    *resp->mutable_user() = user;
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* ApiService::GetUsers(grpc::CallbackServerContext* ctx, const apiv1::GetUsersRequest* req,
                                               apiv1::GetUsersResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) { return Reply(auth_->GetUsers(*req), resp); });
}

grpc::ServerUnaryReactor* ApiService::PostUser(grpc::CallbackServerContext* ctx, const apiv1::PostUserRequest* req,
                                               apiv1::PostUserResponse* resp) {
  return Authed(ctx,
                [&](const apiv1::User& user) { return Reply(auth_->PostUser(user, *req), resp->mutable_user()); });
}

grpc::ServerUnaryReactor* ApiService::PatchUser(grpc::CallbackServerContext* ctx, const apiv1::PatchUserRequest* req,
                                                apiv1::PatchUserResponse* resp) {
  return Authed(ctx, [&](const apiv1::User& user) {
    return Reply(auth_->PatchUser(user, BearerToken(ctx), *req), resp->mutable_user());
  });
}

grpc::ServerReadReactor<apiv1::UploadArtifactRequest>* ApiService::UploadArtifact(grpc::CallbackServerContext* ctx,
                                                                                  apiv1::UploadArtifactResponse*) {
  auto user = AuthenticateCall(*auth_, ctx);
  return new FinishedReactor<grpc::ServerReadReactor<apiv1::UploadArtifactRequest>>(
      user.ok() ? Unimplemented("UploadArtifact") : ToGrpc(user.status()));
}

grpc::ServerUnaryReactor* ApiService::PreviewSearch(grpc::CallbackServerContext* ctx,
                                                    const apiv1::PreviewSearchRequest* req,
                                                    apiv1::PreviewSearchResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) { return Reply(PreviewSearchFor(*req), resp); });
}

grpc::ServerUnaryReactor* ApiService::CreateExperiment(grpc::CallbackServerContext* ctx,
                                                       const apiv1::CreateExperimentRequest* req,
                                                       apiv1::CreateExperimentResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) { return Reply(core_->CreateExperiment(*req), resp); });
}

grpc::ServerUnaryReactor* ApiService::GetExperiments(grpc::CallbackServerContext* ctx,
                                                     const apiv1::GetExperimentsRequest* req,
                                                     apiv1::GetExperimentsResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) { return Reply(core_->GetExperiments(*req), resp); });
}

grpc::ServerUnaryReactor* ApiService::GetExperiment(grpc::CallbackServerContext* ctx,
                                                    const apiv1::GetExperimentRequest* req,
                                                    apiv1::GetExperimentResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) {
    return Reply(core_->GetExperiment(req->experiment_id()), resp->mutable_experiment());
  });
}

grpc::ServerUnaryReactor* ApiService::ActivateExperiment(grpc::CallbackServerContext* ctx,
                                                         const apiv1::ActivateExperimentRequest* req,
                                                         apiv1::ActivateExperimentResponse*) {
  return Authed(ctx, [&](const apiv1::User&) { return ToGrpc(core_->ActivateExperiment(req->experiment_id())); });
}

grpc::ServerUnaryReactor* ApiService::PauseExperiment(grpc::CallbackServerContext* ctx,
                                                      const apiv1::PauseExperimentRequest* req,
                                                      apiv1::PauseExperimentResponse*) {
  return Authed(ctx, [&](const apiv1::User&) { return ToGrpc(core_->PauseExperiment(req->experiment_id())); });
}

grpc::ServerUnaryReactor* ApiService::CancelExperiment(grpc::CallbackServerContext* ctx,
                                                       const apiv1::CancelExperimentRequest* req,
                                                       apiv1::CancelExperimentResponse*) {
  return Authed(ctx, [&](const apiv1::User&) { return ToGrpc(core_->CancelExperiment(req->experiment_id())); });
}

grpc::ServerUnaryReactor* ApiService::KillExperiment(grpc::CallbackServerContext* ctx,
                                                     const apiv1::KillExperimentRequest* req,
                                                     apiv1::KillExperimentResponse*) {
  return Authed(ctx, [&](const apiv1::User&) { return ToGrpc(core_->KillExperiment(req->experiment_id())); });
}

grpc::ServerUnaryReactor* ApiService::PatchExperiment(grpc::CallbackServerContext* ctx,
                                                      const apiv1::PatchExperimentRequest* req,
                                                      apiv1::PatchExperimentResponse* resp) {
  return Authed(ctx,
                [&](const apiv1::User&) { return Reply(core_->PatchExperiment(*req), resp->mutable_experiment()); });
}

grpc::ServerUnaryReactor* ApiService::GetExperimentTrials(grpc::CallbackServerContext* ctx,
                                                          const apiv1::GetExperimentTrialsRequest* req,
                                                          apiv1::GetExperimentTrialsResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) { return Reply(core_->GetExperimentTrials(*req), resp); });
}

grpc::ServerUnaryReactor* ApiService::GetExperimentCheckpoints(grpc::CallbackServerContext* ctx,
                                                               const apiv1::GetExperimentCheckpointsRequest* req,
                                                               apiv1::GetExperimentCheckpointsResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) {
    auto result = core_->GetCheckpoints(req->experiment_id(), std::nullopt);
    if (!result.ok()) return ToGrpc(result.status());
    for (auto& c : *result) *resp->add_checkpoints() = std::move(c);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* ApiService::GetTrial(grpc::CallbackServerContext* ctx, const apiv1::GetTrialRequest* req,
                                               apiv1::GetTrialResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) { return Reply(core_->GetTrial(req->trial_id()), resp->mutable_trial()); });
}

grpc::ServerUnaryReactor* ApiService::KillTrial(grpc::CallbackServerContext* ctx, const apiv1::KillTrialRequest* req,
                                                apiv1::KillTrialResponse*) {
  return Authed(ctx, [&](const apiv1::User&) { return ToGrpc(core_->KillTrial(req->trial_id())); });
}

grpc::ServerUnaryReactor* ApiService::GetTrialMetrics(grpc::CallbackServerContext* ctx,
                                                      const apiv1::GetTrialMetricsRequest* req,
                                                      apiv1::GetTrialMetricsResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) { return Reply(core_->GetTrialMetrics(*req), resp); });
}

grpc::ServerWriteReactor<apiv1::StreamTrialMetricsResponse>* ApiService::StreamTrialMetrics(
    grpc::CallbackServerContext* ctx, const apiv1::StreamTrialMetricsRequest*) {
  auto user = AuthenticateCall(*auth_, ctx);
  return new FinishedReactor<grpc::ServerWriteReactor<apiv1::StreamTrialMetricsResponse>>(
      user.ok() ? Unimplemented("StreamTrialMetrics") : ToGrpc(user.status()));
}

grpc::ServerWriteReactor<apiv1::TrialLogsResponse>* ApiService::TrialLogs(grpc::CallbackServerContext* ctx,
                                                                          const apiv1::TrialLogsRequest* req) {
  auto user = AuthenticateCall(*auth_, ctx);
  if (!user.ok()) return new FinishedReactor<grpc::ServerWriteReactor<apiv1::TrialLogsResponse>>(ToGrpc(user.status()));
  return new TrialLogsReactor(core_, ctx, *req);
}

grpc::ServerUnaryReactor* ApiService::GetTrialCheckpoints(grpc::CallbackServerContext* ctx,
                                                          const apiv1::GetTrialCheckpointsRequest* req,
                                                          apiv1::GetTrialCheckpointsResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) {
    auto result = core_->GetCheckpoints(std::nullopt, req->trial_id());
    if (!result.ok()) return ToGrpc(result.status());
    for (auto& c : *result) *resp->add_checkpoints() = std::move(c);
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* ApiService::GetCheckpoint(grpc::CallbackServerContext* ctx,
                                                    const apiv1::GetCheckpointRequest* req,
                                                    apiv1::GetCheckpointResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) {
    return Reply(core_->GetCheckpoint(req->checkpoint_uuid()), resp->mutable_checkpoint());
  });
}

grpc::ServerWriteReactor<apiv1::DownloadCheckpointResponse>* ApiService::DownloadCheckpoint(
    grpc::CallbackServerContext* ctx, const apiv1::DownloadCheckpointRequest*) {
  auto user = AuthenticateCall(*auth_, ctx);
  return new FinishedReactor<grpc::ServerWriteReactor<apiv1::DownloadCheckpointResponse>>(
      user.ok() ? Unimplemented("DownloadCheckpoint") : ToGrpc(user.status()));
}

grpc::ServerUnaryReactor* ApiService::GetAgents(grpc::CallbackServerContext* ctx, const apiv1::GetAgentsRequest*,
                                                apiv1::GetAgentsResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) {
    *resp = core_->GetAgents();
    return grpc::Status::OK;
  });
}

grpc::ServerUnaryReactor* ApiService::GetSlots(grpc::CallbackServerContext* ctx, const apiv1::GetSlotsRequest*,
                                               apiv1::GetSlotsResponse* resp) {
  return Authed(ctx, [&](const apiv1::User&) {
    *resp = core_->GetSlots();
    return grpc::Status::OK;
  });
}

// ---- det.agent.v1.AgentService

namespace {

absl::Status CheckAgentSecret(const AuthCore& auth, const grpc::ServerContext* ctx, const std::string& field = "") {
  std::string presented = Metadata(ctx, kClusterSecretKey);
  if (presented.empty()) presented = field;
  return auth.CheckClusterSecret(presented);
}

}  // namespace

grpc::Status AgentServiceImpl::RegisterAgent(grpc::ServerContext* ctx, const agentv1::RegisterAgentRequest* req,
                                             agentv1::RegisterAgentResponse* resp) {
  absl::Status secret = CheckAgentSecret(*auth_, ctx, req->cluster_secret());
  if (!secret.ok()) return ToGrpc(secret);
  return Reply(core_->RegisterAgent(*req), resp);
}

grpc::Status AgentServiceImpl::Connect(grpc::ServerContext* ctx,
                                       grpc::ServerReaderWriter<agentv1::MasterMessage, agentv1::AgentMessage>* stream) {
  absl::Status secret = CheckAgentSecret(*auth_, ctx);
  if (!secret.ok()) return ToGrpc(secret);
  auto session = core_->AttachAgent(BearerToken(ctx));
  if (!session.ok()) return ToGrpc(session.status());
  std::shared_ptr<AgentSession> s = *session;
  // One thread writes queued commands while this one reads the agent.
  std::thread writer([&] {
    agentv1::MasterMessage msg;
    while (!s->closed() && !ctx->IsCancelled()) {
      if (s->Pop(&msg, std::chrono::milliseconds(200)) && !stream->Write(msg)) break;
    }
  });
  agentv1::AgentMessage in;
  while (stream->Read(&in)) core_->HandleAgentMessage(s->agent_id(), in);
  core_->DetachAgent(s);
  s->Close();
  writer.join();
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::FetchArtifact(grpc::ServerContext* ctx, const agentv1::FetchArtifactRequest* req,
                                             grpc::ServerWriter<agentv1::FetchArtifactResponse>* writer) {
  absl::Status secret = CheckAgentSecret(*auth_, ctx);
  if (!secret.ok()) return ToGrpc(secret);
  auto size = core_->artifacts().Size(req->sha256());
  if (!size.ok()) return ToGrpc(size.status());
  constexpr int64_t kChunk = 1 << 20;
  for (int64_t offset = req->offset(); offset < *size; offset += kChunk) {
    auto data = core_->artifacts().Read(req->sha256(), offset, kChunk);
    if (!data.ok()) return ToGrpc(data.status());
    agentv1::FetchArtifactResponse chunk;
    chunk.set_offset(offset);
    chunk.set_total_size(*size);
    chunk.set_data(*std::move(data));
    if (!writer->Write(chunk)) break;
  }
  return grpc::Status::OK;
}

// ---- LongPollPool

LongPollPool::~LongPollPool() { Shutdown(); }

void LongPollPool::Submit(std::function<void()> task) {
  std::unique_lock<std::mutex> l(mu_);
  if (stop_) {
    // No thread would run it: run it here (it sees stopping() and ends
    // within a slice) so that its call still finishes.
    l.unlock();
    task();
    return;
  }
  queue_.push_back(std::move(task));
  // Every queued task needs its own idle thread (a task may wait ~60 s).
  if (static_cast<int>(queue_.size()) > idle_ && static_cast<int>(threads_.size()) < kMaxThreads) {
    threads_.emplace_back([this] { Work(); });
  }
  cv_.notify_one();
}

void LongPollPool::Work() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    while (queue_.empty() && !stop_) {
      ++idle_;
      cv_.wait(l);
      --idle_;
    }
    if (queue_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    l.unlock();
    task();
    l.lock();
  }
}

void LongPollPool::Shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

bool LongPollPool::stopping() const {
  std::lock_guard<std::mutex> l(mu_);
  return stop_;
}

// ---- det.trial.v1.TrialService

template <typename Body>
grpc::ServerUnaryReactor* TrialServiceImpl::Authed(grpc::CallbackServerContext* ctx, Body&& body) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::string token = AllocationToken(ctx);
  absl::Status present = RequireAllocationToken(token);
  reactor->Finish(present.ok() ? body(token) : ToGrpc(present));
  return reactor;
}

grpc::ServerUnaryReactor* TrialServiceImpl::GetTrialContext(grpc::CallbackServerContext* ctx,
                                                            const trialv1::GetTrialContextRequest* req,
                                                            trialv1::GetTrialContextResponse* resp) {
  return Authed(ctx, [&](const std::string& token) { return Reply(core_->GetTrialContext(*req, token), resp); });
}

grpc::ServerUnaryReactor* TrialServiceImpl::LongPoll(
    grpc::CallbackServerContext* ctx, std::chrono::milliseconds max_wait,
    std::function<PollStep(const std::string& token, std::chrono::milliseconds slice)> step) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::string token = AllocationToken(ctx);
  absl::Status present = RequireAllocationToken(token);
  if (!present.ok()) {
    reactor->Finish(ToGrpc(present));
    return reactor;
  }
  pool_.Submit([this, ctx, reactor, token, max_wait, step = std::move(step)] {
    auto end = std::chrono::steady_clock::now() + std::min(max_wait, UntilDeadline(ctx));
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      auto slice = std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(1000));
      PollStep r = step(token, slice);
      if (r.done || left <= slice || ctx->IsCancelled() || pool_.stopping()) return reactor->Finish(r.status);
    }
  });
  return reactor;
}

grpc::ServerUnaryReactor* TrialServiceImpl::AllocationRendezvous(grpc::CallbackServerContext* ctx,
                                                                 const trialv1::AllocationRendezvousRequest* req,
                                                                 trialv1::AllocationRendezvousResponse* resp) {
  // Waits for every rank (a repeated call by the same rank only records its
  // address again), for at most 10 minutes or the client's deadline.
  return LongPoll(ctx, std::chrono::minutes(10), [this, req, resp](const std::string& token, auto slice) {
    auto r = core_->AllocationRendezvous(*req, token, slice);
    if (r.ok()) {
      *resp = *std::move(r);
      return PollStep{grpc::Status::OK, true};
    }
    return PollStep{ToGrpc(r.status()), r.status().code() != absl::StatusCode::kDeadlineExceeded};
  });
}

grpc::ServerUnaryReactor* TrialServiceImpl::GetNextOperation(grpc::CallbackServerContext* ctx,
                                                             const trialv1::GetNextOperationRequest* req,
                                                             trialv1::GetNextOperationResponse* resp) {
  return Authed(ctx, [&](const std::string& token) { return Reply(core_->GetNextOperation(*req, token), resp); });
}

grpc::ServerUnaryReactor* TrialServiceImpl::ReportTrainingMetrics(grpc::CallbackServerContext* ctx,
                                                                  const trialv1::ReportTrainingMetricsRequest* req,
                                                                  trialv1::ReportTrainingMetricsResponse*) {
  return Authed(ctx, [&](const std::string& token) { return ToGrpc(core_->ReportTrainingMetrics(*req, token)); });
}

grpc::ServerUnaryReactor* TrialServiceImpl::ReportValidationMetrics(
    grpc::CallbackServerContext* ctx, const trialv1::ReportValidationMetricsRequest* req,
    trialv1::ReportValidationMetricsResponse*) {
  return Authed(ctx, [&](const std::string& token) { return ToGrpc(core_->ReportValidationMetrics(*req, token)); });
}

grpc::ServerUnaryReactor* TrialServiceImpl::ReportCheckpoint(grpc::CallbackServerContext* ctx,
                                                             const trialv1::ReportCheckpointRequest* req,
                                                             trialv1::ReportCheckpointResponse*) {
  return Authed(ctx, [&](const std::string& token) { return ToGrpc(core_->ReportCheckpoint(*req, token)); });
}

grpc::ServerUnaryReactor* TrialServiceImpl::CompleteSearcherOperation(
    grpc::CallbackServerContext* ctx, const trialv1::CompleteSearcherOperationRequest* req,
    trialv1::CompleteSearcherOperationResponse*) {
  return Authed(ctx,
                [&](const std::string& token) { return ToGrpc(core_->CompleteSearcherOperation(*req, token)); });
}

grpc::ServerUnaryReactor* TrialServiceImpl::ReportProgress(grpc::CallbackServerContext* ctx,
                                                           const trialv1::ReportProgressRequest* req,
                                                           trialv1::ReportProgressResponse*) {
  // Progress is derived from the reported metrics; the call is only checked.
  return Authed(ctx,
                [&](const std::string& token) { return ToGrpc(core_->AuthorizeAllocation(req->allocation_id(), token)); });
}

grpc::ServerUnaryReactor* TrialServiceImpl::ShouldPreempt(grpc::CallbackServerContext* ctx,
                                                          const trialv1::ShouldPreemptRequest* req,
                                                          trialv1::ShouldPreemptResponse* resp) {
  // Waits up to the request's timeout_ms (at most 60 s) for a preemption.
  auto max_wait = std::chrono::milliseconds(std::clamp(req->timeout_ms(), 0, 60000));
  return LongPoll(ctx, max_wait, [this, req, resp](const std::string& token, auto slice) {
    trialv1::ShouldPreemptRequest one = *req;
    one.set_timeout_ms(static_cast<int32_t>(slice.count()));
    auto r = core_->ShouldPreempt(one, token);
    if (!r.ok()) return PollStep{ToGrpc(r.status()), true};
    resp->set_preempt(*r);
    return PollStep{grpc::Status::OK, *r};
  });
}

grpc::ServerUnaryReactor* TrialServiceImpl::AckPreemption(grpc::CallbackServerContext* ctx,
                                                          const trialv1::AckPreemptionRequest* req,
                                                          trialv1::AckPreemptionResponse*) {
  return Authed(ctx, [&](const std::string& token) { return ToGrpc(core_->AckPreemption(*req, token)); });
}

grpc::ServerUnaryReactor* TrialServiceImpl::ReportEarlyExit(grpc::CallbackServerContext* ctx,
                                                            const trialv1::ReportEarlyExitRequest* req,
                                                            trialv1::ReportEarlyExitResponse*) {
  return Authed(ctx, [&](const std::string& token) { return ToGrpc(core_->ReportEarlyExit(*req, token)); });
}

grpc::ServerUnaryReactor* TrialServiceImpl::ReportTrialLogs(grpc::CallbackServerContext* ctx,
                                                            const trialv1::ReportTrialLogsRequest* req,
                                                            trialv1::ReportTrialLogsResponse*) {
  return Authed(ctx, [&](const std::string& token) { return ToGrpc(core_->ReportTrialLogs(*req, token)); });
}

}  // namespace det::master
