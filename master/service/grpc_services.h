// Thin gRPC layer over MasterCore and AuthCore: each method is one line that
// authenticates the call and runs its handler (det.api.v1: ApiHandlers, the
// same ones the REST server runs; det.trial.v1 and det.agent.v1: MasterCore),
// converting the absl::Status once into a grpc::Status.
//
// Threading (gRPC callback API):
//   * det.api.v1.Determined and det.trial.v1.TrialService are
//     CallbackServices. Unary methods run on gRPC's callback threads and
//     finish before returning: the core calls they make only take short locks
//     and SQLite writes, never wait for events.
//   * Long-polls never block a callback thread. ShouldPreempt (waits up to
//     its timeout_ms for a preemption) and AllocationRendezvous (waits for
//     every rank) run on TrialServiceImpl's own thread pool (LongPollPool),
//     waiting in slices of at most 1 s so that a cancelled call, the
//     client's deadline (which also bounds the wait) or Shutdown() ends
//     them promptly. One long-poll waits 60 s at most (the client asks
//     again). Trial code is untrusted, so one allocation cannot take the
//     pool from the others: it may have at most (its ranks + 1) long-polls
//     of each method in flight; beyond that ShouldPreempt answers at once
//     with the current state and AllocationRendezvous is
//     RESOURCE_EXHAUSTED. The pool's queue is bounded too
//     (RESOURCE_EXHAUSTED when full).
//   * TrialLogs is a ServerWriteReactor: it writes one batch at a time
//     (OnWriteDone fetches the next) and, when following an idle trial, waits
//     on a grpc::Alarm (200 ms) instead of a thread.
//   * det.agent.v1.AgentService stays on the synchronous API: its Connect
//     stream is bidirectional with a long-lived writer thread per agent,
//     which is simplest with blocking Read/Write; there is one stream per
//     agent, so the sync thread pool is not a bottleneck.
//   Every method without a handler still authenticates first and then
//   answers UNIMPLEMENTED, so no RPC is ever reachable without credentials
//   (tests/auth_test.cc sweeps them all).
#ifndef DET_MASTER_SERVICE_GRPC_SERVICES_H_
#define DET_MASTER_SERVICE_GRPC_SERVICES_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "det/agent/v1/agent.grpc.pb.h"
#include "det/api/v1/api.grpc.pb.h"
#include "det/trial/v1/trial.grpc.pb.h"
#include "master/core/auth.h"
#include "master/core/master_core.h"
#include "master/service/api_handlers.h"

namespace det::master {

// Declares the callback-API override of unary method M of package P
// (request P::MRequest, response P::MResponse).
#define DET_CALLBACK_UNARY(P, M) \
  grpc::ServerUnaryReactor* M(grpc::CallbackServerContext*, const P::M##Request*, P::M##Response*) override

class ApiService final : public apiv1::Determined::CallbackService {
 public:
  // Neither pointer is owned; both must outlive the service.
  ApiService(MasterCore* core, AuthCore* auth) : core_(core), handlers_(core, auth) {}

  DET_CALLBACK_UNARY(apiv1, GetMaster);
  DET_CALLBACK_UNARY(apiv1, Login);
  DET_CALLBACK_UNARY(apiv1, Logout);
  DET_CALLBACK_UNARY(apiv1, GetMe);
  DET_CALLBACK_UNARY(apiv1, GetUsers);
  DET_CALLBACK_UNARY(apiv1, PostUser);
  DET_CALLBACK_UNARY(apiv1, PatchUser);
  grpc::ServerReadReactor<apiv1::UploadArtifactRequest>* UploadArtifact(grpc::CallbackServerContext*,
                                                                        apiv1::UploadArtifactResponse*) override;
  DET_CALLBACK_UNARY(apiv1, CreateExperiment);
  DET_CALLBACK_UNARY(apiv1, GetExperiments);
  DET_CALLBACK_UNARY(apiv1, GetExperiment);
  DET_CALLBACK_UNARY(apiv1, PreviewSearch);
  DET_CALLBACK_UNARY(apiv1, ActivateExperiment);
  DET_CALLBACK_UNARY(apiv1, PauseExperiment);
  DET_CALLBACK_UNARY(apiv1, CancelExperiment);
  DET_CALLBACK_UNARY(apiv1, KillExperiment);
  DET_CALLBACK_UNARY(apiv1, ArchiveExperiment);
  DET_CALLBACK_UNARY(apiv1, UnarchiveExperiment);
  DET_CALLBACK_UNARY(apiv1, DeleteExperiment);
  DET_CALLBACK_UNARY(apiv1, PatchExperiment);
  DET_CALLBACK_UNARY(apiv1, GetExperimentTrials);
  DET_CALLBACK_UNARY(apiv1, GetExperimentCheckpoints);
  DET_CALLBACK_UNARY(apiv1, GetExperimentValidationHistory);
  DET_CALLBACK_UNARY(apiv1, GetTrial);
  DET_CALLBACK_UNARY(apiv1, KillTrial);
  DET_CALLBACK_UNARY(apiv1, PauseTrial);
  DET_CALLBACK_UNARY(apiv1, ActivateTrial);
  DET_CALLBACK_UNARY(apiv1, ContinueExperiment);
  DET_CALLBACK_UNARY(apiv1, GetTrialMetrics);
  grpc::ServerWriteReactor<apiv1::StreamTrialMetricsResponse>* StreamTrialMetrics(
      grpc::CallbackServerContext*, const apiv1::StreamTrialMetricsRequest*) override;
  grpc::ServerWriteReactor<apiv1::TrialLogsResponse>* TrialLogs(grpc::CallbackServerContext*,
                                                                const apiv1::TrialLogsRequest*) override;
  grpc::ServerWriteReactor<apiv1::MasterLogsResponse>* MasterLogs(grpc::CallbackServerContext*,
                                                                  const apiv1::MasterLogsRequest*) override;
  grpc::ServerWriteReactor<apiv1::BackupDatabaseResponse>* BackupDatabase(
      grpc::CallbackServerContext*, const apiv1::BackupDatabaseRequest*) override;
  DET_CALLBACK_UNARY(apiv1, GetTrialCheckpoints);
  DET_CALLBACK_UNARY(apiv1, GetCheckpoint);
  DET_CALLBACK_UNARY(apiv1, DeleteCheckpoints);
  grpc::ServerWriteReactor<apiv1::DownloadCheckpointResponse>* DownloadCheckpoint(
      grpc::CallbackServerContext*, const apiv1::DownloadCheckpointRequest*) override;
  DET_CALLBACK_UNARY(apiv1, GetAgents);
  DET_CALLBACK_UNARY(apiv1, GetAgent);
  DET_CALLBACK_UNARY(apiv1, EnableAgent);
  DET_CALLBACK_UNARY(apiv1, DisableAgent);
  DET_CALLBACK_UNARY(apiv1, GetSlots);
  DET_CALLBACK_UNARY(apiv1, EnableSlot);
  DET_CALLBACK_UNARY(apiv1, DisableSlot);
  DET_CALLBACK_UNARY(apiv1, GetResourcePools);
  DET_CALLBACK_UNARY(apiv1, GetJobQueue);
  DET_CALLBACK_UNARY(apiv1, UpdateJob);
  DET_CALLBACK_UNARY(apiv1, PatchCheckpoint);
  DET_CALLBACK_UNARY(apiv1, PostWorkspace);
  DET_CALLBACK_UNARY(apiv1, GetWorkspaces);
  DET_CALLBACK_UNARY(apiv1, GetWorkspace);
  DET_CALLBACK_UNARY(apiv1, GetWorkspaceProjects);
  DET_CALLBACK_UNARY(apiv1, PostProject);
  DET_CALLBACK_UNARY(apiv1, GetProject);
  DET_CALLBACK_UNARY(apiv1, ArchiveWorkspace);
  DET_CALLBACK_UNARY(apiv1, UnarchiveWorkspace);
  DET_CALLBACK_UNARY(apiv1, ArchiveProject);
  DET_CALLBACK_UNARY(apiv1, UnarchiveProject);

 private:
  // Authenticates the caller of `method`, runs its handler and finishes.
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const char* method,
                                  const google::protobuf::Message& request, google::protobuf::Message* response);
  // The caller of `method` (ApiHandlers::Authenticate over the metadata).
  absl::StatusOr<ApiCaller> Caller(const grpc::CallbackServerContext* ctx, const char* method) const;

  MasterCore* const core_;
  const ApiHandlers handlers_;
};

// Synchronous (see the file comment). Every call needs the cluster secret
// (metadata x-det-cluster-secret; RegisterAgent also accepts its
// cluster_secret field) when the master has one; Connect also needs the
// session token from RegisterAgent.
class AgentServiceImpl final : public agentv1::AgentService::Service {
 public:
  AgentServiceImpl(MasterCore* core, AuthCore* auth) : core_(core), auth_(auth) {}
  grpc::Status RegisterAgent(grpc::ServerContext*, const agentv1::RegisterAgentRequest*,
                             agentv1::RegisterAgentResponse*) override;
  grpc::Status Connect(grpc::ServerContext*,
                       grpc::ServerReaderWriter<agentv1::MasterMessage, agentv1::AgentMessage>*) override;
  grpc::Status FetchArtifact(grpc::ServerContext*, const agentv1::FetchArtifactRequest*,
                             grpc::ServerWriter<agentv1::FetchArtifactResponse>*) override;

 private:
  MasterCore* const core_;
  AuthCore* const auth_;
};

// A growing pool of threads for calls that wait (long-polls). Threads are
// added while every one is busy (up to kMaxThreads; beyond that calls queue,
// up to kMaxQueued). Thread-safe.
class LongPollPool {
 public:
  static constexpr int kMaxThreads = 512;
  static constexpr int kMaxQueued = 1024;
  LongPollPool() = default;
  ~LongPollPool();  // Shutdown()
  // Runs `task` on a pool thread; after Shutdown(), on the caller's thread.
  // Tasks must check stopping() and then end quickly. false (and `task`
  // dropped, not run) when kMaxQueued tasks already wait.
  bool Submit(std::function<void()> task);
  // Makes stopping() true, runs what is queued and joins every thread.
  void Shutdown();
  bool stopping() const;

 private:
  void Work();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

// Every call needs x-det-allocation-token (UNAUTHENTICATED without); the
// core checks it against the allocation the request names
// (PERMISSION_DENIED for another allocation's token).
class TrialServiceImpl final : public trialv1::TrialService::CallbackService {
 public:
  explicit TrialServiceImpl(MasterCore* core) : core_(core) {}
  // Ends the long-polls in flight (each within ~1 s) and joins their threads.
  // Call before shutting the server down.
  void Shutdown() { pool_.Shutdown(); }

  DET_CALLBACK_UNARY(trialv1, GetTrialContext);
  DET_CALLBACK_UNARY(trialv1, AllocationRendezvous);
  DET_CALLBACK_UNARY(trialv1, GetNextOperation);
  DET_CALLBACK_UNARY(trialv1, ReportTrainingMetrics);
  DET_CALLBACK_UNARY(trialv1, ReportValidationMetrics);
  DET_CALLBACK_UNARY(trialv1, ReportMetrics);
  DET_CALLBACK_UNARY(trialv1, ReportCheckpoint);
  DET_CALLBACK_UNARY(trialv1, CompleteSearcherOperation);
  DET_CALLBACK_UNARY(trialv1, ReportProgress);
  DET_CALLBACK_UNARY(trialv1, ShouldPreempt);
  DET_CALLBACK_UNARY(trialv1, AckPreemption);
  DET_CALLBACK_UNARY(trialv1, ReportEarlyExit);
  DET_CALLBACK_UNARY(trialv1, ReportTrialLogs);
  DET_CALLBACK_UNARY(trialv1, GetCheckpointStorageCredentials);

 private:
  // Checks that the call carries an allocation token, then finishes with
  // core_->*fn(request, token).
  template <typename Req, typename Resp>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* ctx, const Req& request, Resp* response,
                                  absl::StatusOr<Resp> (MasterCore::*fn)(const Req&, const std::string&));

  // One wait of a long-poll: `status` is the answer; `done` says it is final
  // (otherwise it is the answer only if the poll's time is over).
  struct PollStep {
    grpc::Status status;
    bool done = false;
  };
  // Checks that the call carries allocation `allocation_id`'s token and that
  // the allocation has fewer than (its ranks + 1) long-polls of `method` in
  // flight, then, on pool_, calls `step(token, slice)` (each call may wait
  // up to `slice`, at most 1 s) until it is done, `max_wait` (at most 60 s)
  // or the client's deadline has passed, the call is cancelled or the server
  // shuts down, and finishes with its last status. Over the allocation's
  // limit: `answer_when_busy` finishes at once with step(token, 0), else
  // RESOURCE_EXHAUSTED.
  grpc::ServerUnaryReactor* LongPoll(
      grpc::CallbackServerContext* ctx, const char* method, const std::string& allocation_id,
      std::chrono::milliseconds max_wait, bool answer_when_busy,
      std::function<PollStep(const std::string& token, std::chrono::milliseconds slice)> step);

  MasterCore* const core_;
  LongPollPool pool_;
  std::mutex polls_mu_;
  // Long-polls in flight per (allocation, method).
  std::map<std::pair<std::string, std::string>, int> polls_ ABSL_GUARDED_BY(polls_mu_);
};

#undef DET_CALLBACK_UNARY

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_GRPC_SERVICES_H_
