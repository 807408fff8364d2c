// MetricTail: the metric rows the Store committed last, kept in memory so
// that metric streams (Store::ListMetricsAfterId) are fed from what the
// writer just committed instead of reading the rows back from SQLite
// (issue 50).
//
// Contract with the Store (which calls every method under its lock, mu_; the
// class itself is not thread-safe):
//   - Stage(row, encoded) for each metric row stored inside the open
//     transaction (row.id set; ids strictly increase in commit order and are
//     never reused; `encoded` is the metrics text stored in the row);
//   - Mark() at each savepoint, RollbackTo(mark) when that savepoint rolls
//     back, Commit() when the outermost transaction commits (staged rows
//     become visible, in id order), Abort() when it rolls back;
//   - Invalidate() after anything rewrote or deleted stored metric rows
//     (Store::MetricRewrites() moved): every row kept is dropped.
// Rows staged but not committed are never visible.
//
// Coverage: the tail answers Read(after_id) only when it provably holds every
// committed row with id > after_id, i.e. after_id >= covered_after(). It
// starts knowing nothing (after a restart streams read SQLite) until either
// the first commit (its first id - 1) or SetBaseline(largest stored id) says
// where it begins; evicting a row moves coverage past that row's id.
#ifndef DET_MASTER_STORE_METRIC_TAIL_H_
#define DET_MASTER_STORE_METRIC_TAIL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "master/store/store_rows.h"

namespace det {
namespace master {

class MetricTail {
 public:
  // Bounds of the committed rows kept. The writer commits up to ~40,000
  // rows/s at the issue-50 goal and a stream polls about every 100 ms to 1 s,
  // so 131,072 rows (~3 s at that rate) keep every open stream's next rows;
  // a stream further behind reads SQLite as before. The byte bound caps the
  // memory whatever the rows' size (a row is at most 64 KiB of metrics text
  // under MetricLimits): 64 MiB.
  static constexpr size_t kDefaultMaxRows = 131072;
  static constexpr size_t kDefaultMaxBytes = size_t{64} << 20;
  // What a kept row costs besides its texts (the struct, the shared_ptr
  // control block, the index entry).
  static constexpr size_t kRowOverhead = 160;

  // A committed row as kept: the metrics stay the encoded text given to
  // Stage, decoded only when a stream delivers the row.
  struct Row {
    int64_t id = 0;
    int64_t trial_id = 0;
    int64_t trial_run_id = 0;
    int64_t total_batches = 0;
    int64_t time_ms = 0;
    double total_epochs = 0;
    bool archived = false;
    std::string group;
    std::string encoded;
  };
  using RowPtr = std::shared_ptr<const Row>;

  struct Stats {
    uint64_t reads_from_tail = 0;  // Read() calls answered
    uint64_t reads_not_covered = 0;  // Read() calls the tail could not answer
    uint64_t evicted = 0;
    uint64_t invalidations = 0;
    size_t rows = 0;
    size_t bytes = 0;
  };

  // max_rows >= 1, max_bytes >= 1 (smaller values are raised to 1).
  explicit MetricTail(size_t max_rows = kDefaultMaxRows, size_t max_bytes = kDefaultMaxBytes);

  // ---- The transaction hooks (see the contract above) ----
  void Stage(const MetricRow& row, const std::string& encoded);
  size_t Mark() const { return staged_base_ + staged_.size(); }
  void RollbackTo(size_t mark);
  void Commit();
  void Abort();

  // Drops every kept and staged row; coverage restarts after the largest id
  // ever staged (rows committed later are kept again).
  void Invalidate();
  // Nothing staged or kept and no coverage yet: every committed row has an
  // id <= largest_stored_id, so coverage starts there. No-op otherwise.
  void SetBaseline(int64_t largest_stored_id);
  bool has_coverage() const { return covered_after_.has_value(); }
  // Every committed row with an id above this is kept (has_coverage()).
  int64_t covered_after() const { return covered_after_.value_or(INT64_MAX); }
  // The rewrite counter (Store::MetricRewrites()) the rows kept agree with.
  uint64_t rewrites_seen() const { return rewrites_seen_; }
  void set_rewrites_seen(uint64_t n) { rewrites_seen_ = n; }

  // When after_id >= covered_after(): appends to *out the kept rows of any
  // of `trial_ids` in `group` ("" = every group) with id > after_id, in id
  // order, at most `limit` (<= 0: all), and returns true. Otherwise returns
  // false and appends nothing. Costs one binary search per trial plus the
  // rows of those trials it steps over, whatever the tail's size.
  bool Read(const std::vector<int64_t>& trial_ids, const std::string& group, int64_t after_id, int64_t limit,
            std::vector<RowPtr>* out);

  Stats stats() const;

 private:
  void Append(RowPtr row);
  void EvictFront();
  const Row& AtSeq(uint64_t seq) const { return *rows_[seq - front_seq_]; }
  static size_t Cost(const Row& r) { return kRowOverhead + r.group.size() + r.encoded.size(); }

  size_t max_rows_;
  size_t max_bytes_;
  // Committed rows in id order; rows_[i] has sequence number front_seq_ + i.
  std::deque<RowPtr> rows_;
  uint64_t front_seq_ = 0;
  size_t bytes_ = 0;
  // Per trial, the sequence numbers of its kept rows (ascending).
  std::unordered_map<int64_t, std::deque<uint64_t>> by_trial_;
  // Staged rows of the open transaction; marks count from staged_base_ (an
  // Invalidate() drops the staged rows and moves the base past them).
  std::vector<RowPtr> staged_;
  size_t staged_base_ = 0;
  std::optional<int64_t> covered_after_;
  int64_t max_seen_id_ = 0;
  uint64_t rewrites_seen_ = 0;
  Stats stats_;
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_METRIC_TAIL_H_
