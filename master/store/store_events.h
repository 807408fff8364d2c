// What the Store reports to the master's /metrics (master/core/
// master_metrics.h): write transactions and their latency, metric rows, log
// lines and checkpoint bytes stored, checkpoint bytes deleted by GC.
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

namespace det::master {

class StoreEvents {
 public:
  virtual ~StoreEvents() = default;
  // A write transaction ended (committed or rolled back): one write call
  // outside a Store::Transaction, or a whole outermost Store::Transaction;
  // `seconds` from BEGIN (after taking the Store's lock) to its end.
  virtual void WriteTransactionDone(double seconds) = 0;
  // `rows` metric rows of `group` were written.
  virtual void MetricRowsStored(const std::string& group, int64_t rows) = 0;
  virtual void LogLinesStored(int64_t lines) = 0;
  // A checkpoint row was written whose files (as the trial reported them)
  // hold `bytes`.
  virtual void CheckpointBytesStored(int64_t bytes) = 0;
  // Checkpoint GC removed a checkpoint of `bytes` (its reported files).
  virtual void CheckpointBytesDeleted(int64_t bytes) = 0;
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
