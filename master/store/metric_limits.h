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
#include <unordered_set>
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
  // Each stored row counts as its metrics JSON plus this.
  static constexpr int64_t kRowOverhead = 64;
};

// What one trial has stored, as MetricLimits counts it.
struct MetricBudget {
  std::unordered_set<std::string> names;
  int64_t bytes = 0;
};

// Checks the rows of one call, all of trial `trial_id` (`encoded[i]` is
// rows[i]'s stored JSON), against `limits` given what the trial has stored
// (`budget`). OK: `*added` holds the names new to the trial and the bytes the
// rows add (apply them once written). Otherwise RESOURCE_EXHAUSTED naming the
// trial, the bound, its det-master flag and that the whole call was refused;
// nothing is written for a refused call.
absl::Status CheckMetricRows(int64_t trial_id, const std::vector<MetricRow>& rows,
                             const std::vector<std::string>& encoded, const MetricLimits& limits,
                             const MetricBudget& budget, MetricBudget* added);

// Adds `added` (from CheckMetricRows) to `budget`.
void ApplyMetricBudget(const MetricBudget& added, MetricBudget* budget);

}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_METRIC_LIMITS_H_
