// What the Store reports to the master's /metrics (master/core/
// master_metrics.h): write transactions and their latency, metric rows, log
// lines and checkpoint bytes stored (only what was committed: buffered per
// transaction in PendingStoreEvents, reported once per kind when the
// outermost transaction commits, dropped when it rolls back), and checkpoint
// bytes deleted (reported by the master core after each removal).
//
// One sink per process (det-master has one Store): set before serving,
// cleared (nullptr) before the sink is destroyed. Unset: nothing is
// reported. The Store calls it under its own lock, so a sink must be quick
// and must not call the Store.
#ifndef DET_MASTER_STORE_STORE_EVENTS_H_
#define DET_MASTER_STORE_STORE_EVENTS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace det::master {

// The `kind` label of det_metric_rows_ingested_total: a metric group's kind
// (never a user-chosen group name).
inline constexpr int kMetricRowKinds = 5;
inline constexpr const char* kMetricRowKindNames[kMetricRowKinds] = {"training", "validation", "profiling", "system",
                                                                     "other"};
// The index in kMetricRowKindNames of metric group `group`'s kind.
inline int MetricRowKindIndex(absl::string_view group) {
  for (int i = 0; i + 1 < kMetricRowKinds; ++i) {
    if (group == kMetricRowKindNames[i]) return i;
  }
  return kMetricRowKinds - 1;  // other
}

// Why checkpoints were deleted: the `reason` label of
// det_checkpoint_bytes_deleted_total.
enum class CheckpointDeletion { kGc, kUser, kExperimentDelete };
inline const char* CheckpointDeletionName(CheckpointDeletion reason) {
  switch (reason) {
    case CheckpointDeletion::kGc:
      return "gc";
    case CheckpointDeletion::kUser:
      return "user";
    case CheckpointDeletion::kExperimentDelete:
      return "experiment_delete";
  }
  return "gc";
}

class StoreEvents {
 public:
  virtual ~StoreEvents() = default;
  // A write transaction ended (committed or rolled back): one write call
  // outside a Store::Transaction, or a whole outermost Store::Transaction;
  // `seconds` from BEGIN (after taking the Store's lock) to its end.
  virtual void WriteTransactionDone(double seconds) = 0;
  // `rows` metric rows of kind kMetricRowKindNames[kind] were committed.
  virtual void MetricRowsStored(int kind, int64_t rows) = 0;
  virtual void LogLinesStored(int64_t lines) = 0;
  // Checkpoint rows were committed whose files (as the trials reported them)
  // hold `bytes`.
  virtual void CheckpointBytesStored(int64_t bytes) = 0;
  // Checkpoints of `bytes` (their reported files) were removed for `reason`.
  virtual void CheckpointBytesDeleted(CheckpointDeletion reason, int64_t bytes) = 0;
};

// What the open transaction has written that /metrics counts; the Store
// keeps one, guarded by its lock. A savepoint (Store::Txn) keeps a copy to
// restore when it rolls back.
struct PendingStoreEvents {
  int64_t rows[kMetricRowKinds] = {};
  int64_t log_lines = 0;
  int64_t checkpoint_bytes = 0;

  // Reports what is pending to `e` (if set), one call per non-zero figure,
  // and clears it.
  void Flush(StoreEvents* e) {
    if (e != nullptr) {
      for (int k = 0; k < kMetricRowKinds; ++k) {
        if (rows[k] > 0) e->MetricRowsStored(k, rows[k]);
      }
      if (log_lines > 0) e->LogLinesStored(log_lines);
      if (checkpoint_bytes > 0) e->CheckpointBytesStored(checkpoint_bytes);
    }
    *this = PendingStoreEvents();
  }
};

inline std::atomic<StoreEvents*> g_store_events{nullptr};
inline void SetStoreEvents(StoreEvents* events) { g_store_events.store(events, std::memory_order_release); }
inline StoreEvents* CurrentStoreEvents() { return g_store_events.load(std::memory_order_acquire); }

// The bytes of a checkpoint's files as its trial reported them.
template <typename Row>
int64_t CheckpointBytes(const Row& row) {
  int64_t bytes = 0;
  for (const auto& [name, size] : row.resources) bytes += size;
  return bytes;
}

inline void ReportWriteTransaction(std::chrono::steady_clock::time_point began) {
  if (StoreEvents* e = CurrentStoreEvents()) {
    e->WriteTransactionDone(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  }
}

}  // namespace det::master

#endif  // DET_MASTER_STORE_STORE_EVENTS_H_
