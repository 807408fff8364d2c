// MetricRollups: per trial and series (metric group, metric name), min/max
// per block of points kept as rows are written, so that a chart of any
// length reads O(points), not O(rows), also after a restart (issue 50).
//
// Definitions (the chart side is master/core/metric_downsample.h):
//   - a series is (trial, metric group, metric name); its points are the
//     unarchived reports carrying that name, in (total_batches, id) order,
//     numbered 0, 1, ... (the point index);
//   - a block of width W (kRollupWidths: 64, 256, ..., 65536) covers the
//     aligned points [k*W, (k+1)*W); it is CLOSED when its last point is
//     stored, and then holds the PointExtremes of its points (keys: row
//     ids) and its last point's (total_batches, id);
//   - a chart bucket of width w (ChartBucketWidth, a power of two) is the
//     union of the aligned blocks of any width <= w inside it, so a bucket's
//     extremes are the Merge of those blocks' (plus single points of the
//     open tail): the same as folding its points one by one.
//
// This class is the in-memory side: per series the number of points, the
// last point and the open (not yet closed) block of each width; Add folds a
// point and returns the blocks it closes, for the store to write in the same
// transaction. It holds at most max_series series (beyond, one is evicted:
// the store rebuilds an evicted or unknown series from its last closed
// blocks and the rows after them, Restore).
//
// Contract with the Store (which calls every method under its lock, mu_):
//   - Store::RollupRowLocked(row) (store_metric_rollups.cc) for each metric
//     row stored inside the open transaction (row.id set), which may write
//     closed blocks in that transaction;
//   - Mark() at each savepoint, RollbackTo(mark) when that savepoint rolls
//     back, Commit() when the outermost transaction commits, Abort() when it
//     rolls back: in-memory state never runs ahead of what is committed. A
//     series changed (Add, Restore) after a mark is dropped by RollbackTo
//     that mark or by Abort (rebuilt lazily from what the database holds).
// Thread-compatible (the store's lock guards it).
#ifndef DET_MASTER_STORE_METRIC_ROLLUPS_H_
#define DET_MASTER_STORE_METRIC_ROLLUPS_H_

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace det {
namespace master {

// The extremes of a run of points, composable: folding points one by one
// with Add, in point order, and merging the folds of consecutive runs with
// Merge give the same result. lo/hi are the caller's keys (a point index, a
// row id) of the smallest and the largest value: the first on ties; a NaN
// only when the run has no number (then the run's first point). count:
// points folded.
struct PointExtremes {
  int64_t count = 0;
  int64_t lo = -1, hi = -1;
  double lo_y = 0, hi_y = 0;

  void Add(int64_t key, double y) {
    PointExtremes one;
    one.count = 1;
    one.lo = one.hi = key;
    one.lo_y = one.hi_y = y;
    Merge(one);
  }
  // Folds in `later`, a run that follows this one.
  void Merge(const PointExtremes& later) {
    if (later.count == 0) return;
    if (count == 0) {
      *this = later;
      return;
    }
    if (Before(later.lo_y, lo_y, /*less=*/true)) {
      lo = later.lo;
      lo_y = later.lo_y;
    }
    if (Before(later.hi_y, hi_y, /*less=*/false)) {
      hi = later.hi;
      hi_y = later.hi_y;
    }
    count += later.count;
  }

 private:
  // Whether a later value y replaces the current extreme `cur`: a number
  // replaces a NaN; otherwise strictly smaller (larger) only.
  static bool Before(double y, double cur, bool less) {
    if (std::isnan(y)) return false;
    if (std::isnan(cur)) return true;
    return less ? y < cur : y > cur;
  }
};

// Block widths, narrowest first; each is 4 of the one before, so a chart
// bucket of w points is read from at most 4 blocks (w >= 64); a point
// costs about 1/48 of a block row written.
inline constexpr std::array<int64_t, 6> kRollupWidths = {64, 256, 1024, 4096, 16384, 65536};

struct RollupSeriesKey {
  int64_t trial_id = 0;
  std::string group, name;
  bool operator<(const RollupSeriesKey& o) const {
    return std::tie(trial_id, group, name) < std::tie(o.trial_id, o.group, o.name);
  }
  bool operator==(const RollupSeriesKey& o) const {
    return trial_id == o.trial_id && group == o.group && name == o.name;
  }
};

// A closed block of a series.
struct RollupBlock {
  int64_t width = 0, block = 0;  // covers points [block*width, (block+1)*width)
  PointExtremes extremes;         // keys: row ids
  int64_t last_batches = 0, last_id = 0;
};

// One series' in-memory state.
struct RollupSeries {
  int64_t points = 0;  // points folded: [0, points)
  int64_t last_batches = -1, last_id = 0;
  // The open block of each width (kRollupWidths order): the points from
  // the last multiple of its width up to `points`.
  std::array<PointExtremes, kRollupWidths.size()> open;
  size_t journal = static_cast<size_t>(-1);  // its last entry in MetricRollups::touched_
};

class MetricRollups {
 public:
  // About 350 bytes a series plus its group and name (bounded by
  // MetricLimits): the default bound holds about 40 MiB.
  static constexpr size_t kDefaultMaxSeries = 100000;
  explicit MetricRollups(size_t max_series = kDefaultMaxSeries) : max_series_(max_series < 1 ? 1 : max_series) {}

  // The state of `key`, or null when not held (never seen since the start,
  // evicted, or dropped by a rollback): the store rebuilds it (Restore).
  const RollupSeries* Find(const RollupSeriesKey& key) const;
  // Holds `state` for `key`, evicting another series when over the bound.
  void Restore(const RollupSeriesKey& key, const RollupSeries& state);
  // Folds the point (batches, id, y) into the held series `key`: false (and
  // nothing changed) when it is not held or when the point does not sort
  // after the series' last point (out of order: the store drops the blocks
  // from that point on and rebuilds). Appends the blocks it closes, narrowest
  // first, to *closed.
  bool Add(const RollupSeriesKey& key, int64_t batches, int64_t id, double y, std::vector<RollupBlock>* closed);
  // Forgets a series, or every series of a trial (archive, delete).
  void Drop(const RollupSeriesKey& key);
  void DropTrial(int64_t trial_id);
  size_t series() const { return series_.size(); }
  // Series whose blocks are not kept (a trial stored before migration 16,
  // or a rebuild over its bound): the store stops trying until the trial's
  // rows are archived (DropTrial); charts scan their rows. Bounded like the
  // series (the oldest entries are forgotten: tried again once).
  void MarkUnkept(const RollupSeriesKey& key);
  bool Unkept(const RollupSeriesKey& key) const { return unkept_.count(key) > 0; }

  // Transaction hooks (see the contract above).
  size_t Mark() {
    floor_ = touched_.size();
    return floor_;
  }
  void RollbackTo(size_t mark);
  void Commit();
  void Abort() { RollbackTo(0); }

 private:
  void Touch(const RollupSeriesKey& key, RollupSeries* s);

  const size_t max_series_;
  std::map<RollupSeriesKey, RollupSeries> series_;
  std::set<RollupSeriesKey> unkept_;
  // Series changed since the outermost transaction began, in order (one
  // entry per change after each mark; bounded by the transaction's rows).
  std::vector<RollupSeriesKey> touched_;
  // touched_.size() at the latest Mark() (or more): a series whose journal
  // entry is at or above it needs no new entry.
  size_t floor_ = 0;
};

// Pure helper of the chart path: the extremes of each aligned bucket of
// width w (a power of two) from runs in point order. A run is the extremes
// of `e.count` points from point index `start` and must lie inside one
// bucket (a closed block of width <= w, or one tail point).
struct RollupRun {
  int64_t start = 0;
  PointExtremes e;
};
std::vector<PointExtremes> MergeRunsIntoBuckets(const std::vector<RollupRun>& runs, int64_t w);

// The runs that cover a series' points [0, points) from its closed blocks
// (any widths, any order) for buckets of width w: for each point range the
// widest closed block no wider than w, so a chart reads at most about 4 blocks
// per bucket; `tail` (point index, key, y) covers what no closed block does.
// False when blocks and tail leave a point uncovered (the caller falls back
// to scanning the rows).
bool RollupRunsFor(const std::vector<RollupBlock>& blocks, int64_t points, int64_t w,
                   const std::vector<std::tuple<int64_t, int64_t, double>>& tail, std::vector<RollupRun>* runs);

// What Store::ReadRollupChart reads of one series for a chart: its point
// count, first and last point's row id, the closed blocks a chart of bucket
// width `width` reads (RollupRunsFor) and the points after its last closed
// 64-block (point index, row id, value).
struct RollupChartSeries {
  std::string name;
  int64_t points = 0, first_id = 0, last_id = 0, width = 0;
  std::vector<RollupBlock> blocks;
  std::vector<std::tuple<int64_t, int64_t, double>> tail;
};

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_METRIC_ROLLUPS_H_
