#include "master/core/checkpoint_facts.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace det::master {

int64_t CheckpointSizeBytes(const std::map<std::string, int64_t>& resources) {
  int64_t total = 0;
  for (const auto& [path, size] : resources) {
    if (size <= 0) continue;
    if (size > std::numeric_limits<int64_t>::max() - total) return std::numeric_limits<int64_t>::max();
    total += size;
  }
  return total;
}

double EpochsAt(int64_t total_batches, int64_t batches_per_epoch) {
  if (batches_per_epoch <= 0 || total_batches <= 0) return 0;
  return static_cast<double>(total_batches) / static_cast<double>(batches_per_epoch);
}

void CompleteCheckpointRow(const std::string& metric, const BatchLengths& lengths, CheckpointRow* row) {
  if (!row->searcher_metric) {
    auto it = row->validation_metrics.find(metric);
    if (it != row->validation_metrics.end()) row->searcher_metric = it->second;
  }
  if (row->total_epochs == 0) row->total_epochs = EpochsAt(row->total_batches, lengths.batches_per_epoch);
  if (lengths.global_batch_size > 0 && row->total_batches > 0 &&
      row->total_batches <= std::numeric_limits<int64_t>::max() / lengths.global_batch_size) {
    row->total_records = row->total_batches * lengths.global_batch_size;
  }
}

bool BetterMetric(bool smaller_is_better, double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return smaller_is_better ? a < b : a > b;
}

const CheckpointRow* BestCheckpoint(const std::vector<CheckpointRow>& rows, bool smaller_is_better) {
  const CheckpointRow* best = nullptr;
  for (const CheckpointRow& r : rows) {
    if (r.state != "COMPLETED" || !r.searcher_metric || std::isnan(*r.searcher_metric)) continue;
    if (best == nullptr || BetterMetric(smaller_is_better, *r.searcher_metric, *best->searcher_metric)) {
      best = &r;
    } else if (*r.searcher_metric == *best->searcher_metric &&
               (r.total_batches > best->total_batches ||
                (r.total_batches == best->total_batches && r.time_ms > best->time_ms))) {
      best = &r;
    }
  }
  return best;
}

const MetricRow* BestValidation(const std::vector<MetricRow>& validations, const std::string& metric,
                                bool smaller_is_better) {
  const MetricRow* best = nullptr;
  double best_value = 0;
  for (const MetricRow& r : validations) {
    auto it = r.metrics.find(metric);
    if (it == r.metrics.end() || std::isnan(it->second)) continue;
    const bool earlier_tie = best != nullptr && it->second == best_value && r.total_batches < best->total_batches;
    if (best == nullptr || BetterMetric(smaller_is_better, it->second, best_value) || earlier_tie) {
      best = &r;
      best_value = it->second;
    }
  }
  return best;
}

double TrainedUnits(int64_t target_units, int64_t target_batches, int64_t total_batches) {
  if (target_units <= 0 || target_batches <= 0 || total_batches <= 0) return 0;
  const double units = static_cast<double>(target_units) * static_cast<double>(total_batches) /
                       static_cast<double>(target_batches);
  return std::min(units, static_cast<double>(target_units));
}

}  // namespace det::master
