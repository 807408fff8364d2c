// MasterCore: the master's state and decisions behind all three gRPC services
// (det.api.v1 for users, det.agent.v1 for agents, det.trial.v1 for trial
// processes) and the REST API. Every method returns absl::Status /
// absl::StatusOr with canonical codes (InvalidArgument for a bad field,
// NotFound for an unknown id, FailedPrecondition for a wrong state,
// AlreadyExists, Unauthenticated / PermissionDenied for a bad token) and is
// thread-safe. Search and scheduling decisions come from pure code
// (master/search); state lives in SQLite (master/store).
#ifndef DET_MASTER_CORE_MASTER_CORE_H_
#define DET_MASTER_CORE_MASTER_CORE_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/experiment_config.h"
#include "det/agent/v1/agent.pb.h"
#include "det/api/v1/api.pb.h"
#include "det/trial/v1/trial.pb.h"
#include "master/core/artifact_store.h"
#include "master/search/scheduler.h"
#include "master/search/searcher.h"
#include "master/store/store.h"

namespace det::master {

namespace apiv1 = ::det::api::v1;
namespace agentv1 = ::det::agent::v1;
namespace trialv1 = ::det::trial::v1;

struct MasterOptions {
  std::string data_dir = "det-master-data";
  std::string db_path;          // default <data_dir>/det.db
  std::string checkpoint_root;  // default <data_dir>/checkpoints (used when a config has no checkpoint_storage)
  std::string cluster_name = "det-cpp";
  int heartbeat_interval_ms = 1000;
  // An agent silent (or disconnected) this long is lost: its trials are
  // rescheduled elsewhere. After a master restart, an agent has this long to
  // re-register before the allocations it ran are given up.
  int heartbeat_timeout_ms = 15000;
  // A trial asked to stop (pause, cancel, kill, preemption) that has not
  // exited after this long is killed (SIGKILL through its agent).
  int64_t stop_timeout_ms = 60000;
  int64_t max_trial_so_bytes = 256 << 20;
  // The largest request the servers accept: CreateExperiment with a trial.so
  // of max_trial_so_bytes inline, plus room for its config.
  int64_t max_request_bytes() const { return max_trial_so_bytes + (16 << 20); }
};

// Outbound messages to one connected agent; the Connect stream's writer pops
// them. Thread-safe.
class AgentSession {
 public:
  explicit AgentSession(std::string agent_id) : agent_id_(std::move(agent_id)) {}
  const std::string& agent_id() const { return agent_id_; }
  void Push(agentv1::MasterMessage message);
  // Waits up to `timeout` for a message; false on timeout or when closed.
  bool Pop(agentv1::MasterMessage* message, std::chrono::milliseconds timeout);
  void Close();
  bool closed() const;

 private:
  const std::string agent_id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<agentv1::MasterMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

class MasterCore {
 public:
  static absl::StatusOr<std::unique_ptr<MasterCore>> Create(MasterOptions options);
  ~MasterCore();

  // The gRPC address trial processes use to reach the master.
  void set_trial_master_address(std::string address);

  // ---- det.api.v1 ----
  apiv1::GetMasterResponse GetMaster();
  absl::StatusOr<apiv1::CreateExperimentResponse> CreateExperiment(const apiv1::CreateExperimentRequest& req);
  absl::StatusOr<apiv1::GetExperimentsResponse> GetExperiments(const apiv1::GetExperimentsRequest& req);
  absl::StatusOr<apiv1::Experiment> GetExperiment(int64_t id);
  absl::Status ActivateExperiment(int64_t id);
  absl::Status PauseExperiment(int64_t id);
  absl::Status CancelExperiment(int64_t id);
  absl::Status KillExperiment(int64_t id);
  // Changes name, description, labels and/or the checkpoint GC policy (which
  // is applied at once to the checkpoints of trials that have ended).
  absl::StatusOr<apiv1::Experiment> PatchExperiment(const apiv1::PatchExperimentRequest& req);
  absl::StatusOr<apiv1::GetExperimentTrialsResponse> GetExperimentTrials(const apiv1::GetExperimentTrialsRequest& req);
  absl::StatusOr<std::vector<apiv1::Checkpoint>> GetCheckpoints(std::optional<int64_t> experiment_id,
                                                                std::optional<int64_t> trial_id);
  absl::StatusOr<apiv1::Checkpoint> GetCheckpoint(const std::string& uuid);
  absl::StatusOr<apiv1::Trial> GetTrial(int64_t id);
  absl::Status KillTrial(int64_t id);
  absl::StatusOr<apiv1::GetTrialMetricsResponse> GetTrialMetrics(const apiv1::GetTrialMetricsRequest& req);
  // Logs of a trial with id > after_id (limit 0 = all).
  absl::StatusOr<std::vector<apiv1::TaskLog>> GetTrialLogs(int64_t trial_id, int64_t after_id, int64_t limit);
  // Whether the trial has ended (for following logs).
  absl::StatusOr<bool> TrialEnded(int64_t trial_id);
  apiv1::GetAgentsResponse GetAgents();
  apiv1::GetSlotsResponse GetSlots();

  // ---- det.agent.v1 ----
  absl::StatusOr<agentv1::RegisterAgentResponse> RegisterAgent(const agentv1::RegisterAgentRequest& req);
  // Binds the Connect stream of the agent holding `session_token`.
  absl::StatusOr<std::shared_ptr<AgentSession>> AttachAgent(const std::string& session_token);
  void HandleAgentMessage(const std::string& agent_id, const agentv1::AgentMessage& message);
  // The stream of `session` ended.
  void DetachAgent(const std::shared_ptr<AgentSession>& session);
  const ArtifactStore& artifacts() const { return artifacts_; }

  // ---- det.trial.v1 (every call names its allocation and carries its token) ----
  absl::StatusOr<trialv1::GetTrialContextResponse> GetTrialContext(const trialv1::GetTrialContextRequest& req,
                                                                    const std::string& token);
  absl::StatusOr<trialv1::GetNextOperationResponse> GetNextOperation(const trialv1::GetNextOperationRequest& req,
                                                                     const std::string& token);
  absl::Status ReportTrainingMetrics(const trialv1::ReportTrainingMetricsRequest& req, const std::string& token);
  absl::Status ReportValidationMetrics(const trialv1::ReportValidationMetricsRequest& req, const std::string& token);
  absl::Status ReportCheckpoint(const trialv1::ReportCheckpointRequest& req, const std::string& token);
  absl::Status CompleteSearcherOperation(const trialv1::CompleteSearcherOperationRequest& req,
                                         const std::string& token);
  absl::Status ReportEarlyExit(const trialv1::ReportEarlyExitRequest& req, const std::string& token);
  // Waits up to req.timeout_ms for a preemption request.
  absl::StatusOr<bool> ShouldPreempt(const trialv1::ShouldPreemptRequest& req, const std::string& token);
  absl::Status AckPreemption(const trialv1::AckPreemptionRequest& req, const std::string& token);
  // Records rank req.rank's address (empty: its agent's first address) and
  // port, then waits up to `wait` until every rank of the allocation has
  // reported; returns the rendezvous with every rank's address.
  // InvalidArgument for a rank outside [0, world_size); DeadlineExceeded when
  // some rank has not reported within `wait`; FailedPrecondition when the
  // allocation ends meanwhile.
  absl::StatusOr<trialv1::AllocationRendezvousResponse> AllocationRendezvous(
      const trialv1::AllocationRendezvousRequest& req, const std::string& token,
      std::chrono::milliseconds wait = std::chrono::seconds(60));
  // OK when `token` is the token of live allocation `allocation_id`: NotFound
  // for an unknown allocation, PermissionDenied for another one's token.
  absl::Status AuthorizeAllocation(const std::string& allocation_id, const std::string& token);
  absl::Status ReportTrialLogs(const trialv1::ReportTrialLogsRequest& req, const std::string& token);

  // Store access for benchmarks and tests.
  Store* store() { return store_.get(); }

 private:
  struct TrialRuntime {
    TrialRow row;
    int64_t searcher_target = 0;  // pending ValidateAfter length (0: none)
    bool close_requested = false;
    int64_t last_validation = 0;
    int64_t last_checkpoint = 0;
    int64_t next_op_id = 1;
    std::optional<trialv1::Operation> current_op;
    std::string allocation_id;  // current allocation ("" when none)
    bool exit_completed = false;  // EXIT(COMPLETED) was handed out
    bool killed = false;  // killed or canceled by the user
    bool invalid_hp = false;
    std::string error_message;
  };
  struct ExperimentRuntime {
    ExperimentRow row;
    ExperimentConfig config;
    std::unique_ptr<Searcher> searcher;
    std::map<int64_t, int64_t> trial_by_request;
    int64_t max_length_batches = 0;
    int64_t validation_period = 0;
    int64_t checkpoint_period = 0;
    int64_t global_batch_size = 0;
    bool search_done = false;
    std::string checkpoint_dir;
    bool gc_pending = false;  // run checkpoint GC at the next chance
  };
  struct AllocationRuntime {
    std::string id;
    std::string token;
    int64_t trial_id = 0;
    int64_t experiment_id = 0;
    std::vector<SlotAssignment> placements;
    int processes = 0;
    int terminated = 0;
    bool failed = false;
    bool preempt = false;  // asked to checkpoint and exit
    std::string failure;
    // How the allocation ends decides whether it counts as a restart:
    bool lost = false;       // its agent was lost, or it could not be reattached
    bool kill_sent = false;  // KillAllocation was sent
    bool failed_unasked = false;  // a rank failed before any stop was asked
    bool deterministic = false;  // a rank exited with det-trial's config/library error code
    int64_t stop_requested_ms = 0;  // when preempt/kill was first asked (0: never)
    bool force_killed = false;  // the stop timeout escalated to SIGKILL
    int64_t created_ms = 0;
    int64_t missing_since_ms = 0;  // first heartbeat of its agent not listing it
    // How its ranks find each other (world size, chief address/port, every
    // rank's agent and address), as sent in StartAllocation; addresses and
    // ports reported through AllocationRendezvous are filled in.
    apiv1::RendezvousInfo rendezvous;
    std::set<int> rendezvous_reported;  // ranks that called AllocationRendezvous
  };
  struct AgentRuntime {
    AgentRow row;
    std::vector<apiv1::Device> devices;
    std::set<int> used_slots;
    std::map<int, std::string> slot_allocation;
    std::string session_token;
    std::shared_ptr<AgentSession> session;
    int64_t last_heartbeat_ms = 0;
    bool connected = false;  // a Connect stream is attached
    std::vector<std::string> addresses;
    // Ports this agent lets the master hand out as chief_port
    // (RegisterAgentRequest.rendezvous_ports), and where the next pick starts.
    int rendezvous_first = 29400;
    int rendezvous_last = 29499;
    int next_rendezvous_port = 0;
    // Allocations the agent still runs that the master gave up (after a
    // master restart or an agent loss): they hold unknown slots, so nothing
    // is placed on the agent until its heartbeats stop listing them.
    std::set<std::string> zombies;
  };

  // Holds one store transaction for the life of a locked core operation and,
  // when it ends, commits it and only then sends the agent messages queued
  // meanwhile: a crash never leaves an agent running what the database does
  // not know. Construct right after locking mu_.
  class WriteScope {
   public:
    explicit WriteScope(MasterCore* core) : core_(core), txn_(core->store_.get()) {}
    ~WriteScope();

   private:
    MasterCore* core_;
    Store::Transaction txn_;
  };

  MasterCore(MasterOptions options, std::unique_ptr<Store> store);
  void BackgroundLoop();
  // One pass of the background work: heartbeat timeouts, stop timeouts,
  // scheduling, checkpoint GC decisions. Returns checkpoint directories to
  // delete (after releasing mu_).
  std::vector<std::string> BackgroundPassLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // All below require mu_.
  absl::Status ApplySearcherOps(ExperimentRuntime& exp, std::vector<SearcherOp> ops) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SaveSearcher(ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RequestAllocation(ExperimentRuntime& exp, TrialRuntime& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fills alloc.rendezvous from its placements: ranks in placement order
  // (node 0 holds the chief), each rank's agent address, and for more than
  // one rank the chief's address and a port of its agent's rendezvous range.
  void FillRendezvousLocked(AllocationRuntime& alloc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One rank of `allocation_id` ended with `exit_code` (128+signal when
  // killed). `lost`: the master gave up on it (agent lost, not reattachable):
  // rescheduled without counting a restart.
  void OnProcessTerminated(const std::string& allocation_id, int exit_code, const std::string& why,
                           bool lost = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `alloc` now as lost: kills what may still run of it on other agents
  // (marking them zombies there) and reschedules its trial.
  void GiveUpAllocationLocked(const std::string& allocation_id, const std::string& except_agent,
                              const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveAllocation(const AllocationRuntime& alloc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks the allocation's processes to checkpoint and exit.
  void RequestStopLocked(AllocationRuntime& alloc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `msg` for agent `agent_id`; sent when the current WriteScope ends.
  void SendToAgentLocked(const std::string& agent_id, agentv1::MasterMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A trial the searcher has closed whose latest checkpoint is at its last
  // batch has nothing left to run: COMPLETED without an allocation.
  bool CompleteIfCheckpointedLocked(ExperimentRuntime& exp, TrialRuntime& trial, std::vector<SearcherOp>* ops)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends a line from the master to a trial's logs.
  void TrialLogLocked(int64_t trial_id, const std::string& allocation_id, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the checkpoints the experiment's GC policy no longer keeps DELETED
  // and returns their directories.
  std::vector<std::string> CollectGarbageLocked(ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  apiv1::CheckpointGcPolicy GcPolicy(const ExperimentRuntime& exp) const;
  void EndAllocation(AllocationRuntime& alloc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MaybeFinishExperiment(ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetTrialState(TrialRuntime& trial, const std::string& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetExperimentState(ExperimentRuntime& exp, const std::string& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends KillAllocation to every agent of `alloc` (SIGTERM, then SIGKILL
  // after `grace_seconds`; 0: SIGKILL at once).
  void KillAllocationLocked(AllocationRuntime& alloc, const std::string& reason, int grace_seconds = 10)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoseAgent(AgentRuntime& agent, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<AllocationRuntime*> Authorize(const std::string& allocation_id, const std::string& token)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  trialv1::Operation NextOperation(ExperimentRuntime& exp, TrialRuntime& trial, AllocationRuntime& alloc,
                                   int64_t total_batches) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  apiv1::Experiment ExperimentProto(const ExperimentRuntime& exp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  apiv1::Trial TrialProto(const TrialRuntime& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<ExperimentRuntime*> FindExperiment(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<TrialRuntime*> FindTrial(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadFromStore() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rebuilds the allocations that were running when the master stopped; they
  // wait for their agents to re-register (see RegisterAgent).
  absl::Status RecoverAllocations() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MasterOptions options_;
  std::unique_ptr<Store> store_;
  ArtifactStore artifacts_;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  const std::chrono::system_clock::time_point started_wall_ = std::chrono::system_clock::now();
  std::string cluster_id_;
  std::string master_id_;  // random, new at every start

  std::mutex mu_;
  std::condition_variable preempt_cv_;
  std::condition_variable rendezvous_cv_;  // a rank reported in AllocationRendezvous
  std::string trial_master_address_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::unique_ptr<ExperimentRuntime>> experiments_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::unique_ptr<TrialRuntime>> trials_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<AllocationRuntime>> allocations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<AgentRuntime>> agents_ ABSL_GUARDED_BY(mu_);
  std::vector<SchedRequest> pending_ ABSL_GUARDED_BY(mu_);
  int64_t submit_order_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::pair<std::string, agentv1::MasterMessage>> agent_outbox_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::condition_variable stop_cv_;
  std::thread background_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_MASTER_CORE_H_
