#include "det/metrics.h"

#include <algorithm>
#include <stdexcept>

namespace det {

double MetricValue::to_double() const {
  if (!tensor_.defined()) return value_;
  if (tensor_.numel() != 1) {
    throw std::invalid_argument("metric tensor must have one element, got shape " +
                                c10::str(tensor_.sizes()));
  }
  return tensor_.item<double>();
}

double Reduce(Reducer reducer, const std::vector<double>& values) {
  if (values.empty()) throw std::invalid_argument("cannot reduce an empty list of metric values");
  switch (reducer) {
    case Reducer::kSum: {
      double s = 0;
      for (double v : values) s += v;
      return s;
    }
    case Reducer::kMax:
      return *std::max_element(values.begin(), values.end());
    case Reducer::kMin:
      return *std::min_element(values.begin(), values.end());
    case Reducer::kAvg:
    case Reducer::kAvgPerBatch:
    default: {
      double s = 0;
      for (double v : values) s += v;
      return s / static_cast<double>(values.size());
    }
  }
}

double Reduce(Reducer reducer, const std::vector<double>& values, const std::vector<int64_t>& counts,
              bool* unweighted) {
  if (reducer != Reducer::kAvg) return Reduce(reducer, values);
  bool weighted = !values.empty() && counts.size() == values.size();
  for (int64_t n : counts) weighted = weighted && n > 0;
  if (!weighted) {
    if (unweighted != nullptr) *unweighted = true;
    return Reduce(Reducer::kAvgPerBatch, values);
  }
  double sum = 0;
  double total = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    sum += values[i] * static_cast<double>(counts[i]);
    total += static_cast<double>(counts[i]);
  }
  return sum / total;
}

}  // namespace det
