// Thin gRPC layer over MasterCore: each method translates the request, calls
// the core once and converts its absl::Status into a grpc::Status.
#ifndef DET_MASTER_SERVICE_GRPC_SERVICES_H_
#define DET_MASTER_SERVICE_GRPC_SERVICES_H_

#include "det/agent/v1/agent.grpc.pb.h"
#include "det/api/v1/api.grpc.pb.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "master/core/master_core.h"

namespace det::master {

grpc::Status ToGrpc(const absl::Status& status);

class ApiService final : public apiv1::Determined::Service {
 public:
  explicit ApiService(MasterCore* core) : core_(core) {}
  grpc::Status GetMaster(grpc::ServerContext*, const apiv1::GetMasterRequest*, apiv1::GetMasterResponse*) override;
  grpc::Status PreviewSearch(grpc::ServerContext*, const apiv1::PreviewSearchRequest*,
                             apiv1::PreviewSearchResponse*) override;
  grpc::Status CreateExperiment(grpc::ServerContext*, const apiv1::CreateExperimentRequest*,
                                apiv1::CreateExperimentResponse*) override;
  grpc::Status GetExperiments(grpc::ServerContext*, const apiv1::GetExperimentsRequest*,
                              apiv1::GetExperimentsResponse*) override;
  grpc::Status GetExperiment(grpc::ServerContext*, const apiv1::GetExperimentRequest*,
                             apiv1::GetExperimentResponse*) override;
  grpc::Status ActivateExperiment(grpc::ServerContext*, const apiv1::ActivateExperimentRequest*,
                                  apiv1::ActivateExperimentResponse*) override;
  grpc::Status PauseExperiment(grpc::ServerContext*, const apiv1::PauseExperimentRequest*,
                               apiv1::PauseExperimentResponse*) override;
  grpc::Status CancelExperiment(grpc::ServerContext*, const apiv1::CancelExperimentRequest*,
                                apiv1::CancelExperimentResponse*) override;
  grpc::Status KillExperiment(grpc::ServerContext*, const apiv1::KillExperimentRequest*,
                              apiv1::KillExperimentResponse*) override;
  grpc::Status PatchExperiment(grpc::ServerContext*, const apiv1::PatchExperimentRequest*,
                               apiv1::PatchExperimentResponse*) override;
  grpc::Status GetExperimentTrials(grpc::ServerContext*, const apiv1::GetExperimentTrialsRequest*,
                                   apiv1::GetExperimentTrialsResponse*) override;
  grpc::Status GetExperimentCheckpoints(grpc::ServerContext*, const apiv1::GetExperimentCheckpointsRequest*,
                                        apiv1::GetExperimentCheckpointsResponse*) override;
  grpc::Status GetTrial(grpc::ServerContext*, const apiv1::GetTrialRequest*, apiv1::GetTrialResponse*) override;
  grpc::Status KillTrial(grpc::ServerContext*, const apiv1::KillTrialRequest*, apiv1::KillTrialResponse*) override;
  grpc::Status GetTrialMetrics(grpc::ServerContext*, const apiv1::GetTrialMetricsRequest*,
                               apiv1::GetTrialMetricsResponse*) override;
  grpc::Status TrialLogs(grpc::ServerContext*, const apiv1::TrialLogsRequest*,
                         grpc::ServerWriter<apiv1::TrialLogsResponse>*) override;
  grpc::Status GetTrialCheckpoints(grpc::ServerContext*, const apiv1::GetTrialCheckpointsRequest*,
                                   apiv1::GetTrialCheckpointsResponse*) override;
  grpc::Status GetCheckpoint(grpc::ServerContext*, const apiv1::GetCheckpointRequest*,
                             apiv1::GetCheckpointResponse*) override;
  grpc::Status GetAgents(grpc::ServerContext*, const apiv1::GetAgentsRequest*, apiv1::GetAgentsResponse*) override;
  grpc::Status GetSlots(grpc::ServerContext*, const apiv1::GetSlotsRequest*, apiv1::GetSlotsResponse*) override;

 private:
  MasterCore* core_;
};

class AgentServiceImpl final : public agentv1::AgentService::Service {
 public:
  explicit AgentServiceImpl(MasterCore* core) : core_(core) {}
  grpc::Status RegisterAgent(grpc::ServerContext*, const agentv1::RegisterAgentRequest*,
                             agentv1::RegisterAgentResponse*) override;
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<agentv1::MasterMessage, agentv1::AgentMessage>*) override;
  grpc::Status FetchArtifact(grpc::ServerContext*, const agentv1::FetchArtifactRequest*,
                             grpc::ServerWriter<agentv1::FetchArtifactResponse>*) override;

 private:
  MasterCore* core_;
};

class TrialServiceImpl final : public trialv1::TrialService::Service {
 public:
  explicit TrialServiceImpl(MasterCore* core) : core_(core) {}
  grpc::Status GetTrialContext(grpc::ServerContext*, const trialv1::GetTrialContextRequest*,
                               trialv1::GetTrialContextResponse*) override;
  grpc::Status GetNextOperation(grpc::ServerContext*, const trialv1::GetNextOperationRequest*,
                                trialv1::GetNextOperationResponse*) override;
  grpc::Status ReportTrainingMetrics(grpc::ServerContext*, const trialv1::ReportTrainingMetricsRequest*,
                                     trialv1::ReportTrainingMetricsResponse*) override;
  grpc::Status ReportValidationMetrics(grpc::ServerContext*, const trialv1::ReportValidationMetricsRequest*,
                                       trialv1::ReportValidationMetricsResponse*) override;
  grpc::Status ReportCheckpoint(grpc::ServerContext*, const trialv1::ReportCheckpointRequest*,
                                trialv1::ReportCheckpointResponse*) override;
  grpc::Status CompleteSearcherOperation(grpc::ServerContext*, const trialv1::CompleteSearcherOperationRequest*,
                                         trialv1::CompleteSearcherOperationResponse*) override;
  grpc::Status ReportProgress(grpc::ServerContext*, const trialv1::ReportProgressRequest*,
                              trialv1::ReportProgressResponse*) override;
  grpc::Status ShouldPreempt(grpc::ServerContext*, const trialv1::ShouldPreemptRequest*,
                             trialv1::ShouldPreemptResponse*) override;
  grpc::Status AckPreemption(grpc::ServerContext*, const trialv1::AckPreemptionRequest*,
                             trialv1::AckPreemptionResponse*) override;
  grpc::Status ReportEarlyExit(grpc::ServerContext*, const trialv1::ReportEarlyExitRequest*,
                               trialv1::ReportEarlyExitResponse*) override;
  grpc::Status ReportTrialLogs(grpc::ServerContext*, const trialv1::ReportTrialLogsRequest*,
                               trialv1::ReportTrialLogsResponse*) override;

 private:
  MasterCore* core_;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_GRPC_SERVICES_H_
