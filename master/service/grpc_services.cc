#include "master/service/grpc_services.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "master/service/preview_search.h"

namespace det::master {
namespace {

std::string Metadata(const grpc::ServerContext* ctx, const std::string& key) {
  auto it = ctx->client_metadata().find(key);
  if (it == ctx->client_metadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::string AllocationToken(const grpc::ServerContext* ctx) { return Metadata(ctx, "x-det-allocation-token"); }

std::string BearerToken(const grpc::ServerContext* ctx) {
  std::string v = Metadata(ctx, "authorization");
  const std::string prefix = "Bearer ";
  return v.rfind(prefix, 0) == 0 ? v.substr(prefix.size()) : v;
}

template <typename T, typename Resp>
grpc::Status Reply(absl::StatusOr<T> result, Resp* out) {
  if (!result.ok()) return ToGrpc(result.status());
  *out = *std::move(result);
  return grpc::Status::OK;
}

}  // namespace

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// ---- det.api.v1.Determined

grpc::Status ApiService::GetMaster(grpc::ServerContext*, const apiv1::GetMasterRequest*,
                                   apiv1::GetMasterResponse* resp) {
  *resp = core_->GetMaster();
  return grpc::Status::OK;
}

grpc::Status ApiService::PreviewSearch(grpc::ServerContext*, const apiv1::PreviewSearchRequest* req,
                                       apiv1::PreviewSearchResponse* resp) {
  return Reply(PreviewSearchFor(*req), resp);
}

grpc::Status ApiService::CreateExperiment(grpc::ServerContext*, const apiv1::CreateExperimentRequest* req,
                                          apiv1::CreateExperimentResponse* resp) {
  return Reply(core_->CreateExperiment(*req), resp);
}

grpc::Status ApiService::GetExperiments(grpc::ServerContext*, const apiv1::GetExperimentsRequest* req,
                                        apiv1::GetExperimentsResponse* resp) {
  return Reply(core_->GetExperiments(*req), resp);
}

grpc::Status ApiService::GetExperiment(grpc::ServerContext*, const apiv1::GetExperimentRequest* req,
                                       apiv1::GetExperimentResponse* resp) {
  return Reply(core_->GetExperiment(req->experiment_id()), resp->mutable_experiment());
}

grpc::Status ApiService::ActivateExperiment(grpc::ServerContext*, const apiv1::ActivateExperimentRequest* req,
                                            apiv1::ActivateExperimentResponse*) {
  return ToGrpc(core_->ActivateExperiment(req->experiment_id()));
}

grpc::Status ApiService::PauseExperiment(grpc::ServerContext*, const apiv1::PauseExperimentRequest* req,
                                         apiv1::PauseExperimentResponse*) {
  return ToGrpc(core_->PauseExperiment(req->experiment_id()));
}

grpc::Status ApiService::CancelExperiment(grpc::ServerContext*, const apiv1::CancelExperimentRequest* req,
                                          apiv1::CancelExperimentResponse*) {
  return ToGrpc(core_->CancelExperiment(req->experiment_id()));
}

grpc::Status ApiService::KillExperiment(grpc::ServerContext*, const apiv1::KillExperimentRequest* req,
                                        apiv1::KillExperimentResponse*) {
  return ToGrpc(core_->KillExperiment(req->experiment_id()));
}

grpc::Status ApiService::PatchExperiment(grpc::ServerContext*, const apiv1::PatchExperimentRequest* req,
                                         apiv1::PatchExperimentResponse* resp) {
  return Reply(core_->PatchExperiment(*req), resp->mutable_experiment());
}

grpc::Status ApiService::GetExperimentTrials(grpc::ServerContext*, const apiv1::GetExperimentTrialsRequest* req,
                                             apiv1::GetExperimentTrialsResponse* resp) {
  return Reply(core_->GetExperimentTrials(*req), resp);
}

grpc::Status ApiService::GetExperimentCheckpoints(grpc::ServerContext*,
                                                  const apiv1::GetExperimentCheckpointsRequest* req,
                                                  apiv1::GetExperimentCheckpointsResponse* resp) {
  auto result = core_->GetCheckpoints(req->experiment_id(), std::nullopt);
  if (!result.ok()) return ToGrpc(result.status());
  for (auto& c : *result) *resp->add_checkpoints() = std::move(c);
  return grpc::Status::OK;
}

grpc::Status ApiService::GetTrial(grpc::ServerContext*, const apiv1::GetTrialRequest* req,
                                  apiv1::GetTrialResponse* resp) {
  return Reply(core_->GetTrial(req->trial_id()), resp->mutable_trial());
}

grpc::Status ApiService::KillTrial(grpc::ServerContext*, const apiv1::KillTrialRequest* req,
                                   apiv1::KillTrialResponse*) {
  return ToGrpc(core_->KillTrial(req->trial_id()));
}

grpc::Status ApiService::GetTrialMetrics(grpc::ServerContext*, const apiv1::GetTrialMetricsRequest* req,
                                         apiv1::GetTrialMetricsResponse* resp) {
  return Reply(core_->GetTrialMetrics(*req), resp);
}

grpc::Status ApiService::TrialLogs(grpc::ServerContext* ctx, const apiv1::TrialLogsRequest* req,
                                   grpc::ServerWriter<apiv1::TrialLogsResponse>* writer) {
  int64_t after = req->after_id();
  int64_t sent = 0;
  int64_t skip = req->offset();
  while (!ctx->IsCancelled()) {
    // Read "ended" before the logs so the last lines are never missed.
    auto ended = core_->TrialEnded(req->trial_id());
    if (!ended.ok()) return ToGrpc(ended.status());
    auto logs = core_->GetTrialLogs(req->trial_id(), after, 1000);
    if (!logs.ok()) return ToGrpc(logs.status());
    apiv1::TrialLogsResponse batch;
    for (auto& log : *logs) {
      after = log.id();
      if (skip > 0) {
        --skip;
        continue;
      }
      if (req->limit() > 0 && sent >= req->limit()) return grpc::Status::OK;
      *batch.add_logs() = std::move(log);
      ++sent;
    }
    if (batch.logs_size() > 0 && !writer->Write(batch)) return grpc::Status::OK;
    if (logs->size() == 1000) continue;
    if (!req->follow() || *ended) return grpc::Status::OK;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return grpc::Status::OK;
}

grpc::Status ApiService::GetTrialCheckpoints(grpc::ServerContext*, const apiv1::GetTrialCheckpointsRequest* req,
                                             apiv1::GetTrialCheckpointsResponse* resp) {
  auto result = core_->GetCheckpoints(std::nullopt, req->trial_id());
  if (!result.ok()) return ToGrpc(result.status());
  for (auto& c : *result) *resp->add_checkpoints() = std::move(c);
  return grpc::Status::OK;
}

grpc::Status ApiService::GetCheckpoint(grpc::ServerContext*, const apiv1::GetCheckpointRequest* req,
                                       apiv1::GetCheckpointResponse* resp) {
  return Reply(core_->GetCheckpoint(req->checkpoint_uuid()), resp->mutable_checkpoint());
}

grpc::Status ApiService::GetAgents(grpc::ServerContext*, const apiv1::GetAgentsRequest*,
                                   apiv1::GetAgentsResponse* resp) {
  *resp = core_->GetAgents();
  return grpc::Status::OK;
}

grpc::Status ApiService::GetSlots(grpc::ServerContext*, const apiv1::GetSlotsRequest*, apiv1::GetSlotsResponse* resp) {
  *resp = core_->GetSlots();
  return grpc::Status::OK;
}

// ---- det.agent.v1.AgentService

grpc::Status AgentServiceImpl::RegisterAgent(grpc::ServerContext*, const agentv1::RegisterAgentRequest* req,
                                             agentv1::RegisterAgentResponse* resp) {
  return Reply(core_->RegisterAgent(*req), resp);
}

grpc::Status AgentServiceImpl::Connect(grpc::ServerContext* ctx,
                                       grpc::ServerReaderWriter<agentv1::MasterMessage, agentv1::AgentMessage>* stream) {
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

grpc::Status AgentServiceImpl::FetchArtifact(grpc::ServerContext*, const agentv1::FetchArtifactRequest* req,
                                             grpc::ServerWriter<agentv1::FetchArtifactResponse>* writer) {
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

// ---- det.trial.v1.TrialService

grpc::Status TrialServiceImpl::GetTrialContext(grpc::ServerContext* ctx, const trialv1::GetTrialContextRequest* req,
                                               trialv1::GetTrialContextResponse* resp) {
  return Reply(core_->GetTrialContext(*req, AllocationToken(ctx)), resp);
}

grpc::Status TrialServiceImpl::GetNextOperation(grpc::ServerContext* ctx,
                                                const trialv1::GetNextOperationRequest* req,
                                                trialv1::GetNextOperationResponse* resp) {
  return Reply(core_->GetNextOperation(*req, AllocationToken(ctx)), resp);
}

grpc::Status TrialServiceImpl::ReportTrainingMetrics(grpc::ServerContext* ctx,
                                                     const trialv1::ReportTrainingMetricsRequest* req,
                                                     trialv1::ReportTrainingMetricsResponse*) {
  return ToGrpc(core_->ReportTrainingMetrics(*req, AllocationToken(ctx)));
}

grpc::Status TrialServiceImpl::ReportValidationMetrics(grpc::ServerContext* ctx,
                                                       const trialv1::ReportValidationMetricsRequest* req,
                                                       trialv1::ReportValidationMetricsResponse*) {
  return ToGrpc(core_->ReportValidationMetrics(*req, AllocationToken(ctx)));
}

grpc::Status TrialServiceImpl::ReportCheckpoint(grpc::ServerContext* ctx, const trialv1::ReportCheckpointRequest* req,
                                                trialv1::ReportCheckpointResponse*) {
  return ToGrpc(core_->ReportCheckpoint(*req, AllocationToken(ctx)));
}

grpc::Status TrialServiceImpl::CompleteSearcherOperation(grpc::ServerContext* ctx,
                                                         const trialv1::CompleteSearcherOperationRequest* req,
                                                         trialv1::CompleteSearcherOperationResponse*) {
  return ToGrpc(core_->CompleteSearcherOperation(*req, AllocationToken(ctx)));
}

grpc::Status TrialServiceImpl::ReportProgress(grpc::ServerContext*, const trialv1::ReportProgressRequest*,
                                              trialv1::ReportProgressResponse*) {
  return grpc::Status::OK;
}

grpc::Status TrialServiceImpl::ShouldPreempt(grpc::ServerContext* ctx, const trialv1::ShouldPreemptRequest* req,
                                             trialv1::ShouldPreemptResponse* resp) {
  auto r = core_->ShouldPreempt(*req, AllocationToken(ctx));
  if (!r.ok()) return ToGrpc(r.status());
  resp->set_preempt(*r);
  return grpc::Status::OK;
}

grpc::Status TrialServiceImpl::AckPreemption(grpc::ServerContext* ctx, const trialv1::AckPreemptionRequest* req,
                                             trialv1::AckPreemptionResponse*) {
  return ToGrpc(core_->AckPreemption(*req, AllocationToken(ctx)));
}

grpc::Status TrialServiceImpl::ReportEarlyExit(grpc::ServerContext* ctx, const trialv1::ReportEarlyExitRequest* req,
                                               trialv1::ReportEarlyExitResponse*) {
  return ToGrpc(core_->ReportEarlyExit(*req, AllocationToken(ctx)));
}

grpc::Status TrialServiceImpl::ReportTrialLogs(grpc::ServerContext* ctx, const trialv1::ReportTrialLogsRequest* req,
                                               trialv1::ReportTrialLogsResponse*) {
  return ToGrpc(core_->ReportTrialLogs(*req, AllocationToken(ctx)));
}

}  // namespace det::master
