// Downsampling of metric series for charts (GetTrialMetrics without
// full_resolution): min/max buckets that keep a series' first and last
// points and every extreme. Pure: no I/O, no locks, thread-compatible.
#ifndef DET_MASTER_CORE_METRIC_DOWNSAMPLE_H_
#define DET_MASTER_CORE_METRIC_DOWNSAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "master/store/store.h"

namespace det::master {

// The default and the largest number of points per series a downsampled
// metric query returns, and the largest full-resolution page.
inline constexpr int kDefaultChartPoints = 1000;
inline constexpr int kMaxChartPoints = 10000;
inline constexpr int kMaxMetricsPage = 10000;

// PointExtremes (composable min/max of a run of points) is defined in
// master/store/metric_rollups.h, which store.h includes.

// The bucket width of a downsampled series of n points: 0 when every point
// is kept (n <= max(max_points, 2)); otherwise the smallest power of two w
// such that the ALIGNED buckets [k*w, (k+1)*w) over the point indices
// number at most (max(max_points, 4) - 2) / 2 (at least 1). Aligned power-of-
// two buckets are unions of aligned rollup blocks (64, 1024, ... points), so
// the rollup path (metric_rollups.h) and a full scan choose the same points.
size_t ChartBucketWidth(size_t n, size_t max_points);

// The indices (ascending, distinct) of the points of `ys` to keep so that at
// most max(max_points, 4) remain: every index when ChartBucketWidth is 0;
// otherwise index 0, the last index and, in each aligned bucket of
// ChartBucketWidth points, the index of the smallest and of the largest
// value as PointExtremes folds them (the first on ties; a NaN is chosen only
// in a bucket with no number). Every global minimum and maximum that is a
// number is therefore kept (its first occurrence), and more than half the
// bucket bound of buckets are used. O(ys.size()).
std::vector<size_t> MinMaxBucketIndices(const std::vector<double>& ys, size_t max_points);

// What DownsampleScan keeps of a scan's row: the names (indices into
// scan.names) whose series chose it, ascending, or every name of the row
// (`whole`: its group needed no downsampling).
struct ScanPick {
  size_t row = 0;
  bool whole = false;
  std::vector<int32_t> names;
};

// The rows of `scan` (one trial's reports in (total_batches, id) order) to
// return and which of their values, as DownsampleReports describes; only
// names for which keep_name[name index] is true count (all when
// keep_name is empty). In row order. Sets *downsampled when not null.
std::vector<ScanPick> DownsampleScan(const Store::MetricScan& scan, const std::vector<bool>& keep_name,
                                     size_t max_points, bool* downsampled);

// Downsamples `rows` (one trial's reports in (total_batches, id) order) to at
// most `max_points` points per series, a series being one metric name of one
// group: each series keeps the points MinMaxBucketIndices chooses among the
// reports that carry its metric. A report keeps only the metrics whose
// series chose it and is dropped when none did (reports of a group whose
// series all fit are kept unchanged, empty ones too). Order is preserved.
// Sets *downsampled (when not null) to whether anything was left out.
std::vector<MetricRow> DownsampleReports(std::vector<MetricRow> rows, size_t max_points, bool* downsampled);

}  // namespace det::master

#endif  // DET_MASTER_CORE_METRIC_DOWNSAMPLE_H_
