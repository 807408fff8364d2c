// MasterCore: the master's state and decisions behind all three gRPC services
// (det.api.v1 for users, det.agent.v1 for agents, det.trial.v1 for trial
// processes) and the REST API.
//
// Every public method is thread-safe, takes its request message and returns
// absl::StatusOr<its response message> with canonical codes (InvalidArgument
// for a bad field, NotFound for an unknown id, FailedPrecondition for a wrong
// state, AlreadyExists, Unauthenticated / PermissionDenied for a bad token),
// so that the gRPC and REST adapters are one line each
// (master/service/api_handlers.h). Search and scheduling decisions come from
// pure code (master/search); state lives in SQLite (master/store); every
// time-based policy reads MasterOptions::clock.
//
// Where the methods live (one class, its definitions by responsibility):
//   master_core.cc   setup, WriteScope, state changes shared by all
//   experiments.cc   det.api.v1 experiment calls, searcher ops
//   trials.cc        det.api.v1 trial, metric, log and checkpoint reads
//   trial_calls.cc   det.trial.v1 calls from trial processes
//   agents.cc        det.agent.v1: registration, stream, heartbeats
//   allocations.cc   scheduling, starting, stopping and ending allocations
//   rendezvous.cc    how the ranks of an allocation find each other
//   recovery.cc      reloading state after a master restart
//   timeouts.cc      the background pass: heartbeat, stop and rendezvous
//                    timeouts, checkpoint GC (policy: checkpoint_gc.h)
//   experiment_lifecycle.cc  archive, unarchive, delete (a background task)
#ifndef DET_MASTER_CORE_MASTER_CORE_H_
#define DET_MASTER_CORE_MASTER_CORE_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "det/agent/v1/agent.pb.h"
#include "det/api/v1/api.pb.h"
#include "det/trial/v1/trial.pb.h"
#include "master/core/agent_session.h"
#include "master/core/artifact_store.h"
#include "master/core/chart_cache.h"
#include "master/core/checkpoint_files.h"
#include "master/core/checkpoint_roots.h"
#include "master/core/clock.h"
#include "master/core/lock_probe.h"
#include "master/core/master_options.h"
#include "master/core/resource_pools.h"
#include "master/core/s3_delete_retries.h"
#include "master/core/s3_profiles.h"
#include "master/core/slurm_driver.h"
#include "master/search/scheduler.h"
#include "master/search/searcher.h"
#include "master/store/store.h"
#include "master/store/store_events.h"

namespace det::master {

namespace apiv1 = ::det::api::v1;
namespace agentv1 = ::det::agent::v1;
namespace trialv1 = ::det::trial::v1;

struct TrialFacts;
struct ExperimentSummary;
struct TrialRuntime;
struct ExperimentRuntime;
struct AllocationRuntime;
struct AgentRuntime;

// One batch of a trial's logs (see ReadTrialLogs).
struct TrialLogsBatch {
  apiv1::TrialLogsResponse logs;
  // The trial had ended (terminal, no allocation) before the batch was read:
  // no line will follow the last one of the batch.
  bool trial_ended = false;
};

// One batch of a metric stream (see ReadTrialMetrics).
struct TrialMetricsBatch {
  // The rows to send (possibly none); next_after_id set when not empty.
  apiv1::StreamTrialMetricsResponse metrics;
  // The cursor after this read (the last row read, sent or filtered out).
  int64_t last_id = 0;
  int64_t rows_read = 0;
  // Every requested trial had ended before the read.
  bool trials_ended = false;
};

class MasterCore {
 public:
  // Opens (or creates) the database and reloads what it holds; starts the
  // background thread unless options.background_thread is false.
  static absl::StatusOr<std::unique_ptr<MasterCore>> Create(MasterOptions options);
  ~MasterCore();

  // The gRPC address trial processes use to reach the master.
  void set_trial_master_address(std::string address);

  // ---- det.api.v1 (experiments.cc, trials.cc, agents.cc)
  absl::StatusOr<apiv1::GetMasterResponse> GetMaster(const apiv1::GetMasterRequest& req);
  // Creates an experiment owned by `owner` (only the owner or an admin may
  // change it: AuthorizeExperimentChange). The one-argument form creates one
  // without an owner, which only admins may change (in-process tests).
  absl::StatusOr<apiv1::CreateExperimentResponse> CreateExperiment(const apiv1::CreateExperimentRequest& req,
                                                                   const apiv1::User& owner);
  absl::StatusOr<apiv1::CreateExperimentResponse> CreateExperiment(const apiv1::CreateExperimentRequest& req) {
    return CreateExperiment(req, apiv1::User());
  }
  absl::StatusOr<apiv1::GetExperimentsResponse> GetExperiments(const apiv1::GetExperimentsRequest& req);
  absl::StatusOr<apiv1::GetExperimentResponse> GetExperiment(const apiv1::GetExperimentRequest& req);
  absl::StatusOr<apiv1::ActivateExperimentResponse> ActivateExperiment(const apiv1::ActivateExperimentRequest& req);
  absl::StatusOr<apiv1::PauseExperimentResponse> PauseExperiment(const apiv1::PauseExperimentRequest& req);
  absl::StatusOr<apiv1::CancelExperimentResponse> CancelExperiment(const apiv1::CancelExperimentRequest& req);
  absl::StatusOr<apiv1::KillExperimentResponse> KillExperiment(const apiv1::KillExperimentRequest& req);
  // Changes name, description, labels and/or the checkpoint GC policy (which
  // is applied at once to the checkpoints of trials that have ended), and/or
  // a PAUSED experiment's trial.so (experiment_trial_so.cc).
  absl::StatusOr<apiv1::PatchExperimentResponse> PatchExperiment(const apiv1::PatchExperimentRequest& req);
  absl::StatusOr<apiv1::GetExperimentTrialsResponse> GetExperimentTrials(
      const apiv1::GetExperimentTrialsRequest& req);
  absl::StatusOr<apiv1::GetExperimentCheckpointsResponse> GetExperimentCheckpoints(
      const apiv1::GetExperimentCheckpointsRequest& req);
  absl::StatusOr<apiv1::GetTrialResponse> GetTrial(const apiv1::GetTrialRequest& req);

  // ---- archiving and deleting experiments (experiment_lifecycle.cc)
  // Archive: only a terminal experiment (FailedPrecondition naming the id and
  // state otherwise); unarchive: any. Both idempotent; NotFound for an
  // unknown id; FailedPrecondition while DELETING.
  absl::StatusOr<apiv1::ArchiveExperimentResponse> ArchiveExperiment(const apiv1::ArchiveExperimentRequest& req);
  absl::StatusOr<apiv1::UnarchiveExperimentResponse> UnarchiveExperiment(
      const apiv1::UnarchiveExperimentRequest& req);
  // A terminal experiment with no running trial becomes DELETING (stored)
  // and the call returns; the background thread (or RunBackgroundPass) then
  // deletes its checkpoint directories, rows and unshared trial.so, after
  // which it is NotFound. Idempotent while DELETING; FailedPrecondition
  // (naming the id and state) when not terminal.
  absl::StatusOr<apiv1::DeleteExperimentResponse> DeleteExperiment(const apiv1::DeleteExperimentRequest& req);

  // ---- ownership (ownership.cc)
  // Ok when `user` may change experiment `experiment_id`: an active admin, or
  // its owner. NotFound for an unknown experiment; PermissionDenied (naming
  // the owner) otherwise.
  absl::Status AuthorizeExperimentChange(const apiv1::User& user, int64_t experiment_id);
  // The experiment of a trial / a checkpoint / a job ("exp-<id>"): NotFound
  // (naming the id) when unknown, InvalidArgument for a malformed job id.
  absl::StatusOr<int64_t> ExperimentOfTrial(int64_t trial_id);
  absl::StatusOr<int64_t> ExperimentOfCheckpoint(const std::string& uuid);
  static absl::StatusOr<int64_t> ExperimentOfJob(const std::string& job_id);
  absl::StatusOr<apiv1::KillTrialResponse> KillTrial(const apiv1::KillTrialRequest& req);
  absl::StatusOr<apiv1::GetTrialMetricsResponse> GetTrialMetrics(const apiv1::GetTrialMetricsRequest& req);
  absl::StatusOr<apiv1::GetTrialCheckpointsResponse> GetTrialCheckpoints(
      const apiv1::GetTrialCheckpointsRequest& req);
  absl::StatusOr<apiv1::GetCheckpointResponse> GetCheckpoint(const apiv1::GetCheckpointRequest& req);
  // ---- checkpoints.cc: deleting, downloading, metadata (see api.proto)
  // Marks the checkpoints DELETED (all-or-nothing) and then removes their
  // directories (CheckpointRoots) before returning, outside mu_.
  absl::StatusOr<apiv1::DeleteCheckpointsResponse> DeleteCheckpoints(const apiv1::DeleteCheckpointsRequest& req);
  absl::StatusOr<apiv1::PatchCheckpointResponse> PatchCheckpoint(const apiv1::PatchCheckpointRequest& req);
  // The files of COMPLETED checkpoint req.checkpoint_uuid() for
  // DownloadCheckpoint (CheckpointFiles::Open). InvalidArgument malformed
  // uuid; NotFound; FailedPrecondition not COMPLETED.
  absl::StatusOr<std::unique_ptr<CheckpointFiles>> OpenCheckpointFiles(const apiv1::DownloadCheckpointRequest& req);
  // ---- the job queue (job_queue.cc; contracts in cluster.proto)
  // One job per experiment that is not terminal, per pool in the order the
  // scheduler considers them (priority, fair share, queue position, id).
  // InvalidArgument for a negative offset or limit; NotFound for a
  // resource_pool that no agent and no experiment uses.
  absl::StatusOr<apiv1::GetJobQueueResponse> GetJobQueue(const apiv1::GetJobQueueRequest& req);
  // Changes priority / weight / max_slots / place of job req.job_id(),
  // stores them (experiments.job_*) and runs a scheduling pass. The caller
  // checks that the user owns the experiment (method_access.cc).
  absl::StatusOr<apiv1::UpdateJobResponse> UpdateJob(const apiv1::UpdateJobRequest& req);
  absl::StatusOr<apiv1::GetAgentsResponse> GetAgents(const apiv1::GetAgentsRequest& req);
  absl::StatusOr<apiv1::GetSlotsResponse> GetSlots(const apiv1::GetSlotsRequest& req);
  // TrialLogs (server streaming) one batch at a time: up to `max_lines` lines
  // of trial req.trial_id() with id > after_id that req's filters select
  // (req's own offset, limit, tail and follow are the streaming caller's:
  // master/service/trial_log_cursor.h; defined in metrics_logs.cc).
  // InvalidArgument for a bad filter (ValidateTrialLogsRequest).
  absl::StatusOr<TrialLogsBatch> ReadTrialLogs(const apiv1::TrialLogsRequest& req, int64_t after_id,
                                               int64_t max_lines);

  // ---- metrics and logs (metrics_logs.cc)
  // The experiment's best-so-far sequence of its searcher metric (see
  // BestSoFar in metrics_logs.h). NotFound for an unknown experiment.
  absl::StatusOr<apiv1::GetExperimentValidationHistoryResponse> GetExperimentValidationHistory(
      const apiv1::GetExperimentValidationHistoryRequest& req);
  // StreamTrialMetrics one batch at a time: up to `max_rows` rows with id >
  // after_id of req's trials (trial_id and trial_ids), filtered by group,
  // after_total_batches and metric_names. NotFound for an unknown trial;
  // InvalidArgument for no trial, more than 1000, or a bad group.
  absl::StatusOr<TrialMetricsBatch> ReadTrialMetrics(const apiv1::StreamTrialMetricsRequest& req, int64_t after_id,
                                                     int64_t max_rows);
  // The after_id a TrialLogs stream starts from: req.after_id, or with
  // req.tail the id just before its last `tail` matching lines.
  absl::StatusOr<int64_t> TrialLogsStart(const apiv1::TrialLogsRequest& req);
  // det.trial.v1 ReportMetrics: a group other than training/validation.
  absl::StatusOr<trialv1::ReportMetricsResponse> ReportMetrics(const trialv1::ReportMetricsRequest& req,
                                                               const std::string& token);
  // ---- forks, continue, warm starts (experiment_fork.cc), one trial's
  // pause (trial_pause.cc); contracts in api.proto
  absl::StatusOr<apiv1::ContinueExperimentResponse> ContinueExperiment(const apiv1::ContinueExperimentRequest& req);
  absl::StatusOr<apiv1::PauseTrialResponse> PauseTrial(const apiv1::PauseTrialRequest& req);
  absl::StatusOr<apiv1::ActivateTrialResponse> ActivateTrial(const apiv1::ActivateTrialRequest& req);

  // ---- det.agent.v1 (agents.cc)
  absl::StatusOr<agentv1::RegisterAgentResponse> RegisterAgent(const agentv1::RegisterAgentRequest& req);
  // The create-time ABI check (agents.cc): OK with no warning when stored
  // trial.so `sha256` can be loaded by at least one agent of resource pool
  // `pool` that reported an AbiManifest; INVALID_ARGUMENT naming `file_name`
  // (the client's label) and the first agent's unresolved symbol when none
  // can; OK with a warning when no agent of the pool reported one (nothing
  // to check against). Reads the stored file, never loads it. Thread-safe.
  absl::StatusOr<std::vector<std::string>> CheckTrialAbiOnAgents(const std::string& sha256,
                                                                 const std::string& file_name,
                                                                 const std::string& pool);
  // Forgets agent `agent_id`'s per-agent credential: its next registration
  // is treated as its first and gets a new one (det-master --reset-agent).
  // NotFound for an unknown agent. Thread-safe.
  absl::Status ResetAgentCredential(const std::string& agent_id);
  // Binds the Connect stream of the agent holding `session_token`.
  absl::StatusOr<std::shared_ptr<AgentSession>> AttachAgent(const std::string& session_token);
  // Whether the agent holding `session_token` may download artifact
  // `sha256`: only the trial.so of an allocation placed on it.
  // Unauthenticated for an unknown session, PermissionDenied otherwise.
  absl::Status AuthorizeArtifactFetch(const std::string& session_token, const std::string& sha256);
  // One message of agent `agent_id`'s Connect stream.
  void HandleAgentMessage(const std::string& agent_id, const agentv1::AgentMessage& message);
  // The stream of `session` ended.
  void DetachAgent(const std::shared_ptr<AgentSession>& session);
  const ArtifactStore& artifacts() const { return artifacts_; }
  ArtifactStore* mutable_artifacts() { return &artifacts_; }

  // ---- det.trial.v1 (trial_calls.cc; every call names its allocation and
  // carries its token: NotFound for an unknown allocation, PermissionDenied
  // for another allocation's token)
  absl::StatusOr<trialv1::GetTrialContextResponse> GetTrialContext(const trialv1::GetTrialContextRequest& req,
                                                                    const std::string& token);
  absl::StatusOr<trialv1::GetNextOperationResponse> GetNextOperation(const trialv1::GetNextOperationRequest& req,
                                                                     const std::string& token);
  absl::StatusOr<trialv1::ReportTrainingMetricsResponse> ReportTrainingMetrics(
      const trialv1::ReportTrainingMetricsRequest& req, const std::string& token);
  // ReportTrainingMetrics for the callback API: `done` gets its status once
  // the rows are committed, on the store's metric writer thread (a group
  // commit with every other trial's rows queued meanwhile), or at once when
  // the call is refused. `done` must not call back into MasterCore's writes.
  void ReportTrainingMetricsAsync(const trialv1::ReportTrainingMetricsRequest& req, const std::string& token,
                                  std::function<void(absl::Status)> done);
  absl::StatusOr<trialv1::ReportValidationMetricsResponse> ReportValidationMetrics(
      const trialv1::ReportValidationMetricsRequest& req, const std::string& token);
  absl::StatusOr<trialv1::ReportCheckpointResponse> ReportCheckpoint(const trialv1::ReportCheckpointRequest& req,
                                                                     const std::string& token);
  absl::StatusOr<trialv1::CompleteSearcherOperationResponse> CompleteSearcherOperation(
      const trialv1::CompleteSearcherOperationRequest& req, const std::string& token);
  // Progress is derived from the reported metrics; the call is only checked.
  absl::StatusOr<trialv1::ReportProgressResponse> ReportProgress(const trialv1::ReportProgressRequest& req,
                                                                 const std::string& token);
  absl::StatusOr<trialv1::ReportEarlyExitResponse> ReportEarlyExit(const trialv1::ReportEarlyExitRequest& req,
                                                                   const std::string& token);
  // Waits up to req.timeout_ms (at most 60 s, real time) for a preemption.
  absl::StatusOr<trialv1::ShouldPreemptResponse> ShouldPreempt(const trialv1::ShouldPreemptRequest& req,
                                                               const std::string& token);
  absl::StatusOr<trialv1::AckPreemptionResponse> AckPreemption(const trialv1::AckPreemptionRequest& req,
                                                               const std::string& token);
  // Records rank req.rank's address (empty: its agent's first address) and
  // port, then waits up to `wait` (real time) until every rank of the
  // allocation has reported; returns the rendezvous with every rank's
  // address. InvalidArgument for a rank outside [0, world_size);
  // DeadlineExceeded when some rank has not reported within `wait`;
  // FailedPrecondition when the allocation ends meanwhile or its rendezvous
  // timed out (MasterOptions::rendezvous_timeout_ms).
  absl::StatusOr<trialv1::AllocationRendezvousResponse> AllocationRendezvous(
      const trialv1::AllocationRendezvousRequest& req, const std::string& token,
      std::chrono::milliseconds wait = std::chrono::seconds(60));
  absl::StatusOr<trialv1::ReportTrialLogsResponse> ReportTrialLogs(const trialv1::ReportTrialLogsRequest& req,
                                                                   const std::string& token);
  // The S3 endpoint and credentials of req.storage_path for trial
  // req.trial_id (storage_credentials.cc; contract in trial.proto). No S3 I/O.
  absl::StatusOr<trialv1::GetCheckpointStorageCredentialsResponse> GetCheckpointStorageCredentials(
      const trialv1::GetCheckpointStorageCredentialsRequest& req, const std::string& token);
  // The number of ranks (at least 1) of allocation `allocation_id` when
  // `token` is its token (errors as every det.trial.v1 call): what bounds its
  // long-polls in flight (master/service/grpc_services.h).
  absl::StatusOr<int> AllocationRanks(const std::string& allocation_id, const std::string& token);

  // ---- resource pools, agent and slot control (agent_control.cc)
  // GetAgent: NotFound naming the id. Enable/Disable Agent/Slot (admins
  // only: method_access.cc): the state is stored (agents table) and kept
  // over restarts and re-registrations. Disable without drain asks every
  // allocation on the agent (or slot; a multi-agent allocation whole) to
  // checkpoint and exit (it is rescheduled elsewhere); with drain they run
  // to their end. Either way nothing new is placed there until enabled.
  // Slot ids: "N" or "AGENT/N" (N a device index of the agent); NotFound
  // naming the agent and slot otherwise.
  absl::StatusOr<apiv1::GetAgentResponse> GetAgent(const apiv1::GetAgentRequest& req);
  absl::StatusOr<apiv1::EnableAgentResponse> EnableAgent(const apiv1::EnableAgentRequest& req);
  absl::StatusOr<apiv1::DisableAgentResponse> DisableAgent(const apiv1::DisableAgentRequest& req);
  absl::StatusOr<apiv1::EnableSlotResponse> EnableSlot(const apiv1::EnableSlotRequest& req);
  absl::StatusOr<apiv1::DisableSlotResponse> DisableSlot(const apiv1::DisableSlotRequest& req);
  // Every pool (declared ones in config order) with its agents, slots,
  // queued allocations and settings.
  absl::StatusOr<apiv1::GetResourcePoolsResponse> GetResourcePools(const apiv1::GetResourcePoolsRequest& req);

  // ---- workspaces and projects (workspaces.cc; contracts in api.proto and
  // workspace.proto). Post* store a new workspace / project owned by
  // `owner` (names and bounds checked by ValidateWorkspaceName in
  // workspaces.h); reads count each project's experiments in memory.
  absl::StatusOr<apiv1::PostWorkspaceResponse> PostWorkspace(const apiv1::PostWorkspaceRequest& req,
                                                             const apiv1::User& owner);
  absl::StatusOr<apiv1::GetWorkspacesResponse> GetWorkspaces(const apiv1::GetWorkspacesRequest& req);
  absl::StatusOr<apiv1::GetWorkspaceResponse> GetWorkspace(const apiv1::GetWorkspaceRequest& req);
  absl::StatusOr<apiv1::GetWorkspaceProjectsResponse> GetWorkspaceProjects(
      const apiv1::GetWorkspaceProjectsRequest& req);
  absl::StatusOr<apiv1::PostProjectResponse> PostProject(const apiv1::PostProjectRequest& req,
                                                         const apiv1::User& owner);
  absl::StatusOr<apiv1::GetProjectResponse> GetProject(const apiv1::GetProjectRequest& req);
  // Archive / unarchive by `caller`: its owner or an active admin
  // (PermissionDenied otherwise); FailedPrecondition for the immutable
  // defaults and for unarchiving a project of an archived workspace.
  absl::StatusOr<apiv1::ArchiveWorkspaceResponse> ArchiveWorkspace(const apiv1::ArchiveWorkspaceRequest& req,
                                                                   const apiv1::User& caller);
  absl::StatusOr<apiv1::UnarchiveWorkspaceResponse> UnarchiveWorkspace(const apiv1::UnarchiveWorkspaceRequest& req,
                                                                       const apiv1::User& caller);
  absl::StatusOr<apiv1::ArchiveProjectResponse> ArchiveProject(const apiv1::ArchiveProjectRequest& req,
                                                               const apiv1::User& caller);
  absl::StatusOr<apiv1::UnarchiveProjectResponse> UnarchiveProject(const apiv1::UnarchiveProjectRequest& req,
                                                                   const apiv1::User& caller);

  // One pass of the background work (timeouts.cc): heartbeat, stop and
  // rendezvous timeouts, scheduling, checkpoint GC (files deleted before it
  // returns), and every pending experiment deletion run to its end. The background thread runs it every 500 ms; tests without
  // that thread call it after moving their FakeClock.
  void RunBackgroundPass();

  // One pass of the Slurm resource manager (slurm_allocations.cc): queued
  // submissions go to sbatch, queued cancels to scancel, and squeue's view of
  // every job updates its allocation (pending, running, or ended: each rank's
  // exit status then ends it as an agent's report would). Runs after every
  // background pass; a no-op with the agent resource manager. Requires mu_
  // not held; thread-safe (one pass at a time).
  void RunSlurmPass() ABSL_LOCKS_EXCLUDED(mu_);

  // Whether the core answers (the health check): mu_ was taken and released
  // within `wait` by a probe thread waiting on it (lock_probe.h); never blocks the caller longer.
  bool Ping(std::chrono::milliseconds wait) ABSL_LOCKS_EXCLUDED(mu_);
  // Trials by the state trial lists show (WAITING included; common.proto's name without "STATE_"): /metrics.
  // Terminal trials, and those of experiments the master could not load, are counted from the store.
  std::map<std::string, int64_t> TrialCountsByShownState() ABSL_LOCKS_EXCLUDED(mu_);
  // Tests: holds mu_ until the returned lock is released (a wedged core).
  std::unique_lock<std::mutex> LockForTesting() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return std::unique_lock<std::mutex>(mu_);
  }

  // Store access for benchmarks and tests.
  Store* store() { return store_.get(); }
  const MasterOptions& options() const { return options_; }

 private:
  // Holds one store transaction for the life of a locked core operation and,
  // when it commits, only then sends the agent messages queued meanwhile: a
  // crash never leaves an agent running what the database does not know.
  // When the commit fails (the store rolled every write of the operation
  // back), the queued messages are dropped and the core reloads its state
  // from the store, so that memory and database agree again. Construct right
  // after locking mu_; destroyed without Commit(), it commits (and reloads
  // on failure) all the same.
  class WriteScope {
   public:
    explicit WriteScope(MasterCore* core) : core_(core), txn_(std::in_place, core->store_.get()) {}
    ~WriteScope();
    // At most once; returns the commit's status (Internal-like store codes).
    absl::Status Commit();

   private:
    MasterCore* core_;
    std::optional<Store::Transaction> txn_;
    bool done_ = false;
  };
  // `value` once `w` has committed; the commit's error otherwise (the
  // operation's writes were then rolled back and the state reloaded).
  template <typename T>
  static absl::StatusOr<T> Committed(WriteScope& w, T value) {
    absl::Status st = w.Commit();
    if (!st.ok()) return st;
    return value;
  }
  // After a failed commit: drops the in-memory experiments, trials and
  // allocations (and the agents' slot bookkeeping) and loads them again from
  // the store, as a restarted master would (connected agents stay).
  void ReloadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  MasterCore(MasterOptions options, std::unique_ptr<Store> store);
  int64_t MonoMs() const { return clock_->MonotonicMs(); }
  int64_t WallMs() const { return clock_->WallMs(); }

  // trial_calls.cc: a training report's rows, once its allocation token is
  // checked (takes mu_; the rows are inserted without it).
  absl::StatusOr<std::vector<MetricRow>> TrainingRows(const trialv1::ReportTrainingMetricsRequest& req,
                                                      const std::string& token);

  // All below require mu_.
  // ---- master_core.cc: lookups and state changes shared by all
  absl::StatusOr<ExperimentRuntime*> FindExperiment(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<TrialRuntime*> FindTrial(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<AllocationRuntime*> Authorize(const std::string& allocation_id, const std::string& token)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetTrialState(TrialRuntime& trial, const std::string& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetExperimentState(ExperimentRuntime& exp, const std::string& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `msg` for agent `agent_id`; sent when the current WriteScope ends.
  void SendToAgentLocked(const std::string& agent_id, agentv1::MasterMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends a line from the master to a trial's logs.
  void TrialLogLocked(int64_t trial_id, const std::string& allocation_id, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- experiments.cc
  absl::Status ApplySearcherOps(ExperimentRuntime& exp, std::vector<SearcherOp> ops) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores the trial the searcher asked for; `more`: the searcher's answer.
  absl::Status CreateTrialLocked(ExperimentRuntime& exp, const CreateTrialOp& create, std::vector<SearcherOp>* more)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SaveSearcher(ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishExperiment(ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancel (kill=false: running trials checkpoint and exit) or kill.
  absl::Status StopExperimentLocked(int64_t id, bool kill) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the experiment's pending allocation requests.
  void DropPendingLocked(int64_t experiment_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // user_stops.cc: pause, cancel and kill by the user take effect even when
  // the database cannot be written (a full disk): ApplyUserStopLocked is the
  // state change; UserStopLocked commits it, or else kills the experiment's
  // processes through their agents at once, remembers the stop in
  // unrecorded_stops_ (retried by every background pass until it commits)
  // and returns UNAVAILABLE saying so.
  enum class UserStop { kPause, kCancel, kKill };
  absl::Status ApplyUserStopLocked(int64_t id, UserStop how) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PauseExperimentLocked(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UserStopLocked(int64_t id, UserStop how) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int KillExperimentProcessesNowLocked(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetryUnrecordedStopsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies every unrecorded stop to the in-memory state (committed with
  // the caller's write; RetryUnrecordedStopsLocked then forgets it).
  void ApplyUnrecordedStopsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether experiment `id` is gone or already in the state `how` leads to.
  bool UserStopInEffectLocked(int64_t id, UserStop how) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  apiv1::Experiment ExperimentProto(const ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // exp's trial summary: exp.terminal_summary when set, else computed (and
  // kept when exp and all its trials are terminal and every trial's facts
  // were read, as nothing changes it then but what clears it).
  ExperimentSummary ExperimentSummaryLocked(const ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // trial.facts.reset(), and its experiment's terminal_summary with them:
  // what every change of a trial's checkpoints or validations calls.
  void ForgetTrialFactsLocked(const TrialRuntime& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // For Searcher::ProgressWithTraining: each trial with a pending searcher
  // target -> the units it trained toward it (checkpoint_facts.h TrainedUnits;
  // a time metric's last value).
  std::map<RequestId, double> TrainedUnitsLocked(const ExperimentRuntime& exp) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A trial the searcher has closed whose latest checkpoint is at its last
  // batch has nothing left to run: COMPLETED without an allocation.
  bool CompleteIfCheckpointedLocked(ExperimentRuntime& exp, TrialRuntime& trial, std::vector<SearcherOp>* ops)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // CreateExperiment's trial.so: stores req's bytes (or finds its
  // trial_so_sha256) and runs the ABI check on `pool`'s agents; returns the
  // sha256, with the name it goes by in *so_name and the check's warnings in
  // *abi_warnings. A trial.so that fails the check is removed unless used.
  absl::StatusOr<std::string> StoreTrialSo(const apiv1::CreateExperimentRequest& req, const std::string& pool,
                                           std::string* so_name, std::vector<std::string>* abi_warnings)
      ABSL_LOCKS_EXCLUDED(mu_);

  // ---- experiment_trial_so.cc: PatchExperimentRequest.trial_so_sha256.
  // The request's trial.so checked (stored, experiment replaceable, ABI on
  // the pool's agents): the name it goes by.
  absl::StatusOr<std::string> CheckReplacementTrialSo(const apiv1::PatchExperimentRequest& req)
      ABSL_LOCKS_EXCLUDED(mu_);
  // FailedPrecondition unless `exp` is PAUSED with no allocation left.
  absl::Status CheckTrialSoReplaceableLocked(const ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailedPrecondition naming the fix when exp's trial.so is not stored.
  absl::Status CheckTrialSoStoredLocked(const ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Points exp's row at `sha256` (not yet stored); returns the old sha256,
  // and in *unshared whether no other experiment uses `sha256`.
  absl::StatusOr<std::string> ReplaceTrialSoLocked(ExperimentRuntime& exp, const std::string& sha256, bool* unshared)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After PatchExperiment committed the replacement: names `sha256` so_name
  // when it was `unshared` (a name other experiments' trial.so goes by is
  // kept), then removes `old_sha` unless an experiment still uses it.
  void FinishTrialSoReplacement(const std::string& sha256, const std::string& so_name, bool unshared,
                                const std::string& old_sha) ABSL_LOCKS_EXCLUDED(mu_);
  void RemoveArtifactIfUnusedLocked(const std::string& sha256) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- experiment_fork.cc
  // Checks req.parent_id (NotFound when unknown) and resolves the config's
  // searcher.source_checkpoint_uuid / source_trial_id to a COMPLETED
  // checkpoint (InvalidArgument naming the field otherwise) into `row`.
  absl::Status ResolveForkLocked(const apiv1::CreateExperimentRequest& req, const ExperimentConfig& config,
                                 ExperimentRow* row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets resp's warm_start_checkpoint for a trial without a checkpoint of
  // its own in an experiment with a warm-start source.
  void FillWarmStartLocked(const ExperimentRuntime& exp, const TrialRuntime& trial,
                           trialv1::GetTrialContextResponse* resp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The id of a non-terminal experiment that warm-starts from checkpoint
  // `uuid` (its new trials still load it), or 0. GC, DeleteCheckpoints and
  // DeleteExperiment keep such a checkpoint.
  int64_t WarmStartUserLocked(const std::string& uuid) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- pbt_lineage.cc (searcher pbt: children start from a parent's checkpoint)
  // The trial id of request `parent_request` of exp's searcher (0: unknown).
  int64_t PbtParentTrialIdLocked(const ExperimentRuntime& exp, int64_t parent_request) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `trial` waits for its parent's checkpoint (no allocation yet).
  bool AwaitsParentCheckpointLocked(const TrialRuntime& trial) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Binds every waiting child of exp whose parent's checkpoint at (or after)
  // the parent's last validation exists, or whose parent ended, and asks
  // for its allocation.
  void ResolvePbtChildrenLocked(ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- trials.cc
  apiv1::Trial TrialProto(const TrialRuntime& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The trial's checkpoint and validation facts (trial.facts, computed from
  // the store when unset; a store error is logged and not cached).
  TrialFacts TrialFactsLocked(const TrialRuntime& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CompleteCheckpointRow for each row with its experiment's searcher metric
  // and its trial's epoch length (rows of unknown experiments stay as read).
  void CompleteCheckpointRowsLocked(std::vector<CheckpointRow>* rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CompleteCheckpointRowLocked(CheckpointRow* row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checkpoints of an experiment and/or a trial (NotFound for unknown ids).
  absl::StatusOr<std::vector<apiv1::Checkpoint>> ListCheckpoints(std::optional<int64_t> experiment_id,
                                                                 std::optional<int64_t> trial_id);

  // ---- trial_calls.cc
  trialv1::Operation NextOperation(ExperimentRuntime& exp, TrialRuntime& trial, AllocationRuntime& alloc,
                                   int64_t total_batches) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A restarted run continues from its checkpoint at `restored_batches`:
  // archives what the earlier run reported after it and rewinds.
  void RewindTrialLocked(TrialRuntime& trial, int64_t restored_batches) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // det-trial writes metadata.json after it listed the resources: its size,
  // measured outside the lock (a file system call), unless req lists it or
  // it cannot be read (nullopt); an unauthorized caller's error otherwise.
  // An s3 experiment's new checkpoint: its manifest read outside the lock
  // and checked against req's resources (VerifyS3CheckpointReport;
  // FailedPrecondition when incomplete), metadata.json's size from it.
  absl::StatusOr<std::optional<int64_t>> MeasureCheckpointMetadata(const trialv1::ReportCheckpointRequest& req,
                                                                   const std::string& token) ABSL_LOCKS_EXCLUDED(mu_);
  // The COMPLETED checkpoint row ReportCheckpoint stores for `req`;
  // INVALID_ARGUMENT naming a resource with a negative size.
  // RESOURCE_EXHAUSTED when `row` would take `trial` over a checkpoint bound
  // (options_.checkpoint_limits); else OK, the row counted in the trial's
  // cached budget (loaded from the store on first use).
  absl::Status AdmitCheckpointLocked(TrialRuntime& trial, const CheckpointRow& row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<CheckpointRow> CheckpointRowLocked(const ExperimentRuntime& exp, const TrialRuntime& trial,
                                                    const trialv1::ReportCheckpointRequest& req,
                                                    std::optional<int64_t> metadata_size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- agents.cc
  void LoseAgent(AgentRuntime& agent, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reconciles what a registering agent runs with what the master thinks it
  // runs (see RegisterAgent).
  void ReconcileAgentLocked(AgentRuntime& agent, const agentv1::RegisterAgentRequest& req,
                            agentv1::RegisterAgentResponse* resp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleHeartbeatLocked(AgentRuntime& agent, const agentv1::Heartbeat& heartbeat)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- allocations.cc
  void RequestAllocation(ExperimentRuntime& exp, TrialRuntime& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the pending requests `drop` selects, keeping pending_trials_ in
  // step (every removal from pending_ goes through here). O(pending).
  void ErasePendingIf(const std::function<bool(const SchedRequest&)>& drop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartAllocationLocked(ExperimentRuntime& exp, TrialRuntime& trial, const Assignment& assignment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The {uid, gid} the trials of experiment owner `owner` run as on the
  // agents (Store::AgentIdsOfUser with --trial-uid-range, or a link);
  // nullopt: none (no range, not linked: the agent's --trial-user). An error
  // (range used up, store error, unusable ids) refuses the allocation.
  absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> RunAsOfOwnerLocked(const std::string& owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RefuseAllocationLocked(ExperimentRuntime& exp, TrialRuntime& trial, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The directory of the warm-start source checkpoint of `trial` when it
  // belongs to another user's experiment (the agent stages a copy for the
  // trial's uid: StartAllocation.warm_start_source_path); "" otherwise.
  std::string ForeignWarmStartLocked(const ExperimentRuntime& exp, const TrialRuntime& trial)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One rank of `allocation_id` ended with `exit_code` (128+signal when
  // killed). `lost`: the master gave up on it (agent lost, not reattachable):
  // rescheduled without counting a restart.
  void OnProcessTerminated(const std::string& allocation_id, int exit_code, const std::string& why,
                           bool lost = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What happens to the trial of `done`, an allocation whose every rank has
  // ended; returns the searcher ops that follow.
  std::vector<SearcherOp> SettleTrialLocked(ExperimentRuntime& exp, TrialRuntime& trial,
                                            const AllocationRuntime& done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SettleTrialLocked of an allocation asked to stop, lost, or ended without
  // failing: the trial resumes from its latest checkpoint, no restart counted.
  std::vector<SearcherOp> ResumeTrialLocked(ExperimentRuntime& exp, TrialRuntime& trial,
                                            const AllocationRuntime& done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs `msg` as a warning and appends it to the trial's logs as the master's.
  void WarnTrialLocked(const TrialRuntime& trial, const AllocationRuntime& done, const std::string& msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WarnTrialLocked(msg), then ends `trial` in ERROR (its error_message, if
  // empty, is `done`'s failure) and returns the searcher's ops for it.
  std::vector<SearcherOp> FailTrialLocked(ExperimentRuntime& exp, TrialRuntime& trial, const AllocationRuntime& done,
                                          const std::string& msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the end of run `done` to the trial's logs with its true reason
  // (trial_states.h RunEndLine), unless that says nothing new.
  void LogRunEndLocked(const ExperimentRuntime& exp, const TrialRuntime& trial, const AllocationRuntime& done,
                       trialv1::ExitReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SettleTrialLocked of an allocation that failed in the trial's constructor
  // or a data loader builder (exit code 5): retried once, then ERROR.
  std::vector<SearcherOp> SettleSetupFailureLocked(ExperimentRuntime& exp, TrialRuntime& trial,
                                                   const AllocationRuntime& done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `alloc` now as lost: kills what may still run of it on other agents
  // (marking them zombies there) and reschedules its trial.
  void GiveUpAllocationLocked(const std::string& allocation_id, const std::string& except_agent,
                              const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveAllocation(const AllocationRuntime& alloc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the allocation's processes to checkpoint and exit.
  void RequestStopLocked(AllocationRuntime& alloc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends KillAllocation to every agent of `alloc`: SIGKILL at once, no
  // grace period (a SIGTERMed det-trial would checkpoint; a kill takes no
  // checkpoint). A Slurm job is scancelled instead (CancelSlurmJobLocked).
  void KillAllocationLocked(AllocationRuntime& alloc, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndAllocation(AllocationRuntime& alloc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- rendezvous.cc
  // Fills alloc.rendezvous from its placements: ranks in placement order
  // (node 0 holds the chief), each rank's agent address, and for more than
  // one rank the chief's address and a port of its agent's rendezvous range.
  void FillRendezvousLocked(AllocationRuntime& alloc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- experiment_lifecycle.cc
  // FailedPrecondition when `exp` is DELETING (every mutation checks it).
  absl::Status CheckNotDeletingLocked(const ExperimentRuntime& exp) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SetArchivedLocked(int64_t experiment_id, bool archived) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One bounded step of deleting the first DELETING experiment (locks mu_
  // itself, briefly; requires it NOT held). Returns whether it did work, so
  // that the caller runs it again at once.
  bool DeletionStep() ABSL_LOCKS_EXCLUDED(mu_);

  // ---- recovery.cc
  absl::Status LoadFromStore() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds one stored experiment and its trials. One whose config or
  // searcher no longer loads is skipped (logged, OK); errors are the store's.
  absl::Status LoadExperimentLocked(const ExperimentRow& row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds the allocations that were running when the master stopped; they
  // wait for their agents to re-register (see RegisterAgent).
  absl::Status RecoverAllocations() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resumes, pauses or cancels the unfinished trials after a reload.
  void ResumeTrialsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- timeouts.cc
  void BackgroundLoop();
  // Returns the checkpoints whose directories to delete (after releasing mu_).
  std::vector<CheckpointRow> BackgroundPassLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckHeartbeatsLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckStopTimeoutsLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckRendezvousTimeoutsLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the checkpoints the experiment's GC policy no longer keeps DELETED
  // and returns them.
  std::vector<CheckpointRow> CollectGarbageLocked(ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes the checkpoints' files, outside mu_ (GC, DeleteCheckpoints,
  // experiment delete): shared_fs by CheckpointRoots::RemoveCheckpoint (only
  // under a root, never through a symlink); s3 by DeleteS3CheckpointRow
  // (checkpoint_files_s3.h: only the row's own keys under its experiment's
  // prefix; one client per experiment for the batch). A failure is logged
  // after `who` and the row left as it is (a failed s3 delete is queued for
  // RetryS3Deletes); the bytes of what was deleted at this attempt are
  // counted under `why` unless the row was already DELETED.
  void DeleteCheckpointDirs(const std::vector<CheckpointRow>& doomed, CheckpointDeletion why, const std::string& who)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Retries the due failed S3 deletes (s3_delete_retries.h), outside mu_.
  void RetryS3Deletes() ABSL_LOCKS_EXCLUDED(mu_);
  // Experiment `id`'s checkpoint_storage of type s3 resolved against the
  // master's S3 profiles with the experiment's workspace (no S3 I/O).
  // FailedPrecondition when the experiment is not loaded or not s3. When
  // `workspace` is given, it is set to the workspace resolved against.
  absl::StatusOr<ResolvedS3Storage> ExperimentS3StorageLocked(int64_t id, std::string* workspace = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK unless warm-start checkpoint `uuid` (may be empty) is in s3 storage
  // whose profile does not allow `workspace` (the error names
  // searcher.source_checkpoint_uuid).
  absl::Status CheckS3WarmStartLocked(const std::string& uuid, const std::string& workspace)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes det-trial's unfinished saves (".tmp-t<ID>-*") in checkpoint
  // directory `dir` of the known trials that have no allocation (none
  // running, or still running on an agent of a previous master): `only`
  // limits it to one trial (0: every such trial). Logs what it removed.
  void RemoveStaleCheckpointTempsLocked(const std::string& dir, int64_t only)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- agent_control.cc (resource pools, agent and slot control)
  // The agent proto (slots with enabled/draining/allocation/trial).
  apiv1::Agent AgentProtoLocked(const AgentRuntime& agent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Agent `id` in memory, else loaded (disconnected) from the store;
  // NotFound naming it.
  absl::StatusOr<AgentRuntime*> FindAgentLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Called by ScheduleLocked on the agents it offers the scheduler: disabled
  // or draining agents get enabled = false, disabled slots leave free_slots,
  // and each pool's max_slots trims the free slots so used + new <= cap.
  void ApplyAgentControlLocked(std::vector<SchedAgent>* agents) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the allocations on `agent` (only the one holding `slot` when
  // slot >= 0) to checkpoint and exit, logging `why` to their trials.
  void PreemptOnAgentLocked(const AgentRuntime& agent, int slot, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The experiment's pool (resources.resource_pool, or the default compute /
  // aux pool; at recovery the one chosen at creation) and, when its config
  // sets no priority, its pool's default priority. Call right after
  // SetJobKnobsFromConfig, before stored job overrides.
  void ApplyPoolDefaultsLocked(ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- slurm_allocations.cc (resource_manager type slurm)
  // Every pending request becomes a Slurm job at once: Slurm queues and
  // places them (ScheduleLocked calls this instead of the scheduler).
  void StartSlurmAllocationsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartSlurmAllocationLocked(ExperimentRuntime& exp, TrialRuntime& trial, const SchedRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // KillAllocationLocked for a Slurm job: scancel (or the submission dropped).
  void CancelSlurmJobLocked(AllocationRuntime& alloc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SlurmWork TakeSlurmWorkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplySlurmResultsLocked(const SlurmWork& work, const SlurmResults& res) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends every remaining rank of Slurm allocation `id` with `ends`.
  void EndSlurmAllocationLocked(const std::string& id, std::vector<RankEnd> ends) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<SlurmDriver> slurm_driver_;  // set by Create with Slurm
  std::mutex slurm_pass_mu_;                   // one RunSlurmPass at a time; before mu_
  std::vector<SlurmSubmission> slurm_submit_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> slurm_cancel_ ABSL_GUARDED_BY(mu_);
  int64_t slurm_next_poll_mono_ms_ ABSL_GUARDED_BY(mu_) = 0;

  const MasterOptions options_;
  const std::shared_ptr<const Clock> clock_;
  std::unique_ptr<Store> store_;
  // Scans of recent downsampled charts (metric_queries.cc); its own lock.
  ChartCache chart_cache_{256 << 20};
  ArtifactStore artifacts_;
  CheckpointRoots checkpoint_roots_;  // set once by Create
  S3Profiles s3_profiles_;            // set once by Create (--s3-credentials-file)
  S3DeleteRetries s3_delete_retries_;  // failed S3 checkpoint deletes; its own lock
  const int64_t started_mono_ms_;
  const int64_t started_wall_ms_;
  std::string cluster_id_;
  std::string master_id_;  // random, new at every start

  std::mutex mu_;
  LockProbe ping_probe_{mu_};  // Ping's (after mu_: destroyed first)
  std::condition_variable preempt_cv_;
  std::condition_variable rendezvous_cv_;  // a rank reported in AllocationRendezvous
  std::string trial_master_address_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::unique_ptr<ExperimentRuntime>> experiments_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::unique_ptr<TrialRuntime>> trials_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<AllocationRuntime>> allocations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<AgentRuntime>> agents_ ABSL_GUARDED_BY(mu_);
  std::vector<SchedRequest> pending_ ABSL_GUARDED_BY(mu_);
  // The trials with a request in pending_ (at most one each): RequestAllocation
  // asks here in O(1) instead of scanning pending_ per trial.
  std::unordered_set<int64_t> pending_trials_ ABSL_GUARDED_BY(mu_);
  int64_t submit_order_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::pair<std::string, agentv1::MasterMessage>> agent_outbox_ ABSL_GUARDED_BY(mu_);
  bool reloading_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int64_t, UserStop> unrecorded_stops_ ABSL_GUARDED_BY(mu_);  // user_stops.cc
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::condition_variable stop_cv_;
  std::thread background_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_MASTER_CORE_H_
