// det::agent::Agent: one per node. Registers the node's slots with the
// master (AgentService.RegisterAgent), keeps the session's Connect stream
// alive (heartbeats, reconnect with backoff, re-registration), and runs the
// trial runtime processes (det-trial --managed) the master asks for,
// reporting their state changes and output lines.
//
// The class is defined in four files: agent.cc (the session with the
// master: registration, the Connect stream, reconnects, artifact fetches),
// allocations.cc (starting, killing and signalling allocations' processes),
// outbox.cc (the messages queued for the master) and agent_metrics.cc (what
// its /metrics reports).
#ifndef DET_AGENT_AGENT_H_
#define DET_AGENT_AGENT_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/artifact_cache.h"
#include "agent/prestart_pool.h"
#include "agent/process_launcher.h"
#include "common/det_version.h"
#include "det/agent/v1/agent.grpc.pb.h"

namespace det::agent {

struct AgentOptions {
  // host:port of the master's AgentService; required.
  std::string master_address;
  // [a-zA-Z0-9_.-]{1,128}; required.
  std::string agent_id;
  std::string hostname;
  // Addresses of this host; empty: {hostname}.
  std::vector<std::string> addresses;
  std::string resource_pool = "default";
  // Ports the master may give a distributed allocation's chief (rank 0) on
  // this host for its process group's store; 0/0: the master's default
  // (29400..29499).
  int rendezvous_first_port = 0;
  int rendezvous_last_port = 0;
  // The slots offered (see devices.h); at least one.
  std::vector<det::api::v1::Device> devices;
  // Holds cache/<sha256>.so and allocations/<allocation id>/; required.
  std::string work_dir;
  // The det-trial binary run for every rank; required.
  std::string det_trial_path;
  // Sent as x-det-cluster-secret on every call (and in RegisterAgent).
  std::string cluster_secret;
  // The per-agent credential file (agent_credential.h); empty:
  // <work_dir>/agent-credential.
  std::string credential_path;
  // Run trial processes as this user (the agent must be root); unset: as
  // the agent's own user.
  std::optional<RunAs> trial_user;
  // Put each trial process tree in a cgroup v2 of its own (under the
  // agent's cgroup) where the agent can create one; false: the reaper only.
  bool use_cgroups = true;
  // Sent in RegisterAgent; the master refuses another MAJOR.MINOR than its own.
  std::string version = kDetVersion;
  // Reconnect backoff: initial, doubling up to max.
  absl::Duration backoff_initial = absl::Milliseconds(100);
  absl::Duration backoff_max = absl::Seconds(1);
  // Log batching: a LogBatch is sent at this many lines or this age.
  size_t log_batch_lines = 100;
  absl::Duration log_batch_delay = absl::Milliseconds(100);
  // Null: insecure credentials.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Prestarted det-trial processes kept idle (prestart_pool.h;
  // --prestart-pool); 0: every rank starts a fresh process.
  int prestart_pool = 0;
};

// Thread-safe. Typical use: construct, Run() on one thread, Shutdown() from
// another (e.g. a signal handler thread), destroy.
class Agent {
 public:
  explicit Agent(AgentOptions options);
  // Shuts down, SIGKILLs every process still running and joins all threads.
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Registers and serves the session until Shutdown() (returns OK) or a
  // registration error that retrying cannot fix (returned: AlreadyExists
  // when another live agent has this id, Unauthenticated wrong cluster
  // secret, InvalidArgument, NotFound, FailedPrecondition,
  // PermissionDenied, Unimplemented). Transient errors (master down, stream
  // broken) are retried with exponential backoff; running processes keep
  // running across reconnects. Call at most once.
  absl::Status Run();

  // Makes Run() return soon. Idempotent; any thread.
  void Shutdown();

  // Allocations that have live (or starting) processes here.
  std::vector<std::string> RunningAllocationIds();

  // One rank's process that runs here now (started, not yet exited).
  struct RunningRank {
    int64_t trial_id = 0;
    std::string allocation_id;
    int rank = 0;
    int64_t pid = 0;
  };
  // What /metrics reports of the agent's work (agent_metrics.cc): its slots,
  // those that hold an allocation, and the running ranks.
  struct WorkView {
    int slots = 0;
    int slots_used = 0;
    std::vector<RunningRank> ranks;
  };
  WorkView ViewWork();

 private:
  struct Proc {
    int rank = 0;
    std::unique_ptr<Process> process;
    int64_t pid = 0;
    bool running_reported = false;  // RUNNING enqueued
    std::optional<ExitStatus> pending_exit;  // exited before RUNNING was sent
    bool done = false;  // TERMINATED enqueued
    std::vector<int32_t> device_ids;  // this rank's slots
  };
  struct Allocation {
    std::string id;
    std::string task_id;
    int64_t trial_id = 0;
    std::vector<int32_t> device_ids;
    bool starting = true;
    bool kill_requested = false;
    absl::Duration kill_grace;
    std::map<int, Proc> procs;  // by rank; entries are never erased
    // Who its ranks run as (StartAllocation.run_as_uid, else --trial-user);
    // unset: as the agent.
    std::optional<RunAs> run_as;
  };
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  using Env = std::map<std::string, std::string>;

  // The session with the master (agent.cc).
  absl::Status Register(bool re_register);
  // Runs one Connect stream until it breaks; returns its final status and
  // sets *received when any MasterMessage arrived.
  grpc::Status RunSession(bool* received);
  void WriterLoop(grpc::ClientReaderWriter<det::agent::v1::AgentMessage,
                                           det::agent::v1::MasterMessage>* stream);
  void HandleCommand(const det::agent::v1::MasterMessage& msg);
  absl::Status FetchArtifact(const std::string& sha256, const ArtifactCache::ChunkSink& sink);
  void SleepUnlessShutdown(absl::Duration d);
  // Adds x-det-cluster-secret when the agent has a secret.
  void AddClusterSecret(grpc::ClientContext* ctx) const;
  std::string CredentialPath() const;
  // Loads the credential file and, where possible, creates cgroup_parent_.
  absl::Status PrepareHost();
  // Keeps a credential the master issued (in memory and in its file).
  void KeepCredential(const std::string& credential);

  // Allocations and their processes (allocations.cc). Runs on a worker
  // thread per StartAllocation command.
  void StartAllocation(int64_t seq, const det::agent::v1::StartAllocation& start);
  // <work_dir>/allocations/<allocation_id>, the allocation's working
  // directory. The id comes from the master: InvalidArgument naming
  // "allocation_id" when it is not one file name or the directory would lead
  // outside <work_dir>/allocations (common/safe_path.h).
  absl::StatusOr<std::string> AllocationDir(const std::string& allocation_id) const;
  // Records the allocation and takes its devices; false when the command was
  // answered instead (already running, duplicate rank, unknown or busy
  // device).
  bool Reserve(int64_t seq, const det::agent::v1::StartAllocation& start,
               const std::shared_ptr<Allocation>& alloc);
  // Refuses a start before any process exists: every rank TERMINATED with
  // the status's message, then the command's result.
  void RefuseStartLocked(int64_t seq, const det::agent::v1::StartAllocation& start,
                         const Allocation& alloc, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails every rank of a reserved allocation that has not started and ends
  // its start with `status`.
  void FailStart(int64_t seq, Allocation& alloc, const absl::Status& status);
  // The path of the allocation's trial.so in the cache, fetched from the
  // master when missing; on failure the start has failed (FailStart).
  absl::StatusOr<std::string> FetchTrialSo(int64_t seq, const det::agent::v1::StartAllocation& start,
                                           Allocation& alloc);
  // Launches every rank (LaunchRank), marks the allocation started and sends
  // the command's result (the first launch error, if any).
  void LaunchRanks(int64_t seq, const det::agent::v1::StartAllocation& start, Allocation& alloc,
                   const Env& base_env, const std::string& so_path, const std::string& dir,
                   const std::string& config_path);
  // Starts one rank's det-trial (unless the allocation is being killed).
  // Returns the launch error, if any (the rank is then TERMINATED).
  absl::Status LaunchRank(const det::agent::v1::StartAllocation& start,
                          const det::agent::v1::ProcessSpec& spec, Allocation& alloc,
                          const Env& base_env, const std::string& so_path, const std::string& dir,
                          const std::string& config_path);
  // Records a launched (or failed) process of `rank` and reports it.
  absl::Status AdoptProcess(Allocation& alloc, int rank,
                            absl::StatusOr<std::unique_ptr<Process>> process);
  // The environment of one rank: `base_env`, the rank's own variables and
  // the DET_* variables det-trial reads.
  Env RankEnvironment(const det::agent::v1::StartAllocation& start,
                      const det::agent::v1::ProcessSpec& spec, const Env& base_env,
                      const std::string& so_path, const std::string& config_path) const;
  void KillAllocation(int64_t seq, const det::agent::v1::KillAllocation& kill);
  void SignalAllocation(int64_t seq, const det::agent::v1::SignalAllocation& sig);
  void KillLocal(const std::string& allocation_id, absl::Duration grace, const std::string& reason);
  void OnExit(const std::string& allocation_id, int rank, const ExitStatus& status);
  // Marks `rank` done (its TERMINATED is about to be enqueued) and frees its
  // devices at once, so the master may reuse the slot as soon as it hears.
  void MarkDoneLocked(Allocation& alloc, int rank) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> RunningIdsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes finished allocations and joins finished workers.
  void Reap();

  // Messages queued for the master (outbox.cc): command results, process
  // states, log lines (batched) and heartbeats.
  void OnLine(const std::string& allocation_id, int rank, OutputStream stream, std::string line);
  void SendResult(int64_t seq, absl::Status status);
  // The result of command `seq` (code 0 with a message for "already running").
  void EnqueueResultLocked(int64_t seq, absl::StatusCode code, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueLocked(det::agent::v1::AgentMessage msg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueStateLocked(const Allocation& alloc, int rank, det::agent::v1::ProcessState state,
                          int64_t pid, const ExitStatus* exit, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AgentLogLocked(const Allocation& alloc, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushLogsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A heartbeat naming the live allocations.
  det::agent::v1::AgentMessage HeartbeatLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AgentOptions options_;
  ArtifactCache cache_;
  // <agent's cgroup>/det-agent-<pid>, holding a cgroup per trial process;
  // "" when cgroups are not used (set by Run() before any thread).
  std::string cgroup_parent_;
  std::unique_ptr<det::agent::v1::AgentService::Stub> stub_;  // set by Run() before threads

  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::string session_token_ ABSL_GUARDED_BY(mu_);
  // This agent id's credential (from its file, or as the master issued it).
  std::string agent_credential_ ABSL_GUARDED_BY(mu_);
  int heartbeat_interval_ms_ ABSL_GUARDED_BY(mu_) = 5000;
  bool session_done_ ABSL_GUARDED_BY(mu_) = false;
  // Contexts of RPCs in flight, cancelled by Shutdown().
  std::set<grpc::ClientContext*> contexts_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Allocation>> allocations_ ABSL_GUARDED_BY(mu_);
  std::map<int32_t, std::string> busy_devices_ ABSL_GUARDED_BY(mu_);  // device id -> allocation
  std::deque<det::agent::v1::AgentMessage> outbox_ ABSL_GUARDED_BY(mu_);
  std::deque<det::api::v1::TaskLogLine> log_buffer_ ABSL_GUARDED_BY(mu_);
  absl::Time log_buffer_since_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_log_lines_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Worker> workers_ ABSL_GUARDED_BY(mu_);
  // Null without --prestart-pool. Last: destroyed first.
  std::unique_ptr<PrestartPool> pool_;
};

}  // namespace det::agent

#endif  // DET_AGENT_AGENT_H_
