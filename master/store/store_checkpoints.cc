// Store: the checkpoints table.
#include "master/store/store.h"

#include <sqlite3.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store_internal.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColDouble;
using store_internal::ColInt;
using store_internal::ColOptDouble;
using store_internal::ColText;
using store_internal::Dump;
using store_internal::ParseJson;

#define DET_CHECKPOINT_COLUMNS                                                                 \
  "uuid, trial_id, experiment_id, trial_run_id, state, total_batches, total_epochs, resources, " \
  "metadata_json, storage_path, time_ms, searcher_metric"

// The columns read back: the stored ones, then the metrics of the trial's
// validation at the checkpoint's total_batches (NULL: none): the run's that
// wrote the checkpoint if it validated there, else the newest unarchived one.
// (SQLite does not resolve an outer column in a subquery's ORDER BY, hence
// the two subqueries.)
#define DET_CHECKPOINT_VALIDATION(extra)                                                        \
  "(SELECT m.metrics FROM metrics m WHERE m.trial_id = c.trial_id AND m.metric_group = 'validation' " \
  "AND m.metric_group != 'training' AND m.total_batches = c.total_batches " extra " ORDER BY m.id DESC LIMIT 1)"
#define DET_CHECKPOINT_SELECT                                                                             \
  "SELECT uuid, trial_id, experiment_id, trial_run_id, state, total_batches, total_epochs, resources, " \
  "metadata_json, storage_path, time_ms, searcher_metric, "                                            \
  "COALESCE(" DET_CHECKPOINT_VALIDATION("AND m.trial_run_id = c.trial_run_id") ", "                     \
  DET_CHECKPOINT_VALIDATION("AND m.archived = 0") ") FROM checkpoints c "

constexpr char kInsertCheckpoint[] =
    "INSERT INTO checkpoints(" DET_CHECKPOINT_COLUMNS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
constexpr char kGetCheckpoint[] = DET_CHECKPOINT_SELECT "WHERE uuid = ?";
constexpr char kListCheckpointsAll[] = DET_CHECKPOINT_SELECT "ORDER BY time_ms, rowid";
constexpr char kListCheckpointsByExperiment[] =
    DET_CHECKPOINT_SELECT "WHERE experiment_id = ? ORDER BY time_ms, rowid";
constexpr char kListCheckpointsByTrial[] = DET_CHECKPOINT_SELECT "WHERE trial_id = ? ORDER BY time_ms, rowid";
constexpr char kListCheckpointsByBoth[] =
    DET_CHECKPOINT_SELECT "WHERE experiment_id = ? AND trial_id = ? ORDER BY time_ms, rowid";
// A validation reported after its checkpoint gives the checkpoint its metric.
constexpr char kSetCheckpointSearcherMetric[] =
    "UPDATE checkpoints SET searcher_metric = ? WHERE trial_id = ? AND trial_run_id = ? AND total_batches = ? "
    "AND searcher_metric IS NULL";
constexpr char kCheckpointBudget[] =
    "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(resources AS BLOB)) + LENGTH(CAST(metadata_json AS BLOB)) + "
    "LENGTH(CAST(storage_path AS BLOB))), 0) + ?2 * COUNT(*) FROM checkpoints WHERE trial_id = ?1";
constexpr char kUpdateCheckpointState[] = "UPDATE checkpoints SET state = ? WHERE uuid = ?";
constexpr char kUpdateCheckpointMetadata[] = "UPDATE checkpoints SET metadata_json = ? WHERE uuid = ?";

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
  if (sqlite3_column_type(s, 12) != SQLITE_NULL) {
    DET_ASSIGN_OR_RETURN(r.validation_metrics, store_internal::DecodeMetrics(ColText(s, 12)));
  }
  return r;
}

}  // namespace

// ---- Checkpoints ----

absl::Status Store::InsertCheckpoint(const CheckpointRow& row) {
  const std::string resources = EncodeResources(row.resources);
  return Write([&]() -> absl::Status {
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
    pending_events_.checkpoint_bytes += CheckpointBytes(row);
    store_internal::ReportIfCommitted(db_, &pending_events_);  // else when the transaction commits
    return absl::OkStatus();
  });
}

absl::StatusOr<CheckpointBudget> Store::CheckpointBudgetOf(int64_t trial_id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kCheckpointBudget));
  Binder b(st.get());
  b.Int(trial_id).Int(CheckpointLimits::kRowOverhead);
  if (sqlite3_step(st.get()) != SQLITE_ROW) return Error(sqlite3_errcode(db_), "count checkpoint rows");
  return CheckpointBudget{ColInt(st.get(), 0), ColInt(st.get(), 1)};
}

int64_t Store::CheckpointRowBytes(const CheckpointRow& row) {
  return static_cast<int64_t>(EncodeResources(row.resources).size() + row.metadata_json.size() +
                              row.storage_path.size()) +
         CheckpointLimits::kRowOverhead;
}

absl::StatusOr<CheckpointRow> Store::GetCheckpoint(const std::string& uuid) {
  std::lock_guard<StoreMutex> lock(mu_);
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
  std::lock_guard<StoreMutex> lock(mu_);
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
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpdateCheckpointState));
    Binder b(st.get());
    b.Text(state).Text(uuid);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind checkpoint state");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("update checkpoint ", uuid));
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("checkpoint ", uuid, " not found"));
    return absl::OkStatus();
  });
}

absl::Status Store::SetCheckpointSearcherMetric(int64_t trial_id, int64_t trial_run_id, int64_t total_batches,
                                                double metric) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kSetCheckpointSearcherMetric));
    Binder b(st.get());
    b.Double(metric).Int(trial_id).Int(trial_run_id).Int(total_batches);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind checkpoint searcher metric");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("set searcher metric of trial ", trial_id, "'s checkpoints"));
    return absl::OkStatus();
  });
}

absl::Status Store::UpdateCheckpointMetadata(const std::string& uuid, const std::string& metadata_json) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpdateCheckpointMetadata));
    Binder b(st.get());
    b.Text(metadata_json).Text(uuid);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind checkpoint metadata");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("update checkpoint metadata ", uuid));
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("checkpoint ", uuid, " not found"));
    return absl::OkStatus();
  });
}

}  // namespace master
}  // namespace det
