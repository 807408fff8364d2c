// The rows the Store reads and writes (store.h): plain structs, one per
// table, plus the filters its list methods take. No I/O; copyable.
#ifndef DET_MASTER_STORE_STORE_ROWS_H_
#define DET_MASTER_STORE_STORE_ROWS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace det {
namespace master {

struct ExperimentRow {
  int64_t id = 0;
  std::string name;
  std::string description;
  std::vector<std::string> labels;
  // "ACTIVE", "PAUSED", "STOPPING_CANCELED", "COMPLETED", "CANCELED", "ERROR", ...
  std::string state;
  std::string config_yaml;
  std::string config_json;
  std::string trial_so_sha256;
  std::string searcher_state_json;
  std::string owner;
  bool archived = false;
  double progress = 0;
  int64_t created_ms = 0;
  int64_t ended_ms = 0;  // 0 = not ended
  // The checkpoint GC policy set after creation (PatchExperiment), as JSON
  // {"save_experiment_best": N, ...}; "" = the config's.
  std::string checkpoint_gc_policy_json;
  // Set at creation only: the experiment this one was forked from (0: none)
  // and the checkpoint its new trials warm-start from ("": none).
  int64_t parent_id = 0;
  std::string warm_start_checkpoint_uuid;
  // The job's scheduling knobs as UpdateJob set them (nullopt: the config's
  // resources.priority / weight / max_slots, and the id for the position).
  // Written by UpdateExperiment (not by InsertExperiment: a new experiment
  // has none).
  std::optional<int64_t> job_priority;
  std::optional<double> job_weight;
  std::optional<int64_t> job_max_slots;
  std::optional<double> job_queue_position;
  // The project it is in (store_workspaces.cc; 1: "Uncategorized"). Written
  // by InsertExperiment only: UpdateExperiment never moves an experiment.
  int64_t project_id = 1;
};

struct TrialRow {
  int64_t id = 0;
  int64_t experiment_id = 0;
  int64_t request_id = 0;  // the searcher's id for this trial
  std::string state;
  std::string hparams_json;
  uint32_t seed = 0;
  int64_t restarts = 0;
  int64_t run_id = 0;
  int64_t total_batches = 0;
  std::string latest_checkpoint_uuid;
  std::optional<double> best_validation;
  std::optional<double> latest_validation;
  std::string sequencer_state_json;
  int64_t created_ms = 0;
  int64_t ended_ms = 0;  // 0 = not ended
  // PBT lineage: the trial whose checkpoint this one started from (0: none)
  // and that checkpoint ('' until it is known).
  int64_t parent_trial_id = 0;
  std::string parent_checkpoint_uuid;
};

struct MetricRow {
  int64_t id = 0;
  int64_t trial_id = 0;
  int64_t trial_run_id = 0;
  std::string group;  // "training" or "validation"
  int64_t total_batches = 0;
  double total_epochs = 0;
  // Stored as a JSON object; NaN, Infinity and -Infinity are stored as the
  // strings "NaN", "Infinity" and "-Infinity" and read back as doubles.
  std::map<std::string, double> metrics;
  int64_t time_ms = 0;
  bool archived = false;
};

struct CheckpointRow {
  std::string uuid;
  int64_t trial_id = 0;
  int64_t experiment_id = 0;
  int64_t trial_run_id = 0;
  std::string state;  // "COMPLETED", "DELETED", ...
  int64_t total_batches = 0;
  double total_epochs = 0;
  std::map<std::string, int64_t> resources;  // file name -> size in bytes
  std::string metadata_json;
  std::string storage_path;
  int64_t time_ms = 0;
  std::optional<double> searcher_metric;
  // Not stored: total_batches * the trial's global_batch_size, set by the
  // master's core when it knows that (0: unknown).
  int64_t total_records = 0;
  // Read only (not a column): the metrics of the trial's validation at
  // total_batches, preferring the run that wrote the checkpoint, else the
  // newest unarchived one; empty when there is none.
  std::map<std::string, double> validation_metrics;
};

struct TaskLogRow {
  int64_t id = 0;
  int64_t trial_id = 0;
  std::string allocation_id;
  int32_t rank = 0;
  int64_t time_ms = 0;
  std::string level;
  std::string stream;  // "stdout", "stderr" or "system"
  std::string message;
};

// Bounds on what InsertTaskLogs stores (0: unbounded).
struct TaskLogLimits {
  // A longer message is cut (at a UTF-8 character boundary) and ends in
  // " ... [line truncated: N bytes]".
  int64_t max_line_bytes = 64 << 10;
  // Per trial, counting each line as its message bytes + kLineOverhead: when
  // a trial's lines exceed it, its oldest lines are deleted down to 3/4 of
  // it and one marker line (stream "dropped", the oldest line left) says
  // "... N earlier lines dropped (log limit of M bytes per trial)".
  int64_t max_trial_bytes = 64 << 20;
  static constexpr int64_t kLineOverhead = 64;
};

// Which task logs ListTaskLogsFiltered returns (each empty list: all).
struct TaskLogFilter {
  int64_t trial_id = 0;
  int64_t after_id = 0;               // only id > after_id
  std::vector<std::string> levels;    // stored level names ("LOG_LEVEL_INFO", ...)
  std::vector<std::string> streams;   // "stdout", "stderr", "system", ...
  std::vector<int32_t> ranks;
  std::vector<std::string> allocation_ids;
  std::optional<int64_t> since_ms;    // time_ms >= since_ms
  std::optional<int64_t> until_ms;    // time_ms < until_ms
  std::string search_text;            // a literal, case-sensitive substring
};

// One validation of an experiment's trials (ListExperimentValidations).
struct ValidationPoint {
  int64_t id = 0;
  int64_t trial_id = 0;
  int64_t total_batches = 0;
  int64_t time_ms = 0;
  std::map<std::string, double> metrics;
};

// A trial's allocation (its running processes) while it runs, so that a
// restarted master can reattach to processes that kept running.
struct AllocationRow {
  std::string id;
  int64_t trial_id = 0;
  int64_t experiment_id = 0;
  // SHA-256 (hex) of the allocation token; the token itself is never stored
  // (rows written before it was hashed hold the 32-hex-digit token: recovery
  // hashes those).
  std::string token;
  std::string placements_json;  // JSON array of {"agent_id": ..., "slots": [...]}
  int64_t processes = 0;
  int64_t terminated = 0;  // processes already reported terminated
  int64_t created_ms = 0;
  // The Slurm job running it (resource_manager slurm; "" for an agent's or
  // before sbatch answered).
  std::string slurm_job_id;
};

struct AgentRow {
  std::string id;
  std::string hostname;
  std::string resource_pool;
  std::string devices_json;
  std::string version;
  bool enabled = true;
  int64_t registered_ms = 0;
  int64_t last_seen_ms = 0;
  // SHA-256 (hex) of the agent's credential; "" when none was issued yet.
  std::string credential_sha256;
  // Disabled with drain (DisableAgent): running work finishes, nothing new.
  bool draining = false;
  // Disabled slots: JSON [{"slot": N, "drain": bool}, ...] (agent_control.cc).
  std::string disabled_slots_json = "[]";
};

struct UserRow {
  int64_t id = 0;
  std::string username;  // unique
  std::string display_name;
  // "pbkdf2-sha256$<iterations>$<salt hex>$<hash hex>" (see master/core/auth.h).
  std::string password_hash;
  bool admin = false;
  bool active = true;
  int64_t created_ms = 0;
  int64_t modified_ms = 0;
  int64_t agent_uid = 0;  // the Unix uid/gid the user's trials run as on the
  int64_t agent_gid = 0;  // agents (0: none); only AgentIdsOfUser writes them
};

// A login token, stored as the hex SHA-256 of the token.
struct UserTokenRow {
  std::string token_hash;
  int64_t user_id = 0;
  int64_t created_ms = 0;
  int64_t expires_ms = 0;
};

// A workspace (groups projects) and a project (groups experiments). The
// default workspace and project "Uncategorized" (both id 1, immutable) are
// created by the migration that added them. Read-only fields (filled by the
// reads, ignored by the inserts) are marked.
struct WorkspaceRow {
  int64_t id = 0;
  std::string name;  // unique
  std::string description;
  int64_t owner_id = 0;     // the creating user's id (0: the master)
  std::string owner_name;   // read-only: that user's name ("" if none)
  bool archived = false;
  bool immutable = false;
  int64_t created_ms = 0;
  int64_t num_projects = 0;  // read-only
};

struct ProjectRow {
  int64_t id = 0;
  int64_t workspace_id = 0;
  std::string workspace_name;  // read-only
  std::string name;            // unique within its workspace
  std::string description;
  int64_t owner_id = 0;
  std::string owner_name;  // read-only
  bool archived = false;
  bool immutable = false;
  int64_t created_ms = 0;
};

// Selects experiments for ListExperiments / CountExperiments. Empty fields
// match everything.
struct ExperimentFilter {
  std::vector<std::string> states;  // any of these states
  std::string name_contains;        // case-sensitive substring of the name
  std::string label;                // has this label
  bool include_archived = true;
  int64_t offset = 0;
  int64_t limit = 0;  // 0 = all
  bool order_desc = false;  // by id
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_STORE_ROWS_H_
