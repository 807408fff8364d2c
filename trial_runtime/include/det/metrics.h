// Metric values returned by train_batch / evaluate_batch.
#ifndef DET_METRICS_H_
#define DET_METRICS_H_

#include <map>
#include <string>

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
enum class Reducer { kAvg, kSum, kMax, kMin };

// Reduces `values` (non-empty) with `reducer`.
double Reduce(Reducer reducer, const std::vector<double>& values);

}  // namespace det

#endif  // DET_METRICS_H_
