// Metric values returned by train_batch / evaluate_batch.
#ifndef DET_METRICS_H_
#define DET_METRICS_H_

#include <map>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

namespace det {

// One scalar metric: a double or a one-element tensor (converted when the
// runtime reads it, so a trial need not call .item() itself).
class MetricValue {
 public:
  MetricValue(double value) : value_(value) {}                         // NOLINT
  MetricValue(const torch::Tensor& tensor) : tensor_(tensor) {}        // NOLINT
  // Throws std::invalid_argument when the tensor has more than one element.
  double to_double() const;

 private:
  double value_ = 0;
  torch::Tensor tensor_;
};

using Metrics = std::map<std::string, MetricValue>;
using MetricsMap = std::map<std::string, double>;

// How per-batch validation values of one metric become one number.
//  kAvg: the per-sample mean. The runtime weighs each batch's value by the
//    batch's sample count, the size of dim 0 of its first tensor (the tensor,
//    the list's first, the map's first key in key order), over every rank.
//    A batch without such a tensor has no count: the metric then falls back
//    to kAvgPerBatch, with a one-time warning naming the metric.
//  kAvgPerBatch: the mean of the per-batch values, each batch counting once
//    (Determined's default; a small last batch counts as much as a full one).
//  kSum, kMax, kMin: over the per-batch values.
// The values cross the plugin ABI as ints: new reducers are appended only.
enum class Reducer { kAvg, kSum, kMax, kMin, kAvgPerBatch };

// Reduces `values` (non-empty) with `reducer`; kAvg and kAvgPerBatch both
// give the plain mean here (no sample counts).
double Reduce(Reducer reducer, const std::vector<double>& values);

// As Reduce, with counts[i] the sample count of values[i] (same length, or
// empty). kAvg is sum(values[i] * counts[i]) / sum(counts) when every count is
// positive, else the plain mean and *unweighted (when not null) is set true.
double Reduce(Reducer reducer, const std::vector<double>& values, const std::vector<int64_t>& counts,
              bool* unweighted = nullptr);

}  // namespace det

#endif  // DET_METRICS_H_
