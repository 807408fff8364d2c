#include "master/store/metric_limits.h"

#include "absl/strings/str_cat.h"
#include "master/store/store.h"

namespace det {
namespace master {
namespace {

// At most 64 bytes of `name` for a message (whole UTF-8 characters).
std::string Shown(const std::string& name) {
  if (name.size() <= 64) return name;
  size_t keep = 64;
  while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(name.substr(0, keep), "...");
}

absl::Status Refused(int64_t trial_id, const std::string& what, const char* flag) {
  return absl::ResourceExhaustedError(absl::StrCat("trial ", trial_id, ": ", what, " (det-master ", flag,
                                                   "); this metric report was refused and nothing of it stored"));
}

}  // namespace

absl::Status CheckMetricRows(int64_t trial_id, const std::vector<MetricRow>& rows,
                             const std::vector<std::string>& encoded, const MetricLimits& limits,
                             const MetricBudget& budget, MetricBudget* added) {
  added->names.clear();
  added->bytes = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const MetricRow& r = rows[i];
    const int64_t values = static_cast<int64_t>(r.metrics.size());
    if (limits.max_values_per_report > 0 && values > limits.max_values_per_report) {
      return Refused(trial_id,
                     absl::StrCat("a ", r.group, " report of ", values, " metric values at total_batches ",
                                  r.total_batches, "; at most ", limits.max_values_per_report, " per report"),
                     "--max-metric-values-per-report");
    }
    for (const auto& [name, value] : r.metrics) {
      const int64_t len = static_cast<int64_t>(name.size());
      if (limits.max_name_bytes > 0 && len > limits.max_name_bytes) {
        return Refused(trial_id,
                       absl::StrCat(r.group, " metric name '", Shown(name), "' is ", len, " bytes; at most ",
                                    limits.max_name_bytes),
                       "--max-metric-name-bytes");
      }
      if (budget.names.count(name) == 0) added->names.insert(name);
    }
    added->bytes += static_cast<int64_t>(encoded[i].size()) + MetricLimits::kRowOverhead;
  }
  const int64_t names = static_cast<int64_t>(budget.names.size() + added->names.size());
  if (limits.max_trial_names > 0 && !added->names.empty() && names > limits.max_trial_names) {
    return Refused(trial_id,
                   absl::StrCat(added->names.size(), " new metric names (such as '", Shown(*added->names.begin()),
                                "') would make ", names, " distinct names; at most ", limits.max_trial_names,
                                " per trial over all groups (names it already has are still accepted)"),
                   "--max-trial-metric-names");
  }
  if (limits.max_trial_bytes > 0 && budget.bytes + added->bytes > limits.max_trial_bytes) {
    return Refused(trial_id,
                   absl::StrCat("its stored metrics (", budget.bytes, " bytes) plus this report (", added->bytes,
                                " bytes) exceed the limit of ", limits.max_trial_bytes,
                                " bytes per trial; further reports are refused"),
                   "--max-trial-metric-mib");
  }
  return absl::OkStatus();
}

void ApplyMetricBudget(const MetricBudget& added, MetricBudget* budget) {
  budget->names.insert(added.names.begin(), added.names.end());
  budget->bytes += added.bytes;
}

}  // namespace master
}  // namespace det
