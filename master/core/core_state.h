// The master's in-memory state of experiments, trials, allocations and
// agents (private to master/core). MasterCore holds them under its mutex;
// the rows they carry are what the Store persists.
#ifndef DET_MASTER_CORE_CORE_STATE_H_
#define DET_MASTER_CORE_CORE_STATE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/abi_check.h"
#include "common/batch_lengths.h"
#include "common/experiment_config.h"
#include "det/api/v1/cluster.pb.h"
#include "det/trial/v1/trial.pb.h"
#include "google/protobuf/struct.pb.h"
#include "master/core/agent_session.h"
#include "master/search/scheduler.h"
#include "master/search/searcher.h"
#include "master/store/store.h"

namespace det::master {

// Experiment and trial states as stored (the proto enums without "STATE_").
inline constexpr char kActive[] = "ACTIVE";
inline constexpr char kPaused[] = "PAUSED";
inline constexpr char kCompleted[] = "COMPLETED";
inline constexpr char kCanceled[] = "CANCELED";
inline constexpr char kError[] = "ERROR";
inline constexpr char kStoppingCanceled[] = "STOPPING_CANCELED";
inline constexpr char kStoppingKilled[] = "STOPPING_KILLED";
// A terminal experiment being deleted (DeleteExperiment; experiment_lifecycle.cc).
inline constexpr char kDeleting[] = "DELETING";

inline bool Terminal(const std::string& state) {
  return state == kCompleted || state == kCanceled || state == kError;
}
inline bool Stopping(const std::string& state) { return state == kStoppingCanceled || state == kStoppingKilled; }

// What a trial's stored checkpoints and validations say (checkpoint_facts.h;
// MasterCore::TrialFactsLocked computes it from the store).
struct TrialFacts {
  // The best COMPLETED checkpoint by its validation's searcher metric ("":
  // none) and that metric.
  std::string best_checkpoint_uuid;
  std::optional<double> best_checkpoint_metric;
  // When row.latest_checkpoint_uuid was reported (0: none).
  int64_t latest_checkpoint_ms = 0;
  // The validation with the best searcher metric (archived ones included, as
  // row.best_validation), and the newest unarchived one.
  std::optional<MetricRow> best_validation;
  std::optional<MetricRow> latest_validation;
};

struct TrialRuntime {
  TrialRow row;
  // TrialFactsLocked's cache; reset wherever a checkpoint or validation of
  // the trial is stored, deleted or archived.
  mutable std::optional<TrialFacts> facts;
  // Pending ValidateAfter length in the searcher's unit (0: none), and the
  // same in this trial's batches (0 for a training metric such as tokens):
  // trial_lengths.h.
  int64_t searcher_target = 0;
  int64_t target_batches = 0;
  // This trial's lengths in batches with its own global_batch_size.
  BatchLengths lengths;
  // The last value of a time_metric training metric the runtime reported
  // (GetNextOperation); unset when none.
  std::optional<double> time_metric_value;
  bool close_requested = false;
  int64_t last_validation = 0;
  int64_t last_checkpoint = 0;
  // What the trial's checkpoint rows hold (CheckpointLimits); loaded from the
  // store at the first report, then counted here.
  std::optional<CheckpointBudget> checkpoint_budget;
  int64_t next_op_id = 1;
  std::optional<::det::trial::v1::Operation> current_op;
  std::string allocation_id;  // current allocation ("" when none)
  bool exit_completed = false;  // EXIT(COMPLETED) was handed out
  bool killed = false;  // killed or canceled by the user
  bool invalid_hp = false;
  std::string error_message;
  // Allocations in a row that ended with det-trial's setup error (exit code
  // 5: the constructor or a data loader builder threw). The first is retried,
  // the second is final (allocations.cc). Not stored: a restarted master may
  // retry once more.
  int setup_failures = 0;
  // Set when the scheduler preempts the trial ("preempted for experiment M
  // (priority P)"), cleared when its next allocation starts (Trial.preemption).
  std::string preemption;
  // checkpoint_policy asked for a checkpoint after the validation at these
  // batches (-1: none); validation_policy.h.
  int64_t policy_checkpoint_at = -1;
  // pbt: the parent ended without the checkpoint this trial waited for.
  bool pbt_parent_gone = false;
};

// What ExperimentProto shows of an experiment's trials (experiments.cc).
struct ExperimentSummary {
  std::map<std::string, int32_t> trials_by_state;  // as trial lists show them
  std::string best_checkpoint_uuid;
  std::string latest_checkpoint_uuid;
  std::optional<double> best_validation;
  int64_t best_trial = 0;
  double progress = 0;
};

// The config as readers see it (secret-looking values redacted).
struct ShownConfig {
  std::string yaml;
  std::optional<google::protobuf::Struct> config;
};

struct ExperimentRuntime {
  ExperimentRow row;  // row.owner: the creator's username ("" for none)
  int64_t owner_id = 0;  // the creator's user id (0 when none or deleted)
  ExperimentConfig config;
  // profiling.enabled as the trials see it: from row.config_yaml (the text
  // every trial of the experiment receives) parsed as det-trial parses it,
  // which can differ from `config` (the stored resolved JSON; a v0.2.0 one
  // has no profiling key). Set at the first profiler report (metrics_logs.cc).
  std::optional<bool> trial_profiling;
  std::unique_ptr<Searcher> searcher;
  std::map<int64_t, int64_t> trial_by_request;
  // The searcher's unit and full length (trial_lengths.h).
  SearcherLength searcher_length;
  bool search_done = false;
  std::string checkpoint_dir;
  bool gc_pending = false;  // run checkpoint GC at the next chance
  // The job's scheduling knobs: the config's resources.* (priority default
  // 42) at creation, changed by UpdateJob (stored in experiments.job_*).
  // The scheduler reads these, never the config.
  int priority = 42;           // 1..99, lower first
  double weight = 1;           // > 0, fair share within a priority
  int max_slots = 0;           // most slots held at once; 0: no cap
  double queue_position = 0;   // order within a priority; default: the id
  // ExperimentProto's costly parts, kept between calls under the core's
  // mutex. shown_config is made at the first read: row.config_yaml and
  // row.config_json never change after CreateExperiment. terminal_summary
  // is kept only once the experiment and every trial of it are terminal (and
  // every trial's facts were read); MasterCore::SetTrialState,
  // SetExperimentState and ForgetTrialFactsLocked clear it.
  mutable std::optional<ShownConfig> shown_config;
  mutable std::optional<ExperimentSummary> terminal_summary;
};

// Sets the job knobs from the config (and queue_position from row.id, which
// must be known). Stored overrides are applied after this.
inline void SetJobKnobsFromConfig(ExperimentRuntime& e) {
  e.priority = static_cast<int>(e.config.resources.priority.value_or(42));
  e.weight = e.config.resources.weight;
  e.max_slots = static_cast<int>(e.config.resources.max_slots.value_or(0));
  e.queue_position = static_cast<double>(e.row.id);
}

// Times named *_mono_ms are Clock::MonotonicMs() readings (for policies);
// the others are wall times (stored, shown).
struct AllocationRuntime {
  std::string id;
  // SHA-256 (hex) of the allocation token: the token is sent to the agent
  // once, never kept (MasterCore::Authorize compares hashes in constant time).
  std::string token_sha256;
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
  bool setup_failed = false;  // a rank exited with det-trial's setup error code (5)
  // A rank reported why it fails (ReportEarlyExit): the first report is the
  // trial's error_message; a peer that fails because of it reports later.
  bool early_exit_reported = false;
  int64_t stop_requested_mono_ms = 0;  // when preempt/kill was first asked (0: never)
  bool force_killed = false;  // the stop timeout escalated to SIGKILL
  int64_t created_ms = 0;  // wall (stored)
  int64_t created_mono_ms = 0;  // when this master created or recovered it
  int64_t missing_since_mono_ms = 0;  // first heartbeat of its agent not listing it
  // How its ranks find each other (world size, chief address/port, every
  // rank's agent and address), as sent in StartAllocation; addresses and
  // ports reported through AllocationRendezvous are filled in.
  ::det::api::v1::RendezvousInfo rendezvous;
  std::set<int> rendezvous_reported;  // ranks that called AllocationRendezvous
  int64_t rendezvous_started_mono_ms = 0;  // first rank's report (0: none yet)
  bool rendezvous_timed_out = false;
  // Ranks whose TERMINATED was counted (a repeated report is not).
  std::set<int> terminated_ranks;
  // Scheduling (SchedRunning): the order allocations started in this master
  // (0: recovered), and whether it reported training or validation metrics
  // or a checkpoint since it started (only then may it be preempted).
  int64_t start_order = 0;
  bool made_progress = false;
  // Run as a Slurm job (resource_manager type slurm; slurm_allocations.cc):
  // its job id ("" until sbatch answered), its state as squeue last showed
  // it ("PENDING" before), whether its submission still waits for the next
  // Slurm pass, and whether scancel was queued.
  bool slurm = false;
  std::string slurm_job_id;
  std::string slurm_state;
  std::string slurm_job_dir;
  bool slurm_submit_queued = false;
  bool slurm_cancel_queued = false;
};

// Whether `alloc` holds its slots now: an agent's allocation from its start,
// a Slurm job once Slurm runs it (pending in Slurm: queued).
inline bool HoldsSlots(const AllocationRuntime& alloc) {
  return !alloc.slurm || (alloc.slurm_state != "PENDING" && !alloc.slurm_state.empty());
}

// Whether `token` is the allocation's token (constant time over the hashes).
bool TokenMatches(const AllocationRuntime& alloc, const std::string& token);

struct AgentRuntime {
  AgentRow row;
  std::vector<::det::api::v1::Device> devices;
  std::set<int> used_slots;
  std::map<int, std::string> slot_allocation;
  std::string session_token;
  std::shared_ptr<AgentSession> session;
  int64_t last_heartbeat_mono_ms = 0;
  int64_t last_heartbeat_ms = 0;  // wall, shown by GetAgents
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
  // Allocations that ended lately on this agent (id -> trial id), oldest
  // first, at most kRecentAllocations: their last log lines may still come.
  std::deque<std::pair<std::string, int64_t>> recent_allocations;
  // Messages refused because they named an allocation not placed here.
  int64_t refused_messages = 0;
  // What its det-trial's libraries export (RegisterAgentRequest.abi_manifest);
  // null when it reported none. CreateExperiment checks trial.so files
  // against it (CheckTrialAbiOnAgents).
  std::shared_ptr<const AbiManifest> abi_manifest;
};

inline constexpr size_t kRecentAllocations = 64;

// Whether `rank` of `alloc` was placed on agent `agent_id` (ranks are
// numbered over the placements' slots in order, as StartAllocation sends).
inline bool RankRunsOn(const AllocationRuntime& alloc, const std::string& agent_id, int64_t rank) {
  int64_t next = 0;
  for (const auto& p : alloc.placements) {
    const int64_t first = next;
    next += static_cast<int64_t>(p.slots.size());
    if (p.agent_id == agent_id && rank >= first && rank < next) return true;
  }
  return false;
}

// Whether a rank of `alloc` was placed on agent `agent_id`.
inline bool RunsOn(const AllocationRuntime& alloc, const std::string& agent_id) {
  for (const auto& p : alloc.placements) {
    if (p.agent_id == agent_id) return true;
  }
  return false;
}

// Where an experiment's checkpoints go: checkpoint_storage's host_path (and
// storage_path under it) when the config has one, else `checkpoint_root`.
std::string ExperimentCheckpointDir(const ExperimentConfig& config, const std::string& checkpoint_root);

}  // namespace det::master

#endif  // DET_MASTER_CORE_CORE_STATE_H_
