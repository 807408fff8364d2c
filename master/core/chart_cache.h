// ChartCache: the scans behind downsampled metric queries (GetTrialMetrics
// from the first report, archived reports left out, every metric name),
// kept per (trial, group) so that a chart asked for again reads only what
// was reported since (a dashboard re-reads its charts on every visit and
// refresh). Bounded in bytes, least recently used out. Thread-safe.
#ifndef DET_MASTER_CORE_CHART_CACHE_H_
#define DET_MASTER_CORE_CHART_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "master/store/store.h"

namespace det::master {

class ChartCache {
 public:
  // A trial's scan as Store::ScanMetrics built it, in (total_batches, id)
  // order, with the largest id in it and Store::MetricRewrites() as read
  // before the scan began.
  struct Entry {
    Store::MetricScan scan;
    int64_t max_id = 0;
    uint64_t rewrites = 0;
  };

  explicit ChartCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  // Removes and returns the entry of (trial_id, group), if any: the caller
  // extends it and gives it back with Put.
  std::optional<Entry> Take(int64_t trial_id, const std::string& group);
  // Keeps `entry` for (trial_id, group), replacing any there, then drops the
  // least recently used entries while over the byte bound (an entry larger
  // than the whole bound is not kept).
  void Put(int64_t trial_id, const std::string& group, Entry entry);
  size_t bytes() const;

  // About what `scan` holds in memory.
  static size_t Bytes(const Store::MetricScan& scan);

 private:
  using Key = std::pair<int64_t, std::string>;
  struct Slot {
    Entry entry;
    size_t bytes = 0;
    std::list<Key>::iterator use;
  };
  // Drops the slot at `it` and its place in uses_; requires mu_.
  void Erase(std::map<Key, Slot>::iterator it);

  const size_t max_bytes_;
  mutable std::mutex mu_;
  std::map<Key, Slot> slots_;  // guarded by mu_
  std::list<Key> uses_;        // most recent first; guarded by mu_
  size_t bytes_ = 0;           // guarded by mu_
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_CHART_CACHE_H_
