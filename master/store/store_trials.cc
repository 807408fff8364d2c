// Store: the trials table.
#include "master/store/store.h"

#include <sqlite3.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColInt;
using store_internal::ColOptDouble;
using store_internal::ColText;
using store_internal::Placeholders;

#define DET_TRIAL_COLUMNS                                                                      \
  "id, experiment_id, request_id, state, hparams_json, seed, restarts, run_id, total_batches, " \
  "latest_checkpoint_uuid, best_validation, latest_validation, sequencer_state_json, "          \
  "created_ms, ended_ms, parent_trial_id, parent_checkpoint_uuid"

constexpr char kInsertTrial[] =
    "INSERT INTO trials(experiment_id, request_id, state, hparams_json, seed, restarts, run_id, "
    "total_batches, latest_checkpoint_uuid, best_validation, latest_validation, "
    "sequencer_state_json, created_ms, ended_ms, parent_trial_id, parent_checkpoint_uuid) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
constexpr char kUpdateTrial[] =
    "UPDATE trials SET state = ?, hparams_json = ?, seed = ?, restarts = ?, run_id = ?, "
    "total_batches = ?, latest_checkpoint_uuid = ?, best_validation = ?, latest_validation = ?, "
    "sequencer_state_json = ?, ended_ms = ?, parent_checkpoint_uuid = ? WHERE id = ?";
constexpr char kGetTrial[] = "SELECT " DET_TRIAL_COLUMNS " FROM trials WHERE id = ?";
constexpr char kListTrials[] = "SELECT " DET_TRIAL_COLUMNS " FROM trials WHERE experiment_id = ? ORDER BY id";

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
  r.parent_trial_id = ColInt(s, 15);
  r.parent_checkpoint_uuid = ColText(s, 16);
  return r;
}

}  // namespace

// ---- Trials ----

absl::StatusOr<int64_t> Store::InsertTrial(const TrialRow& row) {
  return Write([&]() -> absl::StatusOr<int64_t> {
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
        .Int(row.ended_ms)
        .Int(row.parent_trial_id)
        .Text(row.parent_checkpoint_uuid);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind trial");
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot insert trial: experiment ", row.experiment_id, " not found"));
    }
    if (rc != SQLITE_DONE) return Error(rc, "insert trial");
    return sqlite3_last_insert_rowid(db_);
  });
}

absl::Status Store::UpdateTrial(const TrialRow& row) {
  return Write([&]() -> absl::Status {
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
        .Text(row.parent_checkpoint_uuid)
        .Int(row.id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind trial");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("update trial ", row.id));
    if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("trial ", row.id, " not found"));
    return absl::OkStatus();
  });
}

absl::StatusOr<TrialRow> Store::GetTrial(int64_t id) {
  std::lock_guard<StoreMutex> lock(mu_);
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
  std::lock_guard<StoreMutex> lock(mu_);
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
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, PrepareOnce(sql));
  Binder b(st.get());
  for (const auto& s : states) b.Text(s);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind trial states");
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadTrial(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, "list trials by state");
  return out;
}

}  // namespace master
}  // namespace det
