// Store: the numbered schema migrations and Migrate(), which Open() runs.
#include "master/store/store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/det_version.h"
#include "common/status_macros.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColInt;

// Numbered schema migrations: kMigrationN brings the schema to version N.
// Append only (and list it in Migrations()); never edit one that has shipped.

// 1: the initial schema.
constexpr char kMigration1[] = R"sql(
CREATE TABLE experiments (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  description TEXT NOT NULL,
  labels TEXT NOT NULL,               -- JSON array of strings
  state TEXT NOT NULL,
  config_yaml TEXT NOT NULL,
  config_json TEXT NOT NULL,
  trial_so_sha256 TEXT NOT NULL,
  searcher_state_json TEXT NOT NULL,
  owner TEXT NOT NULL,
  archived INTEGER NOT NULL,
  progress REAL,
  created_ms INTEGER NOT NULL,
  ended_ms INTEGER NOT NULL
);
CREATE INDEX experiments_state ON experiments(state);

CREATE TABLE trials (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
  request_id INTEGER NOT NULL,
  state TEXT NOT NULL,
  hparams_json TEXT NOT NULL,
  seed INTEGER NOT NULL,
  restarts INTEGER NOT NULL,
  run_id INTEGER NOT NULL,
  total_batches INTEGER NOT NULL,
  latest_checkpoint_uuid TEXT NOT NULL,
  best_validation REAL,
  latest_validation REAL,
  sequencer_state_json TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  ended_ms INTEGER NOT NULL
);
CREATE INDEX trials_experiment_id ON trials(experiment_id);
CREATE INDEX trials_state ON trials(state);

CREATE TABLE metrics (
  id INTEGER PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  trial_run_id INTEGER NOT NULL,
  metric_group TEXT NOT NULL,
  total_batches INTEGER NOT NULL,
  total_epochs REAL,
  metrics TEXT NOT NULL,              -- JSON object; NaN/Inf as strings
  time_ms INTEGER NOT NULL,
  archived INTEGER NOT NULL
);
CREATE INDEX metrics_trial_id_total_batches ON metrics(trial_id, total_batches);

CREATE TABLE checkpoints (
  uuid TEXT PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  experiment_id INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
  trial_run_id INTEGER NOT NULL,
  state TEXT NOT NULL,
  total_batches INTEGER NOT NULL,
  total_epochs REAL,
  resources TEXT NOT NULL,            -- JSON object: file -> bytes
  metadata_json TEXT NOT NULL,
  storage_path TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  searcher_metric REAL
);
CREATE INDEX checkpoints_trial_id ON checkpoints(trial_id);
CREATE INDEX checkpoints_experiment_id ON checkpoints(experiment_id);

CREATE TABLE task_logs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  allocation_id TEXT NOT NULL,
  rank INTEGER NOT NULL,
  time_ms INTEGER NOT NULL,
  level TEXT NOT NULL,
  stream TEXT NOT NULL,
  message TEXT NOT NULL
);
CREATE INDEX task_logs_trial_id_id ON task_logs(trial_id, id);

CREATE TABLE agents (
  id TEXT PRIMARY KEY,
  hostname TEXT NOT NULL,
  resource_pool TEXT NOT NULL,
  devices_json TEXT NOT NULL,
  version TEXT NOT NULL,
  enabled INTEGER NOT NULL,
  registered_ms INTEGER NOT NULL,
  last_seen_ms INTEGER NOT NULL
);

CREATE TABLE kv (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
)sql";

// 2: allocations survive a master restart; per-experiment checkpoint GC
// policy; a retried metrics report is stored once.
constexpr char kMigration2[] = R"sql(
CREATE TABLE allocations (
  id TEXT PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  experiment_id INTEGER NOT NULL,
  token TEXT NOT NULL,
  placements_json TEXT NOT NULL,      -- JSON array of {agent_id, slots}
  processes INTEGER NOT NULL,
  terminated INTEGER NOT NULL,
  created_ms INTEGER NOT NULL
);
ALTER TABLE experiments ADD COLUMN checkpoint_gc_policy_json TEXT NOT NULL DEFAULT '';
DELETE FROM metrics WHERE id NOT IN
  (SELECT MIN(id) FROM metrics GROUP BY trial_id, trial_run_id, metric_group, total_batches);
DROP INDEX metrics_trial_id_total_batches;
CREATE UNIQUE INDEX metrics_trial_id_total_batches_run
  ON metrics(trial_id, total_batches, metric_group, trial_run_id);
)sql";

// 3: users (salted, slow password hashes) and their login tokens
// (stored as SHA-256 of the token, never the token itself).
constexpr char kMigration3[] = R"sql(
CREATE TABLE users (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  username TEXT NOT NULL UNIQUE,
  display_name TEXT NOT NULL,
  password_hash TEXT NOT NULL,
  admin INTEGER NOT NULL,
  active INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  modified_ms INTEGER NOT NULL
);
CREATE TABLE user_tokens (
  token_hash TEXT PRIMARY KEY,
  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  created_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL
);
CREATE INDEX user_tokens_user_id ON user_tokens(user_id);
)sql";

// 4: each agent id's credential (the SHA-256 of the secret the master issued
// at its first registration; '' until then, or after an operator reset).
constexpr char kMigration4[] = R"sql(
ALTER TABLE agents ADD COLUMN credential_sha256 TEXT NOT NULL DEFAULT '';
)sql";

// Forks and warm starts: the experiment forked from (0: none) and the
// checkpoint every new trial starts its model weights from ('': none).
constexpr char kMigration5[] = R"sql(
ALTER TABLE experiments ADD COLUMN parent_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE experiments ADD COLUMN warm_start_checkpoint_uuid TEXT NOT NULL DEFAULT '';
)sql";

// Cluster operations: agent drain and disabled slots; a job's scheduling
// knobs as changed by UpdateJob (NULL: the config's value) and its queue
// position (NULL: its id).
constexpr char kMigration6[] = R"sql(
ALTER TABLE agents ADD COLUMN draining INTEGER NOT NULL DEFAULT 0;
ALTER TABLE agents ADD COLUMN disabled_slots_json TEXT NOT NULL DEFAULT '[]';
ALTER TABLE experiments ADD COLUMN job_priority INTEGER;
ALTER TABLE experiments ADD COLUMN job_weight REAL;
ALTER TABLE experiments ADD COLUMN job_max_slots INTEGER;
ALTER TABLE experiments ADD COLUMN job_queue_position REAL;
)sql";

// Workspaces and projects (store_workspaces.cc): the default workspace and
// project "Uncategorized" (id 1 each), where every existing experiment goes.
// (No REFERENCES on the new column: SQLite refuses one with a non-NULL
// default in ALTER TABLE; the master checks the project on insert.)
constexpr char kMigration7[] = R"sql(
CREATE TABLE workspaces (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  description TEXT NOT NULL,
  owner_id INTEGER NOT NULL,
  archived INTEGER NOT NULL,
  immutable INTEGER NOT NULL,
  created_ms INTEGER NOT NULL
);
CREATE TABLE projects (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  workspace_id INTEGER NOT NULL REFERENCES workspaces(id),
  name TEXT NOT NULL,
  description TEXT NOT NULL,
  owner_id INTEGER NOT NULL,
  archived INTEGER NOT NULL,
  immutable INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  UNIQUE (workspace_id, name)
);
INSERT INTO workspaces(id, name, description, owner_id, archived, immutable, created_ms)
  VALUES (1, 'Uncategorized', '', 0, 0, 1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
INSERT INTO projects(id, workspace_id, name, description, owner_id, archived, immutable, created_ms)
  VALUES (1, 1, 'Uncategorized', '', 0, 0, 1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER));
ALTER TABLE experiments ADD COLUMN project_id INTEGER NOT NULL DEFAULT 1;
CREATE INDEX experiments_project_id ON experiments(project_id);
)sql";

// The Slurm resource manager: the job id of an allocation run as a Slurm job,
// so that a restarted master reattaches to it.
constexpr char kMigration8[] = R"sql(
ALTER TABLE allocations ADD COLUMN slurm_job_id TEXT NOT NULL DEFAULT '';
)sql";

// 9: metric queries of one group (a chart's validation curve, the
// experiment's validation history) seek to that group's rows instead of
// reading every training row of the trial.
constexpr char kMigration9[] = R"sql(
CREATE INDEX metrics_trial_group_batches ON metrics(trial_id, metric_group, total_batches);
)sql";

// 10: PBT lineage (searcher pbt): the trial a trial was copied from and the
// checkpoint it started from.
constexpr char kMigration10[] = R"sql(
ALTER TABLE trials ADD COLUMN parent_trial_id INTEGER NOT NULL DEFAULT 0;
ALTER TABLE trials ADD COLUMN parent_checkpoint_uuid TEXT NOT NULL DEFAULT '';
)sql";

// 11: metric streams (StreamTrialMetrics: rows of a set of trials after an
// id) seek to each trial's rows after that id. Without it a poll read every
// row of every streamed trial and sorted them: a live dashboard's streams
// cost more with every row stored (two thirds of the master's CPU in
// bench/master_scale).
constexpr char kMigration11[] = R"sql(
CREATE INDEX metrics_trial_id_id ON metrics(trial_id, id);
)sql";

// 12: metric ids are never reused (AUTOINCREMENT). Without it SQLite gave a
// new row max(id) + 1, so after deleting the experiment that held the newest
// ids, another trial's next report got an id at or below a metric stream's
// cursor (after_id, over several trials) and that stream skipped it for
// good. SQLite cannot add AUTOINCREMENT to a table: it is rebuilt, ids kept
// (sqlite_sequence starts at the largest), indexes as migrations 3, 9, 11
// left them.
constexpr char kMigration12[] = R"sql(
CREATE TABLE metrics_v12 (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  trial_run_id INTEGER NOT NULL,
  metric_group TEXT NOT NULL,
  total_batches INTEGER NOT NULL,
  total_epochs REAL,
  metrics TEXT NOT NULL,              -- JSON object; NaN/Inf as strings
  time_ms INTEGER NOT NULL,
  archived INTEGER NOT NULL
);
INSERT INTO metrics_v12 (id, trial_id, trial_run_id, metric_group, total_batches, total_epochs, metrics, time_ms,
                         archived)
  SELECT id, trial_id, trial_run_id, metric_group, total_batches, total_epochs, metrics, time_ms, archived
  FROM metrics ORDER BY id;
DROP TABLE metrics;
ALTER TABLE metrics_v12 RENAME TO metrics;
CREATE UNIQUE INDEX metrics_trial_id_total_batches_run
  ON metrics(trial_id, total_batches, metric_group, trial_run_id);
CREATE INDEX metrics_trial_group_batches ON metrics(trial_id, metric_group, total_batches);
CREATE INDEX metrics_trial_id_id ON metrics(trial_id, id);
)sql";

// Migration 13: the Unix uid and gid each det user's trials run as on the
// agents (0: none recorded; det-master --trial-uid-range assigns one when
// first needed, an admin may link one). Never reused.
constexpr char kMigration13[] = R"sql(
ALTER TABLE users ADD COLUMN agent_uid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN agent_gid INTEGER NOT NULL DEFAULT 0;
)sql";

// Migration 14: every uid ever recorded for a user, kept when the user is
// relinked, so that --trial-uid-range's next uid (one above the highest
// given in the range) never goes down and an old uid is never handed to a
// new user (issue 46 review).
constexpr char kMigration14[] = R"sql(
CREATE TABLE agent_uids_given (uid INTEGER PRIMARY KEY);
INSERT OR IGNORE INTO agent_uids_given(uid) SELECT agent_uid FROM users WHERE agent_uid != 0;
CREATE TRIGGER users_agent_uid_given AFTER UPDATE OF agent_uid ON users WHEN NEW.agent_uid != 0
BEGIN
  INSERT OR IGNORE INTO agent_uids_given(uid) VALUES (NEW.agent_uid);
END;
)sql";

// Migration 15 (issue 50): fewer b-trees written per metric row (five
// before: the table, three indexes and sqlite_sequence; three now for a
// training row). No AUTOINCREMENT: the Store assigns ids itself
// (NextMetricIdLocked, store_metric_ingest.cc), one above the larger of the
// largest id and the high-water mark kv 'metrics_id_high_water', so ids are
// still never reused (migration 12). The trigger raises that mark to each
// deleted row's id, whatever deletes it (an experiment's deletion, a
// trial's cascade); the migration starts it at sqlite_sequence's value, so
// the ids of rows deleted before it are not handed out again either. The
// index of one group's rows (migration 9) now holds only the groups other
// than training (validation, profiling, system: few rows); a query uses it
// only when it says metric_group != 'training' literally, and training rows
// are read through the unique index. Rows are copied with their ids.
constexpr char kMigration15[] = R"sql(
CREATE TABLE metrics_v15 (
  id INTEGER PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  trial_run_id INTEGER NOT NULL,
  metric_group TEXT NOT NULL,
  total_batches INTEGER NOT NULL,
  total_epochs REAL,
  metrics TEXT NOT NULL,              -- JSON object; NaN/Inf as strings
  time_ms INTEGER NOT NULL,
  archived INTEGER NOT NULL
);
INSERT INTO metrics_v15 (id, trial_id, trial_run_id, metric_group, total_batches, total_epochs, metrics, time_ms,
                         archived)
  SELECT id, trial_id, trial_run_id, metric_group, total_batches, total_epochs, metrics, time_ms, archived
  FROM metrics ORDER BY id;
INSERT INTO kv(key, value)
  SELECT 'metrics_id_high_water', CAST(MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'metrics'), 0),
                                          COALESCE((SELECT MAX(id) FROM metrics), 0)) AS TEXT) WHERE 1
  ON CONFLICT(key) DO UPDATE SET value = excluded.value;
DROP TABLE metrics;
ALTER TABLE metrics_v15 RENAME TO metrics;
CREATE UNIQUE INDEX metrics_trial_id_total_batches_run
  ON metrics(trial_id, total_batches, metric_group, trial_run_id);
CREATE INDEX metrics_trial_id_id ON metrics(trial_id, id);
CREATE INDEX metrics_trial_other_groups ON metrics(trial_id, metric_group, total_batches)
  WHERE metric_group != 'training';
CREATE TRIGGER metrics_id_high_water AFTER DELETE ON metrics
  WHEN OLD.id > COALESCE((SELECT CAST(value AS INTEGER) FROM kv WHERE key = 'metrics_id_high_water'), 0)
BEGIN
  INSERT INTO kv(key, value) VALUES ('metrics_id_high_water', CAST(OLD.id AS TEXT))
    ON CONFLICT(key) DO UPDATE SET value = excluded.value;
END;
)sql";

// Migration 16 (issue 50): chart rollups (master/store/metric_rollups.h,
// store_metric_rollups.cc). Per trial, metric group and metric name, one
// row per CLOSED aligned block of `width` points (64, 256, ..., 65536): the
// row ids and values of its smallest and largest point (NULL value: NaN) and
// its last point's (total_batches, id). width 0 rows are markers: name ''
// says the group's rollups began with its first row; name N gives series
// N's first point (last_batches, last_id). A new, empty table: trials stored
// before it have no group marker and are charted by scanning their rows.
constexpr char kMigration16[] = R"sql(
CREATE TABLE metric_rollups (
  trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
  metric_group TEXT NOT NULL,
  width INTEGER NOT NULL,
  name TEXT NOT NULL,
  block INTEGER NOT NULL,
  lo_id INTEGER NOT NULL,
  lo REAL,
  hi_id INTEGER NOT NULL,
  hi REAL,
  last_batches INTEGER NOT NULL,
  last_id INTEGER NOT NULL,
  PRIMARY KEY (trial_id, metric_group, width, name, block)
) WITHOUT ROWID;
)sql";

// Migration i (0-based) brings the schema to version i + 1.
const std::vector<const char*>& Migrations() {
  static const std::vector<const char*>* const kMigrations =
      new std::vector<const char*>{kMigration1, kMigration2, kMigration3, kMigration4, kMigration5, kMigration6,
                                   kMigration7, kMigration8, kMigration9, kMigration10,
                                   kMigration11, kMigration12, kMigration13, kMigration14,
                                   kMigration15, kMigration16};
  return *kMigrations;
}

constexpr char kSchemaVersion[] = "SELECT COALESCE(MAX(version), 0) FROM schema_migrations";
// The kv key of the det-cpp release that last opened the database (written
// by Migrate since det-cpp 0.2.0; absent in a database of 0.1.0), so that an
// older det-master's refusal names the release the database needs.
constexpr char kDetVersionKey[] = "det_cpp_version";
constexpr char kGetDetVersion[] = "SELECT value FROM kv WHERE key = ?1";
constexpr char kRecordMigration[] =
    "INSERT INTO schema_migrations(version, applied_at) "
    "VALUES (?1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))";

// Migrate's FailedPrecondition for the database at `path` of schema version
// `current` newer than this binary's `latest`: both versions, the det-cpp
// release that last opened it (`recorded`, when known) and this binary's,
// and the fixes.
absl::Status NewerSchemaError(const std::string& path, int64_t current, int64_t latest,
                              const std::optional<std::string>& recorded) {
  const bool named = recorded.has_value() && !recorded->empty() && recorded->size() <= 64;
  const std::string release = named ? absl::StrCat("det-cpp ", *recorded) : "the det-cpp release that wrote it";
  return absl::FailedPreconditionError(absl::StrCat(
      "SQLite database ", path, " has schema version ", current, " (last opened by ",
      named ? release : "a det-cpp release that recorded no version", ") but this det-master is det-cpp ",
      kDetVersion, " and knows schema versions up to ", latest, "; a database is never migrated back: run ", release,
      " or newer on it, or restore the backup taken before the upgrade (docs/operations/upgrade.md). "
      "Nothing in the database was changed"));
}

// One row's first column of `sql` (bound to `key` when given) on `db`, as
// text; nullopt when the statement fails or finds no row.
std::optional<std::string> ReadOnlyScalar(sqlite3* db, const char* sql, const char* key = nullptr) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) return std::nullopt;
  if (key != nullptr) sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
  std::optional<std::string> value;
  if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
    const unsigned char* text = sqlite3_column_text(st, 0);
    if (text != nullptr) value = std::string(reinterpret_cast<const char*>(text));
  }
  sqlite3_finalize(st);
  return value;
}

}  // namespace

int64_t Store::LatestSchemaVersion() { return static_cast<int64_t>(Migrations().size()); }

absl::Status Store::Migrate(int64_t up_to) {
  DET_RETURN_IF_ERROR(Exec("CREATE TABLE IF NOT EXISTS schema_migrations("
                           "version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
                           "create schema_migrations"));
  int64_t current = 0;
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kSchemaVersion));
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_ROW) return Error(rc, "read schema version");
    current = ColInt(st.get(), 0);
  }
  const auto& migrations = Migrations();
  const int64_t latest = static_cast<int64_t>(migrations.size());
  if (current > latest) {
    // Normally refused by RefuseNewerSchema already (a database another
    // det-master migrated meanwhile comes here).
    absl::StatusOr<std::optional<std::string>> recorded = GetValue(kDetVersionKey);
    return NewerSchemaError(path_, current, latest, recorded.ok() ? *recorded : std::nullopt);
  }
  const int64_t last = up_to >= 0 && up_to < latest ? up_to : latest;
  for (int64_t version = current + 1; version <= last; ++version) {
    Txn txn(this);
    DET_RETURN_IF_ERROR(txn.Begin());
    DET_RETURN_IF_ERROR(Exec(migrations[version - 1], absl::StrCat("apply migration ", version)));
    {
      DET_ASSIGN_OR_RETURN(Stmt st, Cached(kRecordMigration));
      Binder b(st.get());
      b.Int(version);
      if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind migration version");
      int rc = sqlite3_step(st.get());
      if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("record migration ", version));
    }
    DET_RETURN_IF_ERROR(txn.Commit());
  }
  DET_ASSIGN_OR_RETURN(std::optional<std::string> recorded, GetValue(kDetVersionKey));
  if (recorded != std::optional<std::string>(kDetVersion)) DET_RETURN_IF_ERROR(PutValue(kDetVersionKey, kDetVersion));
  return absl::OkStatus();
}

absl::Status store_internal::RefuseNewerSchema(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || st.st_size == 0) return absl::OkStatus();  // Open creates it
  sqlite3* db = nullptr;
  // Read-only: no journal mode switch, no schema_migrations table created.
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    sqlite3_close_v2(db);
    return absl::OkStatus();  // Open's read-write open reports why
  }
  sqlite3_busy_timeout(db, 10000);  // as Open's connection
  absl::Status result = absl::OkStatus();
  std::optional<std::string> version = ReadOnlyScalar(db, kSchemaVersion);
  const int64_t latest = Store::LatestSchemaVersion();
  int64_t current = 0;
  if (version.has_value() && absl::SimpleAtoi(*version, &current) && current > latest) {
    result = NewerSchemaError(path, current, latest, ReadOnlyScalar(db, kGetDetVersion, kDetVersionKey));
  }
  sqlite3_close_v2(db);
  return result;
}

absl::StatusOr<int64_t> Store::SchemaVersion() {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kSchemaVersion));
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, "read schema version");
  return ColInt(st.get(), 0);
}

}  // namespace master
}  // namespace det
