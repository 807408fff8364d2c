// The master's persistent state in one SQLite database: experiments, trials,
// metrics, checkpoints, task logs, agents and a small key-value table.
//
// Store is a thin, typed layer over the SQLite C API. It makes no decisions:
// callers (the experiment and trial managers) read rows, decide, and write
// rows back. Every method is thread-safe: one connection is guarded by one
// mutex, so calls are serialized (SQLite has one writer anyway). Every method
// that writes several rows does so in one transaction: it either writes all of
// them or none.
//
// Store::Transaction groups several calls into one atomic write, stored only
// when its Commit() succeeds.
//
// Errors (canonical absl codes):
//   NotFound           an unknown id ("experiment 42 not found");
//   AlreadyExists      a duplicate primary key (checkpoint uuid);
//   FailedPrecondition a foreign key that names no row (a trial for an unknown
//                      experiment), or a database newer than this binary;
//   Unavailable        the database stayed locked past the busy timeout;
//   DataLoss           a stored JSON column that no longer parses;
//   Internal           any other SQLite error, naming the database file.
//
// Times are int64 unix milliseconds, stored as given (the Store never reads
// the clock). Doubles are stored as SQLite REALs, which cannot hold NaN: a NaN
// in a plain double column reads back as 0, in an optional column as nullopt.
// Metric values (MetricRow::metrics) are JSON text and keep NaN and +-Inf.
#ifndef DET_MASTER_STORE_STORE_H_
#define DET_MASTER_STORE_STORE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "master/store/metric_limits.h"
#include "master/store/metric_rollups.h"
#include "master/store/metric_tail.h"
#include "master/store/store_events.h"
#include "master/store/store_mutex.h"
#include "master/store/store_rows.h"
#include "master/store/wal_checkpointer.h"

struct sqlite3;
struct sqlite3_stmt;

namespace det {
namespace master {

class Store {
 public:
  // Groups every call this thread makes on the Store while it lives into one
  // SQLite transaction (BEGIN IMMEDIATE ... COMMIT): all of their writes are
  // stored, or none of them.
  //
  // Nothing is stored unless Commit() is called and returns OK: a
  // Transaction destroyed without Commit() rolls back. The Transaction fails
  // (Commit() rolls back and returns the failure) when
  //   - BEGIN fails (its error);
  //   - a method that writes (Insert*, Update*, Upsert*, Delete*,
  //     ArchiveMetricsAfter, PutValue) returns an error inside it: Commit()
  //     returns the first such error unchanged, so a failed write in the
  //     middle of several leaves none of them; a failed read (Get*, List*,
  //     Count*, e.g. NotFound) does not fail it;
  //   - a nested Transaction ends without Commit() (Aborted).
  // Once it has failed, every method that writes returns Aborted (with the
  // first failure's message) without touching the database until the
  // outermost Transaction ends; reads still work and see its earlier writes.
  //
  // Nesting: a Transaction created while this thread holds one joins the
  // outermost; there is one SQLite transaction. A nested Commit() writes
  // nothing yet and returns the outermost's first failure so far (OK if
  // none). A nested Transaction destroyed without Commit() cannot be undone
  // alone, so it fails the outermost, which then rolls back however its own
  // caller ends it. Only the outermost Commit() stores anything.
  //
  // Holds the Store's mutex from construction until Commit() or destruction:
  // other threads' calls wait until then, so keep it short. Use it on the
  // thread that created it. Not copyable or movable.
  class Transaction {
   public:
    explicit Transaction(Store* store);
    // Rolls back (see above) unless Commit() was called.
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    // Ends this Transaction and releases the Store; a second call only
    // returns the first call's result. Outermost: COMMIT when nothing failed,
    // returning OK (or COMMIT's error, after rolling back); otherwise
    // ROLLBACK, returning the first failure. Nested: see above.
    absl::Status Commit();

   private:
    // Leaves the transaction (committing it when `commit` and it is the
    // outermost) and unlocks the Store; returns as Commit() does.
    absl::Status End(bool commit);

    Store* store_;
    bool done_ = false;
    absl::Status result_;
  };

  // Opens (creating if missing) the SQLite database at `path`, sets WAL
  // journaling, synchronous=NORMAL, foreign keys and a busy timeout, and
  // applies every migration not yet recorded in schema_migrations, each in its
  // own transaction. Errors name `path`; FailedPrecondition, before any write,
  // when the database was written by a newer binary (more migrations).
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  // Open, applying migrations up to schema version `version` only: a test
  // builds an older release's database with it (a migration's test).
  static absl::StatusOr<std::unique_ptr<Store>> OpenAtVersionForTest(const std::string& path, int64_t version);
  // What the WAL checkpointer did (wal_checkpointer.h): checkpoints run off
  // the writer's connection. Thread-safe.
  WalCheckpointer::Stats WalCheckpointStats() const {
    return checkpointer_ != nullptr ? checkpointer_->stats() : WalCheckpointer::Stats();
  }

  // The number of migrations this binary knows (the schema version Open
  // brings a database to).
  static int64_t LatestSchemaVersion();

  // Closes the database. Requires that no other thread is inside a method.
  ~Store();

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The path given to Open.
  const std::string& path() const { return path_; }

  // The highest migration version recorded in schema_migrations.
  absl::StatusOr<int64_t> SchemaVersion();

  // ---- Experiments ----

  // Inserts `row` (row.id is ignored) and returns the new experiment's id.
  absl::StatusOr<int64_t> InsertExperiment(const ExperimentRow& row);

  // Overwrites every field of experiment `row.id` except id and created_ms.
  // NotFound if there is no such experiment.
  absl::Status UpdateExperiment(const ExperimentRow& row);

  // NotFound if there is no experiment `id`.
  absl::StatusOr<ExperimentRow> GetExperiment(int64_t id);

  // The experiments matching `filter`, ordered by id (descending when
  // filter.order_desc), after skipping filter.offset and at most filter.limit
  // of them (0 = all).
  absl::StatusOr<std::vector<ExperimentRow>> ListExperiments(const ExperimentFilter& filter);

  // The number of experiments matching `filter`, ignoring offset and limit
  // (the total for pagination).
  absl::StatusOr<int64_t> CountExperiments(const ExperimentFilter& filter);

  // ---- Trials ----

  // Inserts `row` (row.id is ignored) and returns the new trial's id.
  // FailedPrecondition if row.experiment_id names no experiment.
  absl::StatusOr<int64_t> InsertTrial(const TrialRow& row);

  // Overwrites every field of trial `row.id` except id, experiment_id,
  // request_id and created_ms. NotFound if there is no such trial.
  absl::Status UpdateTrial(const TrialRow& row);

  // NotFound if there is no trial `id`.
  absl::StatusOr<TrialRow> GetTrial(int64_t id);

  // The trials of `experiment_id`, ordered by id; empty if there are none
  // (even if the experiment does not exist).
  absl::StatusOr<std::vector<TrialRow>> ListTrials(int64_t experiment_id);

  // Every trial whose state is one of `states`, ordered by id (for recovery
  // at start-up). Empty `states` gives an empty result.
  absl::StatusOr<std::vector<TrialRow>> ListTrialsInStates(const std::vector<std::string>& states);

  // ---- Metrics ----

  // Inserts every row (row.id is ignored) in one transaction, with one
  // prepared statement reused for all rows: all are written or none.
  // FailedPrecondition if a row's trial_id names no trial. A row with the
  // same (trial_id, trial_run_id, group, total_batches) as a stored one is a
  // retried report and is skipped.
  absl::Status InsertMetrics(const std::vector<MetricRow>& rows);

  // InsertMetrics with group commit, for the training-metric path: rows are
  // written by the store's metric writer thread, which commits everything
  // queued at that moment in one SQLite transaction (at most kMaxGroupRows
  // rows; one call's rows are never split), each call's rows in a savepoint
  // of their own, so each call is still all or nothing and fails alone.
  // `done` runs on the writer thread once the rows are committed (or failed),
  // never under the store's locks; it must not call InsertMetricsGrouped or
  // wait for the writer. The destructor writes whatever is queued first.
  void InsertMetricsAsync(std::vector<MetricRow> rows, std::function<void(absl::Status)> done);
  // InsertMetricsAsync, returning its status once committed. Must not be
  // called while this thread holds a Store::Transaction (the writer would
  // wait for it).
  absl::Status InsertMetricsGrouped(const std::vector<MetricRow>& rows);
  // Small enough that a reader waits for at most a few ms of writing (the
  // store's lock is held for the whole group), large enough to amortize a
  // commit over hundreds of reports.
  static constexpr size_t kMaxGroupRows = 2000;
  // The bounds every metric insert applies from now on (a call over one is
  // refused whole, RESOURCE_EXHAUSTED; metric_limits.h). Thread-safe.
  void set_metric_limits(const MetricLimits& limits);
  // Calls queued for the metric writer, plus one while it writes a group (for
  // tests).
  size_t MetricCallersWaiting();

  // The metrics of `trial_id` in `group` ("" = every group) with
  // total_batches > after_batches (-1 = all), archived ones only when
  // `include_archived`, ordered by total_batches then id, at most `limit`
  // of them (0 = all). With after_id > 0 the cursor is the report
  // (after_batches, after_id): rows with total_batches == after_batches and
  // id > after_id are included too (paging in that order).
  absl::StatusOr<std::vector<MetricRow>> ListMetrics(int64_t trial_id, const std::string& group,
                                                     bool include_archived, int64_t after_batches = -1,
                                                     int64_t limit = 0, int64_t after_id = 0);

  // Marks archived every metric of `trial_id` with total_batches >
  // `total_batches` (the metrics a restart from an earlier checkpoint will
  // report again). OK even if no row matches.
  absl::Status ArchiveMetricsAfter(int64_t trial_id, int64_t total_batches);

  // How many times this Store has archived or deleted metric rows (never
  // less): a cache of metric scans built at one value is stale at another.
  // Counts this Store's own writes only; the master is its database's only
  // writer.
  uint64_t MetricRewrites() const { return metric_rewrites_.load(); }
  // Series rollups rebuilt from stored rows since Open, including rebuilds
  // that end with the series not kept; each counter only grows. Loads: a
  // series not held (its first row since Open, or after an eviction or a
  // rollback). Out of order: a series a row reached behind rows of it
  // already stored (one per series per transaction).
  uint64_t RollupLoads() const { return rollup_loads_.load(); }
  uint64_t RollupOutOfOrderRebuilds() const { return rollup_out_of_order_.load(); }
  uint64_t RollupRebuilds() const { return RollupLoads() + RollupOutOfOrderRebuilds(); }
  // Whether trial `trial_id` has a row in `group` ("" = any) that is not
  // archived, has id > above_id, and sorts at or before (after_batches,
  // after_id) in (total_batches, id) order: a report that arrived after
  // rows it sorts before (ScanMetrics from that cursor would miss it).
  absl::StatusOr<bool> MetricsReportedOutOfOrder(int64_t trial_id, const std::string& group, int64_t above_id,
                                                 int64_t after_batches, int64_t after_id);
  // The largest metric row id stored (0 when none).
  absl::StatusOr<int64_t> MaxMetricId();
  // How many rows of trial `trial_id` in `group` ("" = any) that are not
  // archived have above_id < id <= up_to_id.
  absl::StatusOr<int64_t> CountMetricsInIdRange(int64_t trial_id, const std::string& group, int64_t above_id,
                                                int64_t up_to_id);

  // ---- Chart scans (store_metric_series.cc; thread-safe)

  // The metric values of many rows in a compact form, for downsampling:
  // per row its id, total_batches, group (index into `groups`) and its
  // (name index into `names`, value) pairs values[offsets[i] .. offsets[i+1]).
  struct MetricScan {
    std::vector<std::string> groups, names;
    std::vector<int64_t> ids, batches;
    std::vector<int32_t> group_of;
    std::vector<uint32_t> offsets = {0};
    std::vector<std::pair<int32_t, double>> values;
    size_t rows() const { return ids.size(); }
  };
  // Appends to *scan at most `limit` rows of ListMetrics(trial_id, group,
  // include_archived, after_batches, limit, after_id) without building
  // MetricRows (the stored JSON is scanned in place); returns how many. Stops
  // early, after the row with which this call added more than `max_values`
  // values.
  absl::StatusOr<int64_t> ScanMetrics(int64_t trial_id, const std::string& group, bool include_archived,
                                      int64_t after_batches, int64_t after_id, int64_t limit, MetricScan* scan,
                                      size_t max_values);
  // The metric rows with these ids (at most 10,000), in (total_batches, id)
  // order; unknown ids are skipped.
  absl::StatusOr<std::vector<MetricRow>> GetMetricsByIds(const std::vector<int64_t>& ids);
  // Chart rollups (metric_rollups.h) of every series of (trial_id, group),
  // read in one consistent view: false when the group's rows are not all
  // covered (stored before migration 16, a series not kept, more than
  // max_tail_rows rows after a series' last closed 64-block); otherwise
  // *out holds each series with width = width_for(points) and the blocks a
  // chart of that bucket width reads (none when width < 64).
  absl::StatusOr<bool> ReadRollupChart(int64_t trial_id, const std::string& group,
                                       const std::function<int64_t(int64_t points)>& width_for,
                                       int64_t max_tail_rows, std::vector<RollupChartSeries>* out);
  // The metric groups trial_id has rows in (archived ones too), sorted, at
  // most max_groups + 1 of them (more than max_groups: the trial has more).
  absl::StatusOr<std::vector<std::string>> ListMetricGroups(int64_t trial_id, size_t max_groups);

  // ---- Checkpoints ----

  // AlreadyExists if a checkpoint with row.uuid exists; FailedPrecondition if
  // row.trial_id or row.experiment_id names no row.
  absl::Status InsertCheckpoint(const CheckpointRow& row);

  // What `trial_id`'s checkpoint rows (any state) hold, as CheckpointLimits
  // counts it (metric_limits.h): rows, and bytes as CheckpointRowBytes.
  absl::StatusOr<CheckpointBudget> CheckpointBudgetOf(int64_t trial_id);
  // The bytes `row` counts against its trial's --max-trial-checkpoint-mib.
  static int64_t CheckpointRowBytes(const CheckpointRow& row);

  // NotFound if there is no checkpoint `uuid`.
  absl::StatusOr<CheckpointRow> GetCheckpoint(const std::string& uuid);

  // The checkpoints of `experiment_id` and of `trial_id` (nullopt = any),
  // ordered by time_ms, then insertion order.
  absl::StatusOr<std::vector<CheckpointRow>> ListCheckpoints(std::optional<int64_t> experiment_id,
                                                             std::optional<int64_t> trial_id);

  // Sets the state of checkpoint `uuid`. NotFound if there is none.
  absl::Status UpdateCheckpointState(const std::string& uuid, const std::string& state);
  // Sets searcher_metric of `trial_id`'s checkpoints of run `trial_run_id` at
  // `total_batches` that have none yet (a validation reported after its
  // checkpoint; an earlier run's checkpoint at those batches, before a
  // rewind, keeps its own). OK if none.
  absl::Status SetCheckpointSearcherMetric(int64_t trial_id, int64_t trial_run_id, int64_t total_batches,
                                           double metric);
  // Sets the metadata JSON of checkpoint `uuid`. NotFound if there is none.
  absl::Status UpdateCheckpointMetadata(const std::string& uuid, const std::string& metadata_json);

  // ---- Task logs ----

  // Inserts every row (row.id is ignored; ids are assigned in order) in one
  // transaction, within task_log_limits() (long messages cut, a trial's
  // oldest lines dropped). FailedPrecondition if a row's trial_id names no
  // trial.
  absl::Status InsertTaskLogs(const std::vector<TaskLogRow>& rows);

  // The bounds InsertTaskLogs applies from now on. Thread-safe.
  void set_task_log_limits(const TaskLogLimits& limits);

  // The logs of `trial_id` with id > after_id, ordered by id, at most `limit`
  // of them (0 = all). Poll with after_id = the last id seen.
  absl::StatusOr<std::vector<TaskLogRow>> ListTaskLogs(int64_t trial_id, int64_t after_id, int64_t limit);

  // ---- Metric streams, validation history and log filters
  // (store_metrics_logs.cc; all thread-safe)

  // Metric rows of any of `trial_ids` (at most 1000) in `group` ("" = all)
  // with id > after_id, in id order, at most `limit` (0 = all). Archived
  // rows are included (they were stored; a stream resumes by id).
  // Each trial's rows are found by a seek on metrics(trial_id, id) (migration
  // 11), so a poll costs one seek per trial plus the rows it returns,
  // whatever the trials' history.
  absl::StatusOr<std::vector<MetricRow>> ListMetricsAfterId(const std::vector<int64_t>& trial_ids,
                                                            const std::string& group, int64_t after_id,
                                                            int64_t limit);
  // The SQL of ListMetricsAfterId for `trials` trials (for its plan test).
  static std::string MetricsAfterIdSql(size_t trials, bool by_group);
  // Issue 50: ListMetricsAfterId answers from the rows the writer committed
  // last (MetricTail, metric_tail.h) when they provably hold every row after
  // the cursor, and from SQLite otherwise (after a restart, a stream further
  // behind than the tail's bounds, a metric rewrite, inside a transaction).
  // The same rows either way. What the tail holds and answered, for tests,
  // benches and /metrics.
  MetricTail::Stats MetricTailStats();

  // The unarchived "validation" rows of every trial of `experiment_id`,
  // ordered by time_ms then id.
  absl::StatusOr<std::vector<ValidationPoint>> ListExperimentValidations(int64_t experiment_id);

  // The task logs `filter` selects, in id order, at most `limit` (0 = all).
  // Every list of the filter holds at most 100 values (InvalidArgument).
  absl::StatusOr<std::vector<TaskLogRow>> ListTaskLogsFiltered(const TaskLogFilter& filter, int64_t limit);

  // The id just before the `tail`-th last line `filter` selects (ignoring
  // filter.after_id), i.e. the after_id that reads only the last `tail`
  // lines; 0 when fewer lines match. Requires tail > 0.
  absl::StatusOr<int64_t> TaskLogTailStart(const TaskLogFilter& filter, int64_t tail);

  // ---- Allocations ----

  // Inserts allocation `row.id`, or overwrites every field of it.
  // FailedPrecondition if row.trial_id names no trial.
  absl::Status UpsertAllocation(const AllocationRow& row);

  // Deletes allocation `id`; OK if there is none.
  absl::Status DeleteAllocation(const std::string& id);

  // Every allocation, ordered by created_ms then id.
  absl::StatusOr<std::vector<AllocationRow>> ListAllocations();

  // ---- Agents ----

  // Inserts agent `row.id`, or overwrites every field of it.
  absl::Status UpsertAgent(const AgentRow& row);

  // Every agent, ordered by id.
  absl::StatusOr<std::vector<AgentRow>> ListAgents();

  // Agent `id`, or nullopt when there is none.
  absl::StatusOr<std::optional<AgentRow>> GetAgent(const std::string& id);

  // Clears agent `id`'s credential, so that its next registration is treated
  // as its first (an operator's reset of a lost credential). NotFound when
  // there is no such agent.
  absl::Status ResetAgentCredential(const std::string& id);

  // ---- Key-value (cluster id etc.) ----

  // Sets `key` to `value`, replacing any previous value.
  absl::Status PutValue(const std::string& key, const std::string& value);

  // The value of `key`, or nullopt if it was never set.
  absl::StatusOr<std::optional<std::string>> GetValue(const std::string& key);

  // ---- Users and login tokens ----

  // Inserts `row` (row.id is ignored) and returns the new user's id.
  // AlreadyExists when the username is taken.
  absl::StatusOr<int64_t> InsertUser(const UserRow& row);

  // Overwrites display_name, password_hash, admin, active and modified_ms of
  // user `row.id` (the username never changes). NotFound for an unknown id.
  absl::Status UpdateUser(const UserRow& row);

  // NotFound for an unknown id / username.
  absl::StatusOr<UserRow> GetUser(int64_t id);
  absl::StatusOr<UserRow> GetUserByName(const std::string& username);

  // Every user, ordered by id.
  absl::StatusOr<std::vector<UserRow>> ListUsers();

  // The Unix {uid, gid} trials of user `username` run as: the recorded ones;
  // else, when first..last is a range (1000 <= first <= last), the smallest
  // uid of the range above every uid ever recorded in it (a relinked user's
  // old uid too), recorded now with gid = uid; else {0, 0} (none). NotFound for
  // an unknown user; ResourceExhausted when the range is used up. Thread-safe.
  absl::StatusOr<std::pair<int64_t, int64_t>> AgentIdsOfUser(const std::string& username, int64_t first, int64_t last);
  // Records uid/gid for user `user_id` (an admin's link). AlreadyExists when
  // another user has that uid; NotFound for an unknown user; InvalidArgument
  // for uid or gid 0 or the master's own euid or egid. Thread-safe.
  absl::Status LinkUserAgentIds(int64_t user_id, int64_t uid, int64_t gid);

  // Stores a token; FailedPrecondition when row.user_id names no user.
  absl::Status InsertUserToken(const UserTokenRow& row);

  // NotFound when no token has this hash.
  absl::StatusOr<UserTokenRow> GetUserToken(const std::string& token_hash);

  // Deletes one token; OK if there is none.
  absl::Status DeleteUserToken(const std::string& token_hash);

  // Deletes every token of `user_id` except `except_token_hash`.
  absl::Status DeleteUserTokens(int64_t user_id, const std::string& except_token_hash);

  // Deletes the tokens with expires_ms <= now_ms.
  absl::Status DeleteExpiredUserTokens(int64_t now_ms);

  // ---- Deleting an experiment (store_experiment_delete.cc) ----

  // Deletes at most `max_rows` rows of experiment `experiment_id`'s metrics,
  // else of its task logs, else checkpoints, else allocations, else trials
  // (one table per call, children first), in one transaction; returns how
  // many it deleted: 0 when only the experiment row is left (or not even
  // that). Idempotent; call until it returns 0.
  absl::StatusOr<int64_t> DeleteExperimentDataBatch(int64_t experiment_id, int64_t max_rows);
  // Deletes these checkpoint rows (unknown uuids are skipped), all or none.
  absl::Status DeleteCheckpointRows(const std::vector<std::string>& uuids);
  // Deletes experiment `experiment_id`'s row (and, by cascade, anything of it
  // left); OK if there is none.
  absl::Status DeleteExperimentRow(int64_t experiment_id);
  // How many experiments other than `except_id` run trial.so `sha256`.
  absl::StatusOr<int64_t> CountExperimentsWithArtifact(const std::string& sha256, int64_t except_id);

  // ---- Workspaces and projects (store_workspaces.cc; all thread-safe) ----

  // Inserts `row` (id and read-only fields ignored); returns its id.
  // AlreadyExists naming the name when it is taken.
  absl::StatusOr<int64_t> InsertWorkspace(const WorkspaceRow& row);
  // NotFound naming the id.
  absl::StatusOr<WorkspaceRow> GetWorkspace(int64_t id);
  // The workspace named exactly `name`, or nullopt.
  absl::StatusOr<std::optional<WorkspaceRow>> FindWorkspace(const std::string& name);
  // Every workspace, ordered by id.
  absl::StatusOr<std::vector<WorkspaceRow>> ListWorkspaces();
  absl::StatusOr<int64_t> CountWorkspaces();

  // Inserts `row` (id and read-only fields ignored); returns its id.
  // AlreadyExists when its workspace has a project of that name;
  // FailedPrecondition when row.workspace_id names no workspace.
  absl::StatusOr<int64_t> InsertProject(const ProjectRow& row);
  // NotFound naming the id.
  absl::StatusOr<ProjectRow> GetProject(int64_t id);
  // The project named exactly `name` in `workspace_id`, or nullopt.
  absl::StatusOr<std::optional<ProjectRow>> FindProject(int64_t workspace_id, const std::string& name);
  // The projects of `workspace_id` (nullopt: of every workspace) whose name
  // is exactly `name` ("" = any), ordered by id.
  absl::StatusOr<std::vector<ProjectRow>> ListProjects(std::optional<int64_t> workspace_id,
                                                       const std::string& name = "");
  absl::StatusOr<int64_t> CountProjects(int64_t workspace_id);
  // Sets the archived flag; NotFound naming the id.
  absl::Status SetWorkspaceArchived(int64_t id, bool archived);
  absl::Status SetProjectArchived(int64_t id, bool archived);

  // ---- Maintenance ----
  // Runs PRAGMA integrity_check; Internal (with SQLite's report) unless it says "ok".
  absl::Status IntegrityCheck();
  // fn(db) under the Store's lock (backup steps); a thread that waited for it meanwhile gets it first (store_mutex.h).
  absl::Status WithConnection(const std::function<absl::Status(sqlite3*)>& fn);
  int LockWaitersForTest() const { return mu_.waiting(); }  // threads blocked on the Store's lock

 private:
  class Stmt;
  class Txn;

  Store(std::string path, sqlite3* db);

  // Applies the migrations not yet applied, up to `up_to` (default: all).
  absl::Status Migrate(int64_t up_to = -1) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Exec(const char* sql, absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The prepared statement for `sql`, a string constant (the cache is keyed by
  // its address), prepared on first use and reset when the Stmt goes away.
  absl::StatusOr<Stmt> Cached(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A statement for dynamically built SQL, finalized when the Stmt goes away.
  absl::StatusOr<Stmt> PrepareOnce(const std::string& sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A statement for dynamically built SQL that is run again and again (a
  // metric stream's poll), kept prepared: at most kMaxDynamicStmts texts, all
  // finalized when one more would not fit.
  absl::StatusOr<Stmt> CachedDynamic(const std::string& sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr size_t kMaxDynamicStmts = 32;
  absl::Status Error(int rc, absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Locks mu_ and returns body() (an absl::Status or absl::StatusOr). Inside
  // a Transaction: returns Aborted without calling body() when the
  // Transaction has already failed, and fails it when body() fails. Every
  // public method that writes runs its work through Write (defined in
  // store_internal.h).
  template <typename Body>
  auto Write(Body body) -> decltype(body());

  const std::string path_;
  StoreMutex mu_;  // recursive: a Transaction holds it while the thread calls methods
  // The open Store::Transactions of the thread holding mu_ (0 = none).
  int txn_depth_ ABSL_GUARDED_BY(mu_) = 0;
  bool txn_began_ ABSL_GUARDED_BY(mu_) = false;  // whether the outermost Transaction's BEGIN succeeded
  absl::Status txn_error_ ABSL_GUARDED_BY(mu_);   // the first failure inside the outermost Transaction; OK if none
  PendingStoreEvents pending_events_ ABSL_GUARDED_BY(mu_);  // reported on commit (store_events.h)
  // What the open transaction's metric rows add to the in-memory tail and the
  // rollups; made visible when the outermost transaction commits (issue 50).
  MetricTail metric_tail_ ABSL_GUARDED_BY(mu_);
  MetricRollups metric_rollups_ ABSL_GUARDED_BY(mu_);
  // ListMetricsAfterId's two paths (store_metrics_logs.cc): whether the tail
  // answered (its rows appended to *out), and the SQL.
  absl::StatusOr<bool> ReadMetricTailLocked(const std::vector<int64_t>& trial_ids, const std::string& group,
                                            int64_t after_id, int64_t limit, std::vector<MetricTail::RowPtr>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<MetricRow>> ListMetricsAfterIdSqlLocked(const std::vector<int64_t>& trial_ids,
                                                                     const std::string& group, int64_t after_id,
                                                                     int64_t limit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rollups of a stored metric row (row.id set), inside the open transaction
  // (store_metric_rollups.cc). A held series the row reaches out of order
  // is dropped and put in *rebuild with the lowest (total_batches, id) row
  // of that series from there on, and its further rows of the call are
  // skipped; until RebuildOutOfOrderLocked, at the end of the
  // InsertMetricRowsLocked call or of the metric writer's group (every call
  // of the group shares one set), its stored blocks are stale. That rebuilds
  // each such series once per call or group, not once per row (a trial's
  // concurrent or hostile out-of-order reports would otherwise cost a
  // rebuild a row).
  using RollupRebuildSet = std::map<RollupSeriesKey, MetricRow>;
  absl::Status RollupRowLocked(const MetricRow& row, RollupRebuildSet* rebuild) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RebuildOutOfOrderLocked(const RollupRebuildSet& rebuild) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<bool> RebuildRollupSeriesLocked(const RollupSeriesKey& key, const MetricRow& row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RollupOpenBlocksLocked(const RollupSeriesKey& key, RollupSeries* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<bool> RollupMarkerLocked(const RollupSeriesKey& key, int64_t* batches, int64_t* id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteRollupLocked(const RollupSeriesKey& key, const RollupBlock& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReadRollupBlocksLocked(const RollupSeriesKey& key, int64_t width, int64_t from, int64_t to,
                                      std::vector<RollupBlock>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  std::unordered_map<const char*, sqlite3_stmt*> stmts_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, sqlite3_stmt*> dynamic_stmts_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> metric_rewrites_{0};
  std::atomic<uint64_t> rollup_loads_{0};         // RollupRowLocked's rebuilds of series not held
  std::atomic<uint64_t> rollup_out_of_order_{0};  // RebuildOutOfOrderLocked's entries

  // ---- metric ingestion (store_metric_ingest.cc)
  // One call's rows waiting for the metric writer.
  struct PendingMetrics {
    std::vector<MetricRow> rows;
    std::vector<std::string> encoded;
    std::function<void(absl::Status)> done;
    absl::Status status;
  };
  // Inserts `rows` (their JSON in `encoded`) with the open transaction or
  // savepoint; FailedPrecondition naming the trial that does not exist.
  // Series to rebuild go to *group_rebuild, for the caller to rebuild before
  // its transaction commits; with none given, they are rebuilt here.
  absl::Status InsertMetricRowsLocked(const std::vector<MetricRow>& rows, const std::vector<std::string>& encoded,
                                      RollupRebuildSet* group_rebuild = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CheckMetricRows for each trial of `rows`; *added: what they add, per trial.
  absl::Status AdmitMetricsLocked(const std::vector<MetricRow>& rows, const std::vector<std::string>& encoded,
                                  std::map<int64_t, MetricBudget>* added) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the counted budgets of the trials of `rows` (after a rollback).
  void ForgetMetricBudgetsLocked(const std::vector<MetricRow>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  MetricLimits metric_limits_ ABSL_GUARDED_BY(mu_);
  // Per trial: its stored metric names and bytes, read from the store when
  // first needed (at most max_trial_names + 1 names are read).
  std::unordered_map<int64_t, MetricBudget> metric_budgets_ ABSL_GUARDED_BY(mu_);
  // The id the next stored metric row gets (migration 15: the Store assigns
  // them; 0: not read yet). Read on first use as one above the larger of
  // MAX(id) and the high-water mark of deleted ids, then counted up for each
  // stored row, never down (a rolled-back row leaves a gap): strictly
  // increasing in commit order, never reused.
  int64_t next_metric_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status LoadNextMetricIdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WAL checkpoints on a thread and connection of their own (issue 50;
  // wal_checkpointer.h); set by Open, stopped before db_ closes.
  std::unique_ptr<WalCheckpointer> checkpointer_;
  // Writes `group` in one transaction, a savepoint per call, in
  // GroupWriteOrder; sets each status.
  friend class StoreGroupPeer;  // store_events_test.cc calls CommitMetricGroup
  void CommitMetricGroup(const std::vector<std::unique_ptr<PendingMetrics>>& group);
  static std::vector<size_t> GroupWriteOrder(const std::vector<std::unique_ptr<PendingMetrics>>& group);
  // The metric writer thread: takes groups off group_queue_ until stopping
  // and drained.
  void MetricWriterLoop();
  // Stops the metric writer after it has written what is queued.
  void StopMetricWriter();
  std::mutex group_mu_;
  std::condition_variable group_cv_;
  std::vector<std::unique_ptr<PendingMetrics>> group_queue_ ABSL_GUARDED_BY(group_mu_);
  bool group_writing_ ABSL_GUARDED_BY(group_mu_) = false;
  bool group_stopping_ ABSL_GUARDED_BY(group_mu_) = false;
  std::thread group_writer_ ABSL_GUARDED_BY(group_mu_);

  // ---- task log bounds (store_metrics_logs.cc)
  // Deletes trial `trial_id`'s oldest lines down to 3/4 of the limit, keeping
  // one marker line; `*bytes` is its exact volume before and after.
  absl::Status TrimTaskLogsLocked(int64_t trial_id, int64_t* bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> TaskLogBytesLocked(int64_t trial_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  TaskLogLimits task_log_limits_ ABSL_GUARDED_BY(mu_);
  // Per trial: its stored log volume as counted since first seen (at least
  // the real one: a rolled-back insert still counts until the next trim).
  std::unordered_map<int64_t, int64_t> task_log_bytes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_STORE_H_
