// Store: deleting an experiment's rows in bounded batches (DeleteExperiment's
// background task, master/core/experiment_lifecycle.cc).
#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColInt;

// Each deletes at most ?2 rows belonging to experiment ?1, children first.
constexpr char kDeleteMetricsBatch[] =
    "DELETE FROM metrics WHERE id IN (SELECT m.id FROM metrics m JOIN trials t ON m.trial_id = t.id "
    "WHERE t.experiment_id = ?1 LIMIT ?2)";
constexpr char kDeleteTaskLogsBatch[] =
    "DELETE FROM task_logs WHERE id IN (SELECT l.id FROM task_logs l JOIN trials t ON l.trial_id = t.id "
    "WHERE t.experiment_id = ?1 LIMIT ?2)";
constexpr char kDeleteCheckpointsBatch[] =
    "DELETE FROM checkpoints WHERE uuid IN (SELECT uuid FROM checkpoints WHERE experiment_id = ?1 LIMIT ?2)";
constexpr char kDeleteAllocationsBatch[] =
    "DELETE FROM allocations WHERE id IN (SELECT a.id FROM allocations a WHERE a.experiment_id = ?1 "
    "OR a.trial_id IN (SELECT id FROM trials WHERE experiment_id = ?1) LIMIT ?2)";
constexpr char kDeleteTrialsBatch[] =
    "DELETE FROM trials WHERE id IN (SELECT id FROM trials WHERE experiment_id = ?1 LIMIT ?2)";
constexpr char kDeleteCheckpointRow[] = "DELETE FROM checkpoints WHERE uuid = ?";
constexpr char kDeleteExperimentRow[] = "DELETE FROM experiments WHERE id = ?";
constexpr char kCountArtifactUsers[] =
    "SELECT COUNT(*) FROM experiments WHERE trial_so_sha256 = ?1 AND id <> ?2";

}  // namespace

absl::StatusOr<int64_t> Store::DeleteExperimentDataBatch(int64_t experiment_id, int64_t max_rows) {
  return Write([&]() -> absl::StatusOr<int64_t> {
    for (const char* sql : {kDeleteMetricsBatch, kDeleteTaskLogsBatch, kDeleteCheckpointsBatch,
                            kDeleteAllocationsBatch, kDeleteTrialsBatch}) {
      DET_ASSIGN_OR_RETURN(Stmt st, Cached(sql));
      Binder b(st.get());
      b.Int(experiment_id).Int(max_rows);
      if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment deletion");
      int rc = sqlite3_step(st.get());
      if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("delete rows of experiment ", experiment_id));
      const int64_t n = sqlite3_changes(db_);
      if (n > 0) metric_rewrites_.fetch_add(1);  // metrics, or trials whose ids may come back
      if (n > 0) return n;  // one table per batch: its rows go first
    }
    return int64_t{0};
  });
}

absl::Status Store::DeleteCheckpointRows(const std::vector<std::string>& uuids) {
  return Write([&]() -> absl::Status {
    Txn txn(this);
    DET_RETURN_IF_ERROR(txn.Begin());
    for (const auto& uuid : uuids) {
      DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteCheckpointRow));
      Binder b(st.get());
      b.Text(uuid);
      if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind checkpoint uuid");
      int rc = sqlite3_step(st.get());
      if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("delete checkpoint ", uuid));
    }
    return txn.Commit();
  });
}

absl::Status Store::DeleteExperimentRow(int64_t experiment_id) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteExperimentRow));
    Binder b(st.get());
    b.Int(experiment_id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind experiment id");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("delete experiment ", experiment_id));
    return absl::OkStatus();
  });
}

absl::StatusOr<int64_t> Store::CountExperimentsWithArtifact(const std::string& sha256, int64_t except_id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kCountArtifactUsers));
  Binder b(st.get());
  b.Text(sha256).Int(except_id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind artifact count");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, "count experiments of an artifact");
  return ColInt(st.get(), 0);
}

}  // namespace master
}  // namespace det
