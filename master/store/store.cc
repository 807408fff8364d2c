#include "master/store/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {
namespace {

constexpr int kBusyTimeoutMs = 10000;

// Numbered schema migrations: migration i (0-based) brings the schema to
// version i + 1. Append only; never edit one that has shipped.
const std::vector<std::string>& Migrations() {
  static const std::vector<std::string>* const kMigrations = new std::vector<std::string>{
      // 1: the initial schema.
      R"sql(
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
)sql",
      // 2: allocations survive a master restart; per-experiment checkpoint GC
      // policy; a retried metrics report is stored once.
      R"sql(
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
)sql",
      // 3: users (salted, slow password hashes) and their login tokens
      // (stored as SHA-256 of the token, never the token itself).
      R"sql(
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
)sql",
  };
  return *kMigrations;
}

// ---- Column lists and statements (the cache is keyed by these addresses) ----

#define DET_EXPERIMENT_COLUMNS                                                                 \
  "id, name, description, labels, state, config_yaml, config_json, trial_so_sha256, "          \
  "searcher_state_json, owner, archived, progress, created_ms, ended_ms, checkpoint_gc_policy_json"
#define DET_TRIAL_COLUMNS                                                                      \
  "id, experiment_id, request_id, state, hparams_json, seed, restarts, run_id, total_batches, " \
  "latest_checkpoint_uuid, best_validation, latest_validation, sequencer_state_json, "          \
  "created_ms, ended_ms"
#define DET_METRIC_COLUMNS \
  "id, trial_id, trial_run_id, metric_group, total_batches, total_epochs, metrics, time_ms, archived"
#define DET_CHECKPOINT_COLUMNS                                                                 \
  "uuid, trial_id, experiment_id, trial_run_id, state, total_batches, total_epochs, resources, " \
  "metadata_json, storage_path, time_ms, searcher_metric"
#define DET_TASK_LOG_COLUMNS "id, trial_id, allocation_id, rank, time_ms, level, stream, message"
#define DET_ALLOCATION_COLUMNS \
  "id, trial_id, experiment_id, token, placements_json, processes, terminated, created_ms"
#define DET_AGENT_COLUMNS \
  "id, hostname, resource_pool, devices_json, version, enabled, registered_ms, last_seen_ms"

constexpr char kBegin[] = "BEGIN IMMEDIATE";
constexpr char kCommit[] = "COMMIT";
constexpr char kRollback[] = "ROLLBACK";
constexpr char kSavepoint[] = "SAVEPOINT det_nested";
constexpr char kRelease[] = "RELEASE det_nested";
constexpr char kRollbackTo[] = "ROLLBACK TO det_nested";
constexpr char kSchemaVersion[] = "SELECT COALESCE(MAX(version), 0) FROM schema_migrations";
constexpr char kRecordMigration[] =
    "INSERT INTO schema_migrations(version, applied_at) "
    "VALUES (?1, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))";

constexpr char kInsertExperiment[] =
    "INSERT INTO experiments(name, description, labels, state, config_yaml, config_json, "
    "trial_so_sha256, searcher_state_json, owner, archived, progress, created_ms, ended_ms, "
    "checkpoint_gc_policy_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
constexpr char kUpdateExperiment[] =
    "UPDATE experiments SET name = ?, description = ?, labels = ?, state = ?, config_yaml = ?, "
    "config_json = ?, trial_so_sha256 = ?, searcher_state_json = ?, owner = ?, archived = ?, "
    "progress = ?, ended_ms = ?, checkpoint_gc_policy_json = ? WHERE id = ?";
constexpr char kGetExperiment[] = "SELECT " DET_EXPERIMENT_COLUMNS " FROM experiments WHERE id = ?";

constexpr char kInsertTrial[] =
    "INSERT INTO trials(experiment_id, request_id, state, hparams_json, seed, restarts, run_id, "
    "total_batches, latest_checkpoint_uuid, best_validation, latest_validation, "
    "sequencer_state_json, created_ms, ended_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
constexpr char kUpdateTrial[] =
    "UPDATE trials SET state = ?, hparams_json = ?, seed = ?, restarts = ?, run_id = ?, "
    "total_batches = ?, latest_checkpoint_uuid = ?, best_validation = ?, latest_validation = ?, "
    "sequencer_state_json = ?, ended_ms = ? WHERE id = ?";
constexpr char kGetTrial[] = "SELECT " DET_TRIAL_COLUMNS " FROM trials WHERE id = ?";
constexpr char kListTrials[] = "SELECT " DET_TRIAL_COLUMNS " FROM trials WHERE experiment_id = ? ORDER BY id";

constexpr char kInsertMetric[] =
    "INSERT OR IGNORE INTO metrics(trial_id, trial_run_id, metric_group, total_batches, total_epochs, "
    "metrics, time_ms, archived) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
constexpr char kListMetrics[] =
    "SELECT " DET_METRIC_COLUMNS
    " FROM metrics WHERE trial_id = ?1 AND (?2 = '' OR metric_group = ?2) AND (?3 OR archived = 0) "
    "AND total_batches > ?4 ORDER BY total_batches, id LIMIT ?5";
constexpr char kArchiveMetricsAfter[] =
    "UPDATE metrics SET archived = 1 WHERE trial_id = ? AND total_batches > ? AND archived = 0";

constexpr char kInsertCheckpoint[] =
    "INSERT INTO checkpoints(" DET_CHECKPOINT_COLUMNS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
constexpr char kGetCheckpoint[] = "SELECT " DET_CHECKPOINT_COLUMNS " FROM checkpoints WHERE uuid = ?";
constexpr char kListCheckpointsAll[] =
    "SELECT " DET_CHECKPOINT_COLUMNS " FROM checkpoints ORDER BY time_ms, rowid";
constexpr char kListCheckpointsByExperiment[] =
    "SELECT " DET_CHECKPOINT_COLUMNS " FROM checkpoints WHERE experiment_id = ? ORDER BY time_ms, rowid";
constexpr char kListCheckpointsByTrial[] =
    "SELECT " DET_CHECKPOINT_COLUMNS " FROM checkpoints WHERE trial_id = ? ORDER BY time_ms, rowid";
constexpr char kListCheckpointsByBoth[] =
    "SELECT " DET_CHECKPOINT_COLUMNS
    " FROM checkpoints WHERE experiment_id = ? AND trial_id = ? ORDER BY time_ms, rowid";
constexpr char kUpdateCheckpointState[] = "UPDATE checkpoints SET state = ? WHERE uuid = ?";

constexpr char kInsertTaskLog[] =
    "INSERT INTO task_logs(trial_id, allocation_id, rank, time_ms, level, stream, message) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)";
constexpr char kListTaskLogs[] =
    "SELECT " DET_TASK_LOG_COLUMNS " FROM task_logs WHERE trial_id = ? AND id > ? ORDER BY id LIMIT ?";

constexpr char kUpsertAgent[] =
    "INSERT INTO agents(" DET_AGENT_COLUMNS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET hostname = excluded.hostname, "
    "resource_pool = excluded.resource_pool, devices_json = excluded.devices_json, "
    "version = excluded.version, enabled = excluded.enabled, "
    "registered_ms = excluded.registered_ms, last_seen_ms = excluded.last_seen_ms";
constexpr char kUpsertAllocation[] =
    "INSERT INTO allocations(" DET_ALLOCATION_COLUMNS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(id) DO UPDATE SET trial_id = excluded.trial_id, experiment_id = excluded.experiment_id, "
    "token = excluded.token, placements_json = excluded.placements_json, processes = excluded.processes, "
    "terminated = excluded.terminated, created_ms = excluded.created_ms";
constexpr char kDeleteAllocation[] = "DELETE FROM allocations WHERE id = ?";
constexpr char kListAllocations[] = "SELECT " DET_ALLOCATION_COLUMNS " FROM allocations ORDER BY created_ms, id";

constexpr char kListAgents[] = "SELECT " DET_AGENT_COLUMNS " FROM agents ORDER BY id";

constexpr char kPutValue[] =
    "INSERT INTO kv(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value";
constexpr char kGetValue[] = "SELECT value FROM kv WHERE key = ?";

#define DET_USER_COLUMNS "id, username, display_name, password_hash, admin, active, created_ms, modified_ms"
constexpr char kInsertUser[] =
    "INSERT INTO users(username, display_name, password_hash, admin, active, created_ms, modified_ms) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)";
constexpr char kUpdateUser[] =
    "UPDATE users SET display_name = ?, password_hash = ?, admin = ?, active = ?, modified_ms = ? WHERE id = ?";
constexpr char kGetUser[] = "SELECT " DET_USER_COLUMNS " FROM users WHERE id = ?";
constexpr char kGetUserByName[] = "SELECT " DET_USER_COLUMNS " FROM users WHERE username = ?";
constexpr char kListUsers[] = "SELECT " DET_USER_COLUMNS " FROM users ORDER BY id";
constexpr char kInsertUserToken[] =
    "INSERT INTO user_tokens(token_hash, user_id, created_ms, expires_ms) VALUES (?, ?, ?, ?)";
constexpr char kGetUserToken[] =
    "SELECT token_hash, user_id, created_ms, expires_ms FROM user_tokens WHERE token_hash = ?";
constexpr char kDeleteUserToken[] = "DELETE FROM user_tokens WHERE token_hash = ?";
constexpr char kDeleteUserTokens[] = "DELETE FROM user_tokens WHERE user_id = ? AND token_hash != ?";
constexpr char kDeleteExpiredUserTokens[] = "DELETE FROM user_tokens WHERE expires_ms <= ?";

constexpr char kIntegrityCheck[] = "PRAGMA integrity_check";

// ---- Binding and reading ----

// Binds parameters 1, 2, ... in order; remembers the first failure.
class Binder {
 public:
  explicit Binder(sqlite3_stmt* stmt) : stmt_(stmt) {}

  Binder& Int(int64_t v) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_int64(stmt_, ++index_, v);
    return *this;
  }
  // The text must stay alive until the statement is stepped.
  Binder& Text(absl::string_view v) {
    if (rc_ == SQLITE_OK) {
      rc_ = sqlite3_bind_text64(stmt_, ++index_, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
    }
    return *this;
  }
  // NaN is stored as NULL (SQLite does the same for a bound NaN).
  Binder& Double(double v) {
    if (rc_ == SQLITE_OK) {
      rc_ = std::isnan(v) ? sqlite3_bind_null(stmt_, ++index_) : sqlite3_bind_double(stmt_, ++index_, v);
    }
    return *this;
  }
  Binder& OptDouble(const std::optional<double>& v) {
    if (!v.has_value()) {
      if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_null(stmt_, ++index_);
      return *this;
    }
    return Double(*v);
  }
  int rc() const { return rc_; }

 private:
  sqlite3_stmt* stmt_;
  int index_ = 0;
  int rc_ = SQLITE_OK;
};

std::string ColText(sqlite3_stmt* s, int i) {
  const unsigned char* p = sqlite3_column_text(s, i);
  if (p == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s, i)));
}
int64_t ColInt(sqlite3_stmt* s, int i) { return sqlite3_column_int64(s, i); }
double ColDouble(sqlite3_stmt* s, int i) { return sqlite3_column_double(s, i); }
std::optional<double> ColOptDouble(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_double(s, i);
}

// Never throws: invalid UTF-8 is replaced rather than rejected.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<nlohmann::json> ParseJson(const std::string& text, absl::string_view what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat("stored ", what, " is not valid JSON: ", text));
  return j;
}

std::string EncodeLabels(const std::vector<std::string>& labels) { return Dump(nlohmann::json(labels)); }

absl::StatusOr<std::vector<std::string>> DecodeLabels(const std::string& text) {
  DET_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, "experiment labels"));
  if (!j.is_array()) return absl::DataLossError(absl::StrCat("stored experiment labels are not an array: ", text));
  std::vector<std::string> out;
  out.reserve(j.size());
  for (const auto& e : j) {
    if (!e.is_string()) return absl::DataLossError(absl::StrCat("stored experiment label is not a string: ", text));
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::string EncodeMetrics(const std::map<std::string, double>& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, v] : metrics) {
    if (std::isnan(v)) {
      j[name] = "NaN";
    } else if (std::isinf(v)) {
      j[name] = v > 0 ? "Infinity" : "-Infinity";
    } else {
      j[name] = v;
    }
  }
  return Dump(j);
}

absl::StatusOr<std::map<std::string, double>> DecodeMetrics(const std::string& text) {
  DET_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, "metrics"));
  if (!j.is_object()) return absl::DataLossError(absl::StrCat("stored metrics are not an object: ", text));
  std::map<std::string, double> out;
  for (const auto& [name, v] : j.items()) {
    if (v.is_number()) {
      out.emplace(name, v.get<double>());
    } else if (v.is_string() && v.get_ref<const std::string&>() == "NaN") {
      out.emplace(name, std::numeric_limits<double>::quiet_NaN());
    } else if (v.is_string() && v.get_ref<const std::string&>() == "Infinity") {
      out.emplace(name, std::numeric_limits<double>::infinity());
    } else if (v.is_string() && v.get_ref<const std::string&>() == "-Infinity") {
      out.emplace(name, -std::numeric_limits<double>::infinity());
    } else {
      return absl::DataLossError(absl::StrCat("stored metric ", name, " is not a number: ", text));
    }
  }
  return out;
}

std::string EncodeResources(const std::map<std::string, int64_t>& resources) {
  return Dump(nlohmann::json(resources));
}

absl::StatusOr<std::map<std::string, int64_t>> DecodeResources(const std::string& text) {
  DET_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, "checkpoint resources"));
  if (!j.is_object()) return absl::DataLossError(absl::StrCat("stored checkpoint resources are not an object: ", text));
  std::map<std::string, int64_t> out;
  for (const auto& [name, v] : j.items()) {
    if (!v.is_number_integer()) {
      return absl::DataLossError(absl::StrCat("stored checkpoint resource ", name, " is not an integer: ", text));
    }
    out.emplace(name, v.get<int64_t>());
  }
  return out;
}

absl::StatusOr<ExperimentRow> ReadExperiment(sqlite3_stmt* s) {
  ExperimentRow r;
  r.id = ColInt(s, 0);
  r.name = ColText(s, 1);
  r.description = ColText(s, 2);
  DET_ASSIGN_OR_RETURN(r.labels, DecodeLabels(ColText(s, 3)));
  r.state = ColText(s, 4);
  r.config_yaml = ColText(s, 5);
  r.config_json = ColText(s, 6);
  r.trial_so_sha256 = ColText(s, 7);
  r.searcher_state_json = ColText(s, 8);
  r.owner = ColText(s, 9);
  r.archived = ColInt(s, 10) != 0;
  r.progress = ColDouble(s, 11);
  r.created_ms = ColInt(s, 12);
  r.ended_ms = ColInt(s, 13);
  r.checkpoint_gc_policy_json = ColText(s, 14);
  return r;
}

TrialRow ReadTrial(sqlite3_stmt* s) {
  TrialRow r;
  r.id = ColInt(s, 0);
  r.experiment_id = ColInt(s, 1);
  r.request_id = ColInt(s, 2);
  r.state = ColText(s, 3);
  r.hparams_json = ColText(s, 4);
  r.seed = static_cast<uint32_t>(ColInt(s, 5));
  r.restarts = ColInt(s, 6);
  r.run_id = ColInt(s, 7);
  r.total_batches = ColInt(s, 8);
  r.latest_checkpoint_uuid = ColText(s, 9);
  r.best_validation = ColOptDouble(s, 10);
  r.latest_validation = ColOptDouble(s, 11);
  r.sequencer_state_json = ColText(s, 12);
  r.created_ms = ColInt(s, 13);
  r.ended_ms = ColInt(s, 14);
  return r;
}

absl::StatusOr<MetricRow> ReadMetric(sqlite3_stmt* s) {
  MetricRow r;
  r.id = ColInt(s, 0);
  r.trial_id = ColInt(s, 1);
  r.trial_run_id = ColInt(s, 2);
  r.group = ColText(s, 3);
  r.total_batches = ColInt(s, 4);
  r.total_epochs = ColDouble(s, 5);
  DET_ASSIGN_OR_RETURN(r.metrics, DecodeMetrics(ColText(s, 6)));
  r.time_ms = ColInt(s, 7);
  r.archived = ColInt(s, 8) != 0;
  return r;
}

absl::StatusOr<CheckpointRow> ReadCheckpoint(sqlite3_stmt* s) {
  CheckpointRow r;
  r.uuid = ColText(s, 0);
  r.trial_id = ColInt(s, 1);
  r.experiment_id = ColInt(s, 2);
  r.trial_run_id = ColInt(s, 3);
  r.state = ColText(s, 4);
  r.total_batches = ColInt(s, 5);
  r.total_epochs = ColDouble(s, 6);
  DET_ASSIGN_OR_RETURN(r.resources, DecodeResources(ColText(s, 7)));
  r.metadata_json = ColText(s, 8);
  r.storage_path = ColText(s, 9);
  r.time_ms = ColInt(s, 10);
  r.searcher_metric = ColOptDouble(s, 11);
  return r;
}

TaskLogRow ReadTaskLog(sqlite3_stmt* s) {
  TaskLogRow r;
  r.id = ColInt(s, 0);
  r.trial_id = ColInt(s, 1);
  r.allocation_id = ColText(s, 2);
  r.rank = static_cast<int32_t>(ColInt(s, 3));
  r.time_ms = ColInt(s, 4);
  r.level = ColText(s, 5);
  r.stream = ColText(s, 6);
  r.message = ColText(s, 7);
  return r;
}

AllocationRow ReadAllocation(sqlite3_stmt* s) {
  AllocationRow r;
  r.id = ColText(s, 0);
  r.trial_id = ColInt(s, 1);
  r.experiment_id = ColInt(s, 2);
  r.token = ColText(s, 3);
  r.placements_json = ColText(s, 4);
  r.processes = ColInt(s, 5);
  r.terminated = ColInt(s, 6);
  r.created_ms = ColInt(s, 7);
  return r;
}

AgentRow ReadAgent(sqlite3_stmt* s) {
  AgentRow r;
  r.id = ColText(s, 0);
  r.hostname = ColText(s, 1);
  r.resource_pool = ColText(s, 2);
  r.devices_json = ColText(s, 3);
  r.version = ColText(s, 4);
  r.enabled = ColInt(s, 5) != 0;
  r.registered_ms = ColInt(s, 6);
  r.last_seen_ms = ColInt(s, 7);
  return r;
}

int64_t SqlLimit(int64_t limit) { return limit > 0 ? limit : -1; }

// "?, ?, ?" for n parameters.
std::string Placeholders(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += i == 0 ? "?" : ", ?";
  return out;
}

// The WHERE clause for `f` and the texts it binds, in order.
std::string ExperimentWhere(const ExperimentFilter& f, std::vector<std::string>* binds) {
  std::vector<std::string> conds;
  if (!f.states.empty()) {
    conds.push_back(absl::StrCat("state IN (", Placeholders(f.states.size()), ")"));
    binds->insert(binds->end(), f.states.begin(), f.states.end());
  }
  if (!f.name_contains.empty()) {
    conds.push_back("instr(name, ?) > 0");
    binds->push_back(f.name_contains);
  }
  if (!f.label.empty()) {
    conds.push_back("EXISTS (SELECT 1 FROM json_each(experiments.labels) WHERE json_each.value = ?)");
    binds->push_back(f.label);
  }
  if (!f.include_archived) conds.push_back("archived = 0");
  if (conds.empty()) return "";
  return absl::StrCat(" WHERE ", absl::StrJoin(conds, " AND "));
}

}  // namespace

// ---- Stmt and Txn ----

// A prepared statement in use: reset (cached) or finalized (one-off) on
// destruction. Move-only.
class Store::Stmt {
 public:
  Stmt(sqlite3_stmt* stmt, bool owned) : stmt_(stmt), owned_(owned) {}
  Stmt(Stmt&& other) noexcept : stmt_(std::exchange(other.stmt_, nullptr)), owned_(other.owned_) {}
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt() {
    if (stmt_ == nullptr) return;
    if (owned_) {
      sqlite3_finalize(stmt_);
    } else {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
  }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
  bool owned_;
};

// BEGIN IMMEDIATE on Begin(); ROLLBACK on destruction unless committed.
// Inside a Store::Transaction it is a savepoint instead: its failure undoes
// only its own writes and its success commits nothing yet.
// Requires store->mu_ for its whole life.
class Store::Txn {
 public:
  explicit Txn(Store* store) : store_(store) {}
  ~Txn() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!open_) return;
    if (nested_) {
      auto st = store_->Cached(kRollbackTo);
      if (st.ok()) sqlite3_step(st->get());
      auto rel = store_->Cached(kRelease);
      if (rel.ok()) sqlite3_step(rel->get());
    } else {
      auto st = store_->Cached(kRollback);
      if (st.ok()) sqlite3_step(st->get());
    }
  }
  absl::Status Begin() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    nested_ = sqlite3_get_autocommit(store_->db_) == 0;
    return Run(nested_ ? kSavepoint : kBegin, "begin transaction", true);
  }
  absl::Status Commit() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return Run(nested_ ? kRelease : kCommit, "commit transaction", false);
  }

 private:
  absl::Status Run(const char* sql, absl::string_view what, bool opens) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    DET_ASSIGN_OR_RETURN(Stmt st, store_->Cached(sql));
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return store_->Error(rc, what);
    open_ = opens;
    return absl::OkStatus();
  }

  Store* store_;
  bool open_ = false;
  bool nested_ = false;
};

// ---- Store::Transaction ----

Store::Transaction::Transaction(Store* store) : store_(store) {
  store_->mu_.lock();
  if (store_->txn_depth_++ == 0) {
    absl::Status st = store_->Exec(kBegin, "begin transaction");
    if (!st.ok()) {
      // The writes below then commit one by one, as without a Transaction.
      first_error_ = st;
    } else {
      began_ = true;
    }
  }
}

Store::Transaction::~Transaction() {
  if (!done_) (void)Commit();
}

absl::Status Store::Transaction::Commit() {
  if (done_) return first_error_;
  done_ = true;
  absl::Status st = first_error_;
  if (--store_->txn_depth_ == 0 && began_) {
    absl::Status commit = store_->Exec(kCommit, "commit transaction");
    if (!commit.ok()) {
      (void)store_->Exec(kRollback, "roll back transaction");
      if (st.ok()) st = commit;
    }
  }
  store_->mu_.unlock();
  first_error_ = st;
  return st;
}

// ---- Store ----

Store::Store(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

Store::~Store() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  for (auto& [sql, stmt] : stmts_) sqlite3_finalize(stmt);
  stmts_.clear();
  sqlite3_close_v2(db_);
}

int64_t Store::LatestSchemaVersion() { return static_cast<int64_t>(Migrations().size()); }

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return absl::UnavailableError(absl::StrCat("cannot open SQLite database ", path, ": ", msg));
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  std::unique_ptr<Store> store(new Store(path, db));
  {
    std::lock_guard<std::recursive_mutex> lock(store->mu_);
    DET_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL", "set journal_mode=WAL"));
    DET_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL", "set synchronous=NORMAL"));
    DET_RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON", "enable foreign keys"));
    DET_RETURN_IF_ERROR(store->Migrate());
  }
  return store;
}

absl::Status Store::Error(int rc, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", sqlite3_errmsg(db_), " (SQLite database ", path_, ")");
  switch (rc) {
    case SQLITE_CONSTRAINT_PRIMARYKEY:
    case SQLITE_CONSTRAINT_UNIQUE:
      return absl::AlreadyExistsError(msg);
    case SQLITE_CONSTRAINT_FOREIGNKEY:
      return absl::FailedPreconditionError(msg);
    default:
      break;
  }
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
    case SQLITE_MISMATCH:
    case SQLITE_TOOBIG:
      return absl::InvalidArgumentError(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status Store::Exec(const char* sql, absl::string_view what) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return absl::OkStatus();
  sqlite3_free(err);  // sqlite3_errmsg still holds the message.
  return Error(rc, what);
}

absl::StatusOr<Store::Stmt> Store::Cached(const char* sql) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) return Stmt(it->second, /*owned=*/false);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("prepare \"", sql, "\""));
  stmts_.emplace(sql, stmt);
  return Stmt(stmt, /*owned=*/false);
}

absl::StatusOr<Store::Stmt> Store::PrepareOnce(const std::string& sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) return Error(rc, absl::StrCat("prepare \"", sql, "\""));
  return Stmt(stmt, /*owned=*/true);
}

absl::Status Store::Migrate() {
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
    return absl::FailedPreconditionError(absl::StrCat("SQLite database ", path_, " has schema version ", current,
                                                      " but this binary knows only ", latest,
                                                      "; use a newer det-master"));
  }
  for (int64_t version = current + 1; version <= latest; ++version) {
    Txn txn(this);
    DET_RETURN_IF_ERROR(txn.Begin());
    DET_RETURN_IF_ERROR(Exec(migrations[version - 1].c_str(), absl::StrCat("apply migration ", version)));
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
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Store::SchemaVersion() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kSchemaVersion));
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, "read schema version");
  return ColInt(st.get(), 0);
}

// ---- Experiments ----

absl::StatusOr<int64_t> Store::InsertExperiment(const ExperimentRow& row) {
  const std::string labels = EncodeLabels(row.labels);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertExperiment));
  Binder b(st.get());
  b.Text(row.name)
      .Text(row.description)
      .Text(labels)
      .Text(row.state)
      .Text(row.config_yaml)
      .Text(row.config_json)
      .Text(row.trial_so_sha256)
      .Text(row.searcher_state_json)
      .Text(row.owner)
      .Int(row.archived ? 1 : 0)
      .Double(row.progress)
      .Int(row.created_ms)
      .Int(row.ended_ms)
      .Text(row.checkpoint_gc_policy_json);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, "insert experiment");
  return sqlite3_last_insert_rowid(db_);
}

absl::Status Store::UpdateExperiment(const ExperimentRow& row) {
  const std::string labels = EncodeLabels(row.labels);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpdateExperiment));
  Binder b(st.get());
  b.Text(row.name)
      .Text(row.description)
      .Text(labels)
      .Text(row.state)
      .Text(row.config_yaml)
      .Text(row.config_json)
      .Text(row.trial_so_sha256)
      .Text(row.searcher_state_json)
      .Text(row.owner)
      .Int(row.archived ? 1 : 0)
      .Double(row.progress)
      .Int(row.ended_ms)
      .Text(row.checkpoint_gc_policy_json)
      .Int(row.id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("update experiment ", row.id));
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("experiment ", row.id, " not found"));
  return absl::OkStatus();
}

absl::StatusOr<ExperimentRow> Store::GetExperiment(int64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetExperiment));
  Binder b(st.get());
  b.Int(id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment id");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("experiment ", id, " not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get experiment ", id));
  return ReadExperiment(st.get());
}

absl::StatusOr<std::vector<ExperimentRow>> Store::ListExperiments(const ExperimentFilter& filter) {
  std::vector<std::string> binds;
  std::string sql = absl::StrCat("SELECT " DET_EXPERIMENT_COLUMNS " FROM experiments",
                                 ExperimentWhere(filter, &binds), " ORDER BY id", filter.order_desc ? " DESC" : "",
                                 " LIMIT ", SqlLimit(filter.limit), " OFFSET ", std::max<int64_t>(filter.offset, 0));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, PrepareOnce(sql));
  Binder b(st.get());
  for (const auto& v : binds) b.Text(v);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment filter");
  std::vector<ExperimentRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    DET_ASSIGN_OR_RETURN(ExperimentRow row, ReadExperiment(st.get()));
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Error(rc, "list experiments");
  return out;
}

absl::StatusOr<int64_t> Store::CountExperiments(const ExperimentFilter& filter) {
  std::vector<std::string> binds;
  std::string sql = absl::StrCat("SELECT COUNT(*) FROM experiments", ExperimentWhere(filter, &binds));
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, PrepareOnce(sql));
  Binder b(st.get());
  for (const auto& v : binds) b.Text(v);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment filter");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, "count experiments");
  return ColInt(st.get(), 0);
}

// ---- Trials ----

absl::StatusOr<int64_t> Store::InsertTrial(const TrialRow& row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertTrial));
  Binder b(st.get());
  b.Int(row.experiment_id)
      .Int(row.request_id)
      .Text(row.state)
      .Text(row.hparams_json)
      .Int(row.seed)
      .Int(row.restarts)
      .Int(row.run_id)
      .Int(row.total_batches)
      .Text(row.latest_checkpoint_uuid)
      .OptDouble(row.best_validation)
      .OptDouble(row.latest_validation)
      .Text(row.sequencer_state_json)
      .Int(row.created_ms)
      .Int(row.ended_ms);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind trial");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot insert trial: experiment ", row.experiment_id, " not found"));
  }
  if (rc != SQLITE_DONE) return Error(rc, "insert trial");
  return sqlite3_last_insert_rowid(db_);
}

absl::Status Store::UpdateTrial(const TrialRow& row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpdateTrial));
  Binder b(st.get());
  b.Text(row.state)
      .Text(row.hparams_json)
      .Int(row.seed)
      .Int(row.restarts)
      .Int(row.run_id)
      .Int(row.total_batches)
      .Text(row.latest_checkpoint_uuid)
      .OptDouble(row.best_validation)
      .OptDouble(row.latest_validation)
      .Text(row.sequencer_state_json)
      .Int(row.ended_ms)
      .Int(row.id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind trial");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("update trial ", row.id));
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("trial ", row.id, " not found"));
  return absl::OkStatus();
}

absl::StatusOr<TrialRow> Store::GetTrial(int64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetTrial));
  Binder b(st.get());
  b.Int(id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind trial id");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("trial ", id, " not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get trial ", id));
  return ReadTrial(st.get());
}

absl::StatusOr<std::vector<TrialRow>> Store::ListTrials(int64_t experiment_id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListTrials));
  Binder b(st.get());
  b.Int(experiment_id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment id");
  std::vector<TrialRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadTrial(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("list trials of experiment ", experiment_id));
  return out;
}

absl::StatusOr<std::vector<TrialRow>> Store::ListTrialsInStates(const std::vector<std::string>& states) {
  std::vector<TrialRow> out;
  if (states.empty()) return out;
  std::string sql =
      absl::StrCat("SELECT " DET_TRIAL_COLUMNS " FROM trials WHERE state IN (", Placeholders(states.size()),
                   ") ORDER BY id");
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, PrepareOnce(sql));
  Binder b(st.get());
  for (const auto& s : states) b.Text(s);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind trial states");
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadTrial(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list trials by state");
  return out;
}

// ---- Metrics ----

absl::Status Store::InsertMetrics(const std::vector<MetricRow>& rows) {
  if (rows.empty()) return absl::OkStatus();
  // Encode outside the lock.
  std::vector<std::string> encoded;
  encoded.reserve(rows.size());
  for (const auto& r : rows) encoded.push_back(EncodeMetrics(r.metrics));

  std::lock_guard<std::recursive_mutex> lock(mu_);
  Txn txn(this);
  DET_RETURN_IF_ERROR(txn.Begin());
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertMetric));
    for (size_t i = 0; i < rows.size(); ++i) {
      const MetricRow& r = rows[i];
      Binder b(st.get());
      b.Int(r.trial_id)
          .Int(r.trial_run_id)
          .Text(r.group)
          .Int(r.total_batches)
          .Double(r.total_epochs)
          .Text(encoded[i])
          .Int(r.time_ms)
          .Int(r.archived ? 1 : 0);
      if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind metrics");
      int rc = sqlite3_step(st.get());
      if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
        return absl::FailedPreconditionError(absl::StrCat("cannot insert metrics: trial ", r.trial_id, " not found"));
      }
      if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("insert metrics of trial ", r.trial_id));
      sqlite3_reset(st.get());
    }
  }
  return txn.Commit();
}

absl::StatusOr<std::vector<MetricRow>> Store::ListMetrics(int64_t trial_id, const std::string& group,
                                                          bool include_archived, int64_t after_batches,
                                                          int64_t limit) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListMetrics));
  Binder b(st.get());
  b.Int(trial_id).Text(group).Int(include_archived ? 1 : 0).Int(after_batches).Int(SqlLimit(limit));
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind metrics query");
  std::vector<MetricRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    DET_ASSIGN_OR_RETURN(MetricRow row, ReadMetric(st.get()));
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("list metrics of trial ", trial_id));
  return out;
}

absl::Status Store::ArchiveMetricsAfter(int64_t trial_id, int64_t total_batches) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kArchiveMetricsAfter));
  Binder b(st.get());
  b.Int(trial_id).Int(total_batches);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind archive metrics");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("archive metrics of trial ", trial_id));
  return absl::OkStatus();
}

// ---- Checkpoints ----

absl::Status Store::InsertCheckpoint(const CheckpointRow& row) {
  const std::string resources = EncodeResources(row.resources);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertCheckpoint));
  Binder b(st.get());
  b.Text(row.uuid)
      .Int(row.trial_id)
      .Int(row.experiment_id)
      .Int(row.trial_run_id)
      .Text(row.state)
      .Int(row.total_batches)
      .Double(row.total_epochs)
      .Text(resources)
      .Text(row.metadata_json)
      .Text(row.storage_path)
      .Int(row.time_ms)
      .OptDouble(row.searcher_metric);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind checkpoint");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE) {
    return absl::AlreadyExistsError(absl::StrCat("checkpoint ", row.uuid, " already exists"));
  }
  if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
    return absl::FailedPreconditionError(absl::StrCat("cannot insert checkpoint ", row.uuid, ": trial ",
                                                      row.trial_id, " or experiment ", row.experiment_id,
                                                      " not found"));
  }
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("insert checkpoint ", row.uuid));
  return absl::OkStatus();
}

absl::StatusOr<CheckpointRow> Store::GetCheckpoint(const std::string& uuid) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetCheckpoint));
  Binder b(st.get());
  b.Text(uuid);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind checkpoint uuid");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("checkpoint ", uuid, " not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get checkpoint ", uuid));
  return ReadCheckpoint(st.get());
}

absl::StatusOr<std::vector<CheckpointRow>> Store::ListCheckpoints(std::optional<int64_t> experiment_id,
                                                                  std::optional<int64_t> trial_id) {
  const char* sql = experiment_id.has_value()
                        ? (trial_id.has_value() ? kListCheckpointsByBoth : kListCheckpointsByExperiment)
                        : (trial_id.has_value() ? kListCheckpointsByTrial : kListCheckpointsAll);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(sql));
  Binder b(st.get());
  if (experiment_id.has_value()) b.Int(*experiment_id);
  if (trial_id.has_value()) b.Int(*trial_id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind checkpoint query");
  std::vector<CheckpointRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    DET_ASSIGN_OR_RETURN(CheckpointRow row, ReadCheckpoint(st.get()));
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Error(rc, "list checkpoints");
  return out;
}

absl::Status Store::UpdateCheckpointState(const std::string& uuid, const std::string& state) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpdateCheckpointState));
  Binder b(st.get());
  b.Text(state).Text(uuid);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind checkpoint state");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("update checkpoint ", uuid));
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("checkpoint ", uuid, " not found"));
  return absl::OkStatus();
}

// ---- Task logs ----

absl::Status Store::InsertTaskLogs(const std::vector<TaskLogRow>& rows) {
  if (rows.empty()) return absl::OkStatus();
  std::lock_guard<std::recursive_mutex> lock(mu_);
  Txn txn(this);
  DET_RETURN_IF_ERROR(txn.Begin());
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertTaskLog));
    for (const TaskLogRow& r : rows) {
      Binder b(st.get());
      b.Int(r.trial_id).Text(r.allocation_id).Int(r.rank).Int(r.time_ms).Text(r.level).Text(r.stream).Text(r.message);
      if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind task log");
      int rc = sqlite3_step(st.get());
      if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
        return absl::FailedPreconditionError(absl::StrCat("cannot insert task logs: trial ", r.trial_id, " not found"));
      }
      if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("insert task logs of trial ", r.trial_id));
      sqlite3_reset(st.get());
    }
  }
  return txn.Commit();
}

absl::StatusOr<std::vector<TaskLogRow>> Store::ListTaskLogs(int64_t trial_id, int64_t after_id, int64_t limit) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListTaskLogs));
  Binder b(st.get());
  b.Int(trial_id).Int(after_id).Int(SqlLimit(limit));
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind task log query");
  std::vector<TaskLogRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadTaskLog(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("list task logs of trial ", trial_id));
  return out;
}

// ---- Agents ----

absl::Status Store::UpsertAgent(const AgentRow& row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpsertAgent));
  Binder b(st.get());
  b.Text(row.id)
      .Text(row.hostname)
      .Text(row.resource_pool)
      .Text(row.devices_json)
      .Text(row.version)
      .Int(row.enabled ? 1 : 0)
      .Int(row.registered_ms)
      .Int(row.last_seen_ms);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind agent");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("upsert agent ", row.id));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AgentRow>> Store::ListAgents() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListAgents));
  std::vector<AgentRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadAgent(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list agents");
  return out;
}

// ---- Key-value ----

absl::Status Store::PutValue(const std::string& key, const std::string& value) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kPutValue));
  Binder b(st.get());
  b.Text(key).Text(value);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind value");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("put value ", key));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> Store::GetValue(const std::string& key) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetValue));
  Binder b(st.get());
  b.Text(key);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind key");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get value ", key));
  return std::optional<std::string>(ColText(st.get(), 0));
}

// ---- Allocations ----

absl::Status Store::UpsertAllocation(const AllocationRow& row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpsertAllocation));
  Binder b(st.get());
  b.Text(row.id)
      .Int(row.trial_id)
      .Int(row.experiment_id)
      .Text(row.token)
      .Text(row.placements_json)
      .Int(row.processes)
      .Int(row.terminated)
      .Int(row.created_ms);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind allocation");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot store allocation ", row.id, ": trial ", row.trial_id, " not found"));
  }
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("upsert allocation ", row.id));
  return absl::OkStatus();
}

absl::Status Store::DeleteAllocation(const std::string& id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteAllocation));
  Binder b(st.get());
  b.Text(id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind allocation id");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("delete allocation ", id));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AllocationRow>> Store::ListAllocations() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListAllocations));
  std::vector<AllocationRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadAllocation(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list allocations");
  return out;
}

// ---- Users and tokens ----

namespace {

UserRow ReadUser(sqlite3_stmt* s) {
  UserRow u;
  u.id = ColInt(s, 0);
  u.username = ColText(s, 1);
  u.display_name = ColText(s, 2);
  u.password_hash = ColText(s, 3);
  u.admin = ColInt(s, 4) != 0;
  u.active = ColInt(s, 5) != 0;
  u.created_ms = ColInt(s, 6);
  u.modified_ms = ColInt(s, 7);
  return u;
}

}  // namespace

absl::StatusOr<int64_t> Store::InsertUser(const UserRow& row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertUser));
  Binder b(st.get());
  b.Text(row.username)
      .Text(row.display_name)
      .Text(row.password_hash)
      .Int(row.admin ? 1 : 0)
      .Int(row.active ? 1 : 0)
      .Int(row.created_ms)
      .Int(row.modified_ms);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_CONSTRAINT_UNIQUE) {
    return absl::AlreadyExistsError(absl::StrCat("user '", row.username, "' already exists"));
  }
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("insert user ", row.username));
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

absl::Status Store::UpdateUser(const UserRow& row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpdateUser));
  Binder b(st.get());
  b.Text(row.display_name)
      .Text(row.password_hash)
      .Int(row.admin ? 1 : 0)
      .Int(row.active ? 1 : 0)
      .Int(row.modified_ms)
      .Int(row.id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("update user ", row.id));
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("user ", row.id, " not found"));
  return absl::OkStatus();
}

absl::StatusOr<UserRow> Store::GetUser(int64_t id) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetUser));
  Binder b(st.get());
  b.Int(id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user id");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("user ", id, " not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get user ", id));
  return ReadUser(st.get());
}

absl::StatusOr<UserRow> Store::GetUserByName(const std::string& username) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetUserByName));
  Binder b(st.get());
  b.Text(username);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind username");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("user '", username, "' not found"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("get user ", username));
  return ReadUser(st.get());
}

absl::StatusOr<std::vector<UserRow>> Store::ListUsers() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListUsers));
  std::vector<UserRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadUser(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list users");
  return out;
}

absl::Status Store::InsertUserToken(const UserTokenRow& row) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertUserToken));
  Binder b(st.get());
  b.Text(row.token_hash).Int(row.user_id).Int(row.created_ms).Int(row.expires_ms);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user token");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
    return absl::FailedPreconditionError(absl::StrCat("cannot store token: user ", row.user_id, " not found"));
  }
  if (rc == SQLITE_CONSTRAINT_PRIMARYKEY) return absl::AlreadyExistsError("token already exists");
  if (rc != SQLITE_DONE) return Error(rc, "insert user token");
  return absl::OkStatus();
}

absl::StatusOr<UserTokenRow> Store::GetUserToken(const std::string& token_hash) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kGetUserToken));
  Binder b(st.get());
  b.Text(token_hash);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind token hash");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return absl::NotFoundError("token not found");
  if (rc != SQLITE_ROW) return Error(rc, "get user token");
  UserTokenRow t;
  t.token_hash = ColText(st.get(), 0);
  t.user_id = ColInt(st.get(), 1);
  t.created_ms = ColInt(st.get(), 2);
  t.expires_ms = ColInt(st.get(), 3);
  return t;
}

absl::Status Store::DeleteUserToken(const std::string& token_hash) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteUserToken));
  Binder b(st.get());
  b.Text(token_hash);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind token hash");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, "delete user token");
  return absl::OkStatus();
}

absl::Status Store::DeleteUserTokens(int64_t user_id, const std::string& except_token_hash) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteUserTokens));
  Binder b(st.get());
  b.Int(user_id).Text(except_token_hash);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind user id");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("delete tokens of user ", user_id));
  return absl::OkStatus();
}

absl::Status Store::DeleteExpiredUserTokens(int64_t now_ms) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteExpiredUserTokens));
  Binder b(st.get());
  b.Int(now_ms);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind time");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, "delete expired user tokens");
  return absl::OkStatus();
}

// ---- Maintenance ----

absl::Status Store::IntegrityCheck() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kIntegrityCheck));
  std::vector<std::string> lines;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) lines.push_back(ColText(st.get(), 0));
  if (rc != SQLITE_DONE) return Error(rc, "integrity check");
  if (lines.size() == 1 && lines[0] == "ok") return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("integrity check of SQLite database ", path_, " failed: ", absl::StrJoin(lines, "; ")));
}

}  // namespace master
}  // namespace det
