#include "master/service/grpc_services.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include <grpc/grpc_security_constants.h>
#include <grpcpp/alarm.h>
#include <grpcpp/security/auth_context.h>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "master/service/artifact_upload.h"
#include "master/service/polling_stream.h"
#include "master/service/stream_cursors.h"
#include "master/service/checkpoint_download.h"
#include "master/service/database_backup.h"
#include "master/service/request_auth.h"
#include "master/service/trial_log_cursor.h"

namespace det::master {
namespace {

using ::det::ToGrpcStatus;

std::string Metadata(const grpc::ServerContextBase* ctx, const std::string& key) {
  auto it = ctx->client_metadata().find(key);
  if (it == ctx->client_metadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::string AllocationToken(const grpc::ServerContextBase* ctx) { return Metadata(ctx, kAllocationTokenKey); }

std::string BearerToken(const grpc::ServerContextBase* ctx) { return UserToken(Metadata(ctx, kAuthorizationKey), ""); }

template <typename T, typename Resp>
grpc::Status Reply(absl::StatusOr<T> result, Resp* out) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *out = *std::move(result);
  return grpc::Status::OK;
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
      : ctx_(ctx), cursor_(core, req) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the client went away
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
  // pending, so no lock is needed around the cursor.
  void Next() {
    if (ctx_->IsCancelled()) return Finish(grpc::Status::CANCELLED);
    auto step = cursor_.Next();
    if (!step.ok()) return Finish(ToGrpcStatus(step.status()));
    if (step->batch.logs_size() > 0) {
      batch_ = std::move(step->batch);
      if (step->done) return StartWriteAndFinish(&batch_, grpc::WriteOptions(), grpc::Status::OK);
      return StartWrite(&batch_);
    }
    if (step->done) return Finish(grpc::Status::OK);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!cancelled_) {
        alarm_.Set(std::chrono::system_clock::now() + std::chrono::milliseconds(200), [this](bool) { Next(); });
        alarm_used_ = true;
        return;
      }
    }
    // Cancelled before the alarm could be armed (OnCancel had nothing to
    // cancel). Finished outside mu_: OnDone deletes this reactor.
    Finish(grpc::Status::CANCELLED);
  }

  grpc::CallbackServerContext* const ctx_;
  TrialLogCursor cursor_;
  apiv1::TrialLogsResponse batch_;
  grpc::Alarm alarm_;
  std::mutex mu_;
  bool cancelled_ = false;    // guarded by mu_
  bool alarm_used_ = false;   // guarded by mu_; Cancel() only an alarm once Set
};

}  // namespace

// ---- det.api.v1.Determined

absl::StatusOr<ApiCaller> ApiService::Caller(const grpc::CallbackServerContext* ctx, const char* method) const {
  auto caller = handlers_.Authenticate(method, Metadata(ctx, kAuthorizationKey), Metadata(ctx, "cookie"));
  if (caller.ok()) caller->peer_address = PeerAddress(ctx->peer());
  return caller;
}

grpc::ServerUnaryReactor* ApiService::Unary(grpc::CallbackServerContext* ctx, const char* method,
                                            const google::protobuf::Message& request,
                                            google::protobuf::Message* response) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  auto caller = Caller(ctx, method);
  reactor->Finish(ToGrpcStatus(caller.ok() ? handlers_.CallUnary(method, *caller, request, response) : caller.status()));
  return reactor;
}

#define DET_API_UNARY(M)                                                                                     \
  grpc::ServerUnaryReactor* ApiService::M(grpc::CallbackServerContext* ctx, const apiv1::M##Request* req,  \
                                          apiv1::M##Response* resp) {                                      \
    return Unary(ctx, #M, *req, resp);                                                                      \
  }

DET_API_UNARY(GetMaster)
DET_API_UNARY(Login)
DET_API_UNARY(Logout)
DET_API_UNARY(GetMe)
DET_API_UNARY(GetUsers)
DET_API_UNARY(PostUser)
DET_API_UNARY(PatchUser)
DET_API_UNARY(CreateExperiment)
DET_API_UNARY(GetExperiments)
DET_API_UNARY(GetExperiment)
DET_API_UNARY(PreviewSearch)
DET_API_UNARY(ActivateExperiment)
DET_API_UNARY(PauseExperiment)
DET_API_UNARY(CancelExperiment)
DET_API_UNARY(KillExperiment)
DET_API_UNARY(ArchiveExperiment)
DET_API_UNARY(UnarchiveExperiment)
DET_API_UNARY(DeleteExperiment)
DET_API_UNARY(PatchExperiment)
DET_API_UNARY(GetExperimentTrials)
DET_API_UNARY(GetExperimentCheckpoints)
DET_API_UNARY(GetExperimentValidationHistory)
DET_API_UNARY(GetTrial)
DET_API_UNARY(KillTrial)
DET_API_UNARY(PauseTrial)
DET_API_UNARY(ActivateTrial)
DET_API_UNARY(GetTrialMetrics)
DET_API_UNARY(GetTrialCheckpoints)
DET_API_UNARY(GetCheckpoint)
DET_API_UNARY(DeleteCheckpoints)
DET_API_UNARY(GetAgents)
DET_API_UNARY(GetAgent)
DET_API_UNARY(EnableAgent)
DET_API_UNARY(DisableAgent)
DET_API_UNARY(GetSlots)
DET_API_UNARY(EnableSlot)
DET_API_UNARY(DisableSlot)
DET_API_UNARY(GetResourcePools)
DET_API_UNARY(GetJobQueue)
DET_API_UNARY(UpdateJob)
DET_API_UNARY(ContinueExperiment)
DET_API_UNARY(PatchCheckpoint)
DET_API_UNARY(PostWorkspace)
DET_API_UNARY(GetWorkspaces)
DET_API_UNARY(GetWorkspace)
DET_API_UNARY(GetWorkspaceProjects)
DET_API_UNARY(PostProject)
DET_API_UNARY(GetProject)
DET_API_UNARY(ArchiveWorkspace)
DET_API_UNARY(UnarchiveWorkspace)
DET_API_UNARY(ArchiveProject)
DET_API_UNARY(UnarchiveProject)
#undef DET_API_UNARY

grpc::ServerReadReactor<apiv1::UploadArtifactRequest>* ApiService::UploadArtifact(
    grpc::CallbackServerContext* ctx, apiv1::UploadArtifactResponse* resp) {
  auto caller = Caller(ctx, "UploadArtifact");
  if (!caller.ok()) {
    return new FinishedReactor<grpc::ServerReadReactor<apiv1::UploadArtifactRequest>>(ToGrpcStatus(caller.status()));
  }
  return new UploadArtifactReactor(core_->mutable_artifacts(), core_->options().max_trial_so_bytes, resp);
}

grpc::ServerWriteReactor<apiv1::StreamTrialMetricsResponse>* ApiService::StreamTrialMetrics(
    grpc::CallbackServerContext* ctx, const apiv1::StreamTrialMetricsRequest* req) {
  using Refused = FinishedReactor<grpc::ServerWriteReactor<apiv1::StreamTrialMetricsResponse>>;
  auto caller = Caller(ctx, "StreamTrialMetrics");
  if (!caller.ok()) return new Refused(ToGrpcStatus(caller.status()));
  // At most MetricStreamLease::kMaxPerUser streams of one user at a time.
  auto lease = MetricStreamLease::Acquire(caller->user.username());
  if (!lease.ok()) return new Refused(ToGrpcStatus(lease.status()));
  auto cursor = std::make_shared<TrialMetricCursor>(core_, *req);
  return new PollingStreamReactor<apiv1::StreamTrialMetricsResponse>(
      ctx, [cursor] { return cursor->Next(); }, std::shared_ptr<MetricStreamLease>(std::move(*lease)));
}

grpc::ServerWriteReactor<apiv1::MasterLogsResponse>* ApiService::MasterLogs(grpc::CallbackServerContext* ctx,
                                                                            const apiv1::MasterLogsRequest* req) {
  auto caller = Caller(ctx, "MasterLogs");
  absl::Status allowed = caller.ok() ? handlers_.Authorize("MasterLogs", *caller, *req) : caller.status();
  if (!allowed.ok()) {
    return new FinishedReactor<grpc::ServerWriteReactor<apiv1::MasterLogsResponse>>(ToGrpcStatus(allowed));
  }
  auto cursor = std::make_shared<MasterLogCursor>(*req);
  return new PollingStreamReactor<apiv1::MasterLogsResponse>(ctx, [cursor] { return cursor->Next(); });
}

grpc::ServerWriteReactor<apiv1::BackupDatabaseResponse>* ApiService::BackupDatabase(
    grpc::CallbackServerContext* ctx, const apiv1::BackupDatabaseRequest* req) {
  auto caller = Caller(ctx, "BackupDatabase");
  absl::Status allowed = caller.ok() ? handlers_.Authorize("BackupDatabase", *caller, *req) : caller.status();
  if (!allowed.ok()) {
    return new FinishedReactor<grpc::ServerWriteReactor<apiv1::BackupDatabaseResponse>>(ToGrpcStatus(allowed));
  }
  return new BackupDatabaseReactor(core_, ctx);
}

grpc::ServerWriteReactor<apiv1::TrialLogsResponse>* ApiService::TrialLogs(grpc::CallbackServerContext* ctx,
                                                                          const apiv1::TrialLogsRequest* req) {
  auto caller = Caller(ctx, "TrialLogs");
  if (!caller.ok()) {
    return new FinishedReactor<grpc::ServerWriteReactor<apiv1::TrialLogsResponse>>(ToGrpcStatus(caller.status()));
  }
  return new TrialLogsReactor(core_, ctx, *req);
}

grpc::ServerWriteReactor<apiv1::DownloadCheckpointResponse>* ApiService::DownloadCheckpoint(
    grpc::CallbackServerContext* ctx, const apiv1::DownloadCheckpointRequest* req) {
  auto caller = Caller(ctx, "DownloadCheckpoint");
  if (!caller.ok()) {
    return new FinishedReactor<grpc::ServerWriteReactor<apiv1::DownloadCheckpointResponse>>(
        ToGrpcStatus(caller.status()));
  }
  return new DownloadCheckpointReactor(core_, *req);
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
  if (!secret.ok()) return ToGrpcStatus(secret);
  return Reply(core_->RegisterAgent(*req), resp);
}

grpc::Status AgentServiceImpl::Connect(grpc::ServerContext* ctx,
                                       grpc::ServerReaderWriter<agentv1::MasterMessage, agentv1::AgentMessage>* stream) {
  absl::Status secret = CheckAgentSecret(*auth_, ctx);
  if (!secret.ok()) return ToGrpcStatus(secret);
  auto session = core_->AttachAgent(BearerToken(ctx));
  if (!session.ok()) return ToGrpcStatus(session.status());
  std::shared_ptr<AgentSession> s = *session;
  // One thread writes queued commands while this one reads the agent.
  std::thread writer([&] {
    agentv1::MasterMessage msg;
    while (!s->closed() && !ctx->IsCancelled()) {
      if (s->Pop(&msg, std::chrono::milliseconds(200)) && !stream->Write(msg)) break;
    }
  });
  agentv1::AgentMessage in;
  // A session the master closed (the agent was lost, or connected again)
  // ends at the agent's next message (a heartbeat each interval): told
  // UNAUTHENTICATED, the agent registers again, reporting what it still
  // runs (which the master then kills if it gave it up).
  bool ended_by_master = false;
  while (stream->Read(&in)) {
    if ((ended_by_master = s->closed())) break;
    core_->HandleAgentMessage(s->agent_id(), in);
  }
  core_->DetachAgent(s);
  s->Close();
  writer.join();
  if (ended_by_master) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the master ended this agent session (the agent was lost, or connected again); register again");
  }
  return grpc::Status::OK;
}

grpc::Status AgentServiceImpl::FetchArtifact(grpc::ServerContext* ctx, const agentv1::FetchArtifactRequest* req,
                                             grpc::ServerWriter<agentv1::FetchArtifactResponse>* writer) {
  absl::Status secret = CheckAgentSecret(*auth_, ctx);
  if (!secret.ok()) return ToGrpcStatus(secret);
  // Another user's trial.so goes only to an agent that runs it.
  absl::Status placed = core_->AuthorizeArtifactFetch(BearerToken(ctx), req->sha256());
  if (!placed.ok()) return ToGrpcStatus(placed);
  auto size = core_->artifacts().Size(req->sha256());
  if (!size.ok()) return ToGrpcStatus(size.status());
  constexpr int64_t kChunk = 1 << 20;
  for (int64_t offset = req->offset(); offset < *size; offset += kChunk) {
    auto data = core_->artifacts().Read(req->sha256(), offset, kChunk);
    if (!data.ok()) return ToGrpcStatus(data.status());
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

bool LongPollPool::Submit(std::function<void()> task) {
  std::unique_lock<std::mutex> l(mu_);
  if (stop_) {
    // No thread would run it: run it here (it sees stopping() and ends
    // within a slice) so that its call still finishes.
    l.unlock();
    task();
    return true;
  }
  if (static_cast<int>(queue_.size()) - idle_ >= kMaxQueued) return false;
  queue_.push_back(std::move(task));
  // Every queued task needs its own idle thread (a task may wait ~60 s).
  if (static_cast<int>(queue_.size()) > idle_ && static_cast<int>(threads_.size()) < kMaxThreads) {
    threads_.emplace_back([this] { Work(); });
  }
  cv_.notify_one();
  return true;
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

template <typename Req, typename Resp>
grpc::ServerUnaryReactor* TrialServiceImpl::Unary(grpc::CallbackServerContext* ctx, const Req& request,
                                                  Resp* response,
                                                  absl::StatusOr<Resp> (MasterCore::*fn)(const Req&,
                                                                                         const std::string&)) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::string token = AllocationToken(ctx);
  absl::Status present = RequireAllocationToken(token);
  reactor->Finish(present.ok() ? Reply((core_->*fn)(request, token), response) : ToGrpcStatus(present));
  return reactor;
}

#define DET_TRIAL_UNARY(M)                                                                                    \
  grpc::ServerUnaryReactor* TrialServiceImpl::M(grpc::CallbackServerContext* ctx, const trialv1::M##Request* req, \
                                                trialv1::M##Response* resp) {                                 \
    return Unary(ctx, *req, resp, &MasterCore::M);                                                           \
  }

DET_TRIAL_UNARY(GetTrialContext)
DET_TRIAL_UNARY(GetNextOperation)
DET_TRIAL_UNARY(ReportValidationMetrics)
DET_TRIAL_UNARY(ReportMetrics)
DET_TRIAL_UNARY(ReportCheckpoint)
DET_TRIAL_UNARY(CompleteSearcherOperation)
DET_TRIAL_UNARY(ReportProgress)
DET_TRIAL_UNARY(AckPreemption)
DET_TRIAL_UNARY(ReportEarlyExit)
DET_TRIAL_UNARY(ReportTrialLogs)
#undef DET_TRIAL_UNARY

// The reply holds the S3 secret: only over TLS or to a peer on this host
// (CheckSecretChannel), checked after the token's presence.
grpc::ServerUnaryReactor* TrialServiceImpl::GetCheckpointStorageCredentials(
    grpc::CallbackServerContext* ctx, const trialv1::GetCheckpointStorageCredentialsRequest* req,
    trialv1::GetCheckpointStorageCredentialsResponse* resp) {
  bool tls = false;
  if (std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context()) {
    for (const grpc::string_ref& type : auth->FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME)) {
      tls = tls || type == GRPC_SSL_TRANSPORT_SECURITY_TYPE || type == GRPC_TLS_TRANSPORT_SECURITY_TYPE;
    }
  }
  absl::Status channel = RequireAllocationToken(AllocationToken(ctx));
  if (channel.ok()) channel = CheckSecretChannel(tls, ctx->peer());
  if (channel.ok()) return Unary(ctx, *req, resp, &MasterCore::GetCheckpointStorageCredentials);
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(channel));
  return reactor;
}

// Answered once the rows are committed, by the store's metric writer, which
// writes every trial's reports queued meanwhile in one transaction: the gRPC
// threads are not held while a group is written.
grpc::ServerUnaryReactor* TrialServiceImpl::ReportTrainingMetrics(grpc::CallbackServerContext* ctx,
                                                                  const trialv1::ReportTrainingMetricsRequest* req,
                                                                  trialv1::ReportTrainingMetricsResponse*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::string token = AllocationToken(ctx);
  absl::Status present = RequireAllocationToken(token);
  if (!present.ok()) {
    reactor->Finish(ToGrpcStatus(present));
    return reactor;
  }
  core_->ReportTrainingMetricsAsync(*req, token, [reactor](absl::Status s) {
    reactor->Finish(s.ok() ? grpc::Status::OK : ToGrpcStatus(s));
  });
  return reactor;
}

grpc::ServerUnaryReactor* TrialServiceImpl::LongPoll(
    grpc::CallbackServerContext* ctx, const char* method, const std::string& allocation_id,
    std::chrono::milliseconds max_wait, bool answer_when_busy,
    std::function<PollStep(const std::string& token, std::chrono::milliseconds slice)> step) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  std::string token = AllocationToken(ctx);
  absl::Status present = RequireAllocationToken(token);
  if (!present.ok()) {
    reactor->Finish(ToGrpcStatus(present));
    return reactor;
  }
  // The token is checked here, so that only the allocation itself counts
  // against its own limit.
  absl::StatusOr<int> ranks = core_->AllocationRanks(allocation_id, token);
  if (!ranks.ok()) {
    reactor->Finish(ToGrpcStatus(ranks.status()));
    return reactor;
  }
  const int limit = *ranks + 1;
  auto key = std::make_pair(allocation_id, std::string(method));
  bool admitted;
  {
    std::lock_guard<std::mutex> l(polls_mu_);
    int& n = polls_[key];
    admitted = n < limit;
    if (admitted) ++n;
    if (n == 0) polls_.erase(key);
  }
  if (!admitted) {
    reactor->Finish(answer_when_busy ? step(token, std::chrono::milliseconds(0)).status
                                     : grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                                    absl::StrCat(method, ": allocation ", allocation_id, " already has ",
                                                                 limit, " calls waiting (its ranks + 1)")));
    return reactor;
  }
  auto release = [this, key] {
    std::lock_guard<std::mutex> l(polls_mu_);
    auto it = polls_.find(key);
    if (it != polls_.end() && --it->second <= 0) polls_.erase(it);
  };
  max_wait = std::min<std::chrono::milliseconds>(max_wait, std::chrono::seconds(60));
  bool queued = pool_.Submit([this, ctx, reactor, token, max_wait, release, step = std::move(step)] {
    auto end = std::chrono::steady_clock::now() + std::min(max_wait, UntilDeadline(ctx));
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      auto slice = std::clamp(left, std::chrono::milliseconds(0), std::chrono::milliseconds(1000));
      PollStep r = step(token, slice);
      if (r.done || left <= slice || ctx->IsCancelled() || pool_.stopping()) {
        release();
        return reactor->Finish(r.status);
      }
    }
  });
  if (!queued) {
    release();
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 absl::StrCat(method, ": the master's long-poll queue is full; ask again later")));
  }
  return reactor;
}

grpc::ServerUnaryReactor* TrialServiceImpl::AllocationRendezvous(grpc::CallbackServerContext* ctx,
                                                                 const trialv1::AllocationRendezvousRequest* req,
                                                                 trialv1::AllocationRendezvousResponse* resp) {
  // Waits for every rank (a repeated call by the same rank only records its
  // address again), for at most 60 s or the client's deadline
  // (DEADLINE_EXCEEDED: the rank asks again).
  return LongPoll(ctx, "AllocationRendezvous", req->allocation_id(), std::chrono::seconds(60),
                  /*answer_when_busy=*/false, [this, req, resp](const std::string& token, auto slice) {
    auto r = core_->AllocationRendezvous(*req, token, slice);
    if (r.ok()) {
      *resp = *std::move(r);
      return PollStep{grpc::Status::OK, true};
    }
    return PollStep{ToGrpcStatus(r.status()), r.status().code() != absl::StatusCode::kDeadlineExceeded};
  });
}

grpc::ServerUnaryReactor* TrialServiceImpl::ShouldPreempt(grpc::CallbackServerContext* ctx,
                                                          const trialv1::ShouldPreemptRequest* req,
                                                          trialv1::ShouldPreemptResponse* resp) {
  // Waits up to the request's timeout_ms (at most 60 s) for a preemption.
  auto max_wait = std::chrono::milliseconds(std::clamp(req->timeout_ms(), 0, 60000));
  return LongPoll(ctx, "ShouldPreempt", req->allocation_id(), max_wait, /*answer_when_busy=*/true,
                  [this, req, resp](const std::string& token, auto slice) {
    trialv1::ShouldPreemptRequest one = *req;
    one.set_timeout_ms(static_cast<int32_t>(slice.count()));
    auto r = core_->ShouldPreempt(one, token);
    if (!r.ok()) return PollStep{ToGrpcStatus(r.status()), true};
    *resp = *r;
    return PollStep{grpc::Status::OK, resp->preempt()};
  });
}

}  // namespace det::master
