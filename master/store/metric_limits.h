// Bounds on the metrics a trial may store (issue 46, finding 6), as
// TaskLogLimits bounds its logs: a metric name's length, the values of one
// reported row, the distinct names of a trial (over all its groups) and the
// bytes of metric data a trial stores. Pure code: no I/O, no locks; the
// Store applies them (Store::set_metric_limits) and keeps each trial's
// MetricBudget, derived from the stored rows after a restart.
#ifndef DET_MASTER_STORE_METRIC_LIMITS_H_
#define DET_MASTER_STORE_METRIC_LIMITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace det {
namespace master {

struct MetricRow;

// Each bound 0: unbounded. The defaults are det-master's flag defaults.
struct MetricLimits {
  int64_t max_name_bytes = 256;          // --max-metric-name-bytes
  int64_t max_values_per_report = 1000;  // --max-metric-values-per-report (one row)
  int64_t max_trial_names = 1000;        // --max-trial-metric-names (all groups)
  int64_t max_trial_bytes = 256 << 20;   // --max-trial-metric-mib
  // The profiler's groups together (`profiling` and `system`, counted like
  // max_trial_bytes). No flag: the profiler's rate is fixed (tests lower it).
  int64_t max_profiler_bytes = 16 << 20;
  // Each stored row counts as its metrics JSON plus this.
  static constexpr int64_t kRowOverhead = 64;
};

// A metric name as MetricBudget keeps it: 64 bits of a hash seeded once per
// process (FNV-1a from a random basis), not the name itself, so that the
// Store's cache of budgets stays small (8 bytes per name: 10,000 trials of
// 1,000 names take about 80 MB, not the 2.5 GB their strings would). Two
// names colliding (about n^2 / 2^65 for n names) make a new name count as
// known: one name over --max-trial-metric-names, the bytes bound unchanged.
uint64_t MetricNameHash(const std::string& name);

// The trial profiler's groups (docs/guides/profiling.md): names the runtime
// chooses, reported at a fixed rate, outside the bounds of MetricLimits (their
// names and bytes do not count there) and bounded on their own: a fixed key
// set each, finite values >= 0, at most kMaxProfilerRowsPerGroup rows per
// trial and group, and at most MetricLimits::max_profiler_bytes (16 MiB) of
// both groups together per trial, counted like max_trial_bytes.
inline constexpr int64_t kMaxProfilerRowsPerGroup = 50000;
// At most this many GPUs in a `system` row (gpu0_... to gpu63_...).
inline constexpr int kMaxProfilerGpus = 64;
// "profiling" or "system".
bool IsProfilerGroup(const std::string& group);
// Whether `key` is a key of profiler group `group`: profiling's wall_s,
// data_loader_s, forward_s, backward_s, allreduce_s, optimizer_step_s,
// checkpoint_s, validation_s, runtime_s, unattributed_s, batches, samples; system's
// cpu_ratio, rss_bytes, gpu<I>_utilization_ratio, gpu<I>_memory_used_bytes
// (I in 0..kMaxProfilerGpus-1, no leading zero).
bool IsProfilerKey(const std::string& group, const std::string& key);

// What one trial has stored, as MetricLimits counts it.
struct MetricBudget {
  std::vector<uint64_t> names;  // MetricNameHash of each distinct name, sorted
  int64_t bytes = 0;
  std::string example;  // in an `added` budget: one new name, for messages
  // Rows of the profiler's groups (not counted in names or bytes) and their
  // bytes together (counted as `bytes` is, against max_profiler_bytes).
  int64_t profiling_rows = 0;
  int64_t system_rows = 0;
  int64_t profiler_bytes = 0;

  bool Has(uint64_t hash) const;
  void Add(uint64_t hash);  // keeps `names` sorted and distinct
};

// Checks the rows of one call, all of trial `trial_id` (`encoded[i]` is
// rows[i]'s stored JSON), against `limits` given what the trial has stored
// (`budget`). OK: `*added` holds the names new to the trial and the bytes the
// rows add (apply them once written). Otherwise RESOURCE_EXHAUSTED naming the
// trial, the bound, its det-master flag and that the whole call was refused;
// nothing is written for a refused call. Rows of a profiler group are checked
// against its own bounds instead: INVALID_ARGUMENT naming the group and the
// key for a key not of that group or a value not finite or negative,
// RESOURCE_EXHAUSTED naming the group past kMaxProfilerRowsPerGroup rows or
// past max_profiler_bytes.
absl::Status CheckMetricRows(int64_t trial_id, const std::vector<MetricRow>& rows,
                             const std::vector<std::string>& encoded, const MetricLimits& limits,
                             const MetricBudget& budget, MetricBudget* added);

// Adds `added` (from CheckMetricRows) to `budget`.
void ApplyMetricBudget(const MetricBudget& added, MetricBudget* budget);

// Bounds on the checkpoints a trial may report (issue 46 review, item 4):
// ReportCheckpoint names a new UUID each time and needs no directory, so
// without them a trial fills the master's disk with checkpoint rows. Each
// bound 0: unbounded. The defaults are det-master's flag defaults.
struct CheckpointLimits {
  // Rows of the trial, whatever their state: a checkpoint GC deleted keeps
  // its row (state DELETED) and its bytes, so it counts. 10,000 is a
  // checkpoint every 10 minutes for 69 days.
  int64_t max_trial_checkpoints = 10000;      // --max-trial-checkpoints
  int64_t max_resources_per_report = 100000;  // --max-checkpoint-resources
  int64_t max_metadata_bytes = 1 << 20;       // --max-checkpoint-metadata-kib
  int64_t max_trial_bytes = 256 << 20;        // --max-trial-checkpoint-mib
  // Each stored row counts as its resources JSON, metadata and storage path
  // plus this.
  static constexpr int64_t kRowOverhead = 128;
};

// What one trial's checkpoint rows hold, as CheckpointLimits counts it.
struct CheckpointBudget {
  int64_t rows = 0;
  int64_t bytes = 0;
};

// Checks one checkpoint report of trial `trial_id`: `resources` files, a
// metadata JSON of `metadata_bytes`, a row of `row_bytes` (as the Store
// counts it), given what the trial has stored. RESOURCE_EXHAUSTED naming the
// trial, the bound and its det-master flag; nothing is stored then.
absl::Status CheckCheckpointReport(int64_t trial_id, int64_t resources, int64_t metadata_bytes, int64_t row_bytes,
                                   const CheckpointLimits& limits, const CheckpointBudget& budget);

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_METRIC_LIMITS_H_
