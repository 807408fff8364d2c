#include "master/core/metric_downsample.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

namespace det::master {

std::vector<size_t> MinMaxBucketIndices(const std::vector<double>& ys, size_t max_points) {
  const size_t n = ys.size();
  std::vector<size_t> out;
  if (n <= std::max<size_t>(max_points, 2)) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  const size_t buckets = std::max<size_t>((std::max<size_t>(max_points, 4) - 2) / 2, 1);
  const size_t interior = n - 2;  // indices 1 .. n-2
  out.reserve(2 * buckets + 2);
  out.push_back(0);
  for (size_t b = 0; b < buckets; ++b) {
    const size_t begin = 1 + interior * b / buckets;
    const size_t end = 1 + interior * (b + 1) / buckets;
    if (begin >= end) continue;
    size_t lo = begin, hi = begin;
    for (size_t i = begin; i < end; ++i) {
      const double y = ys[i];
      if (std::isnan(y)) continue;
      if (std::isnan(ys[lo]) || y < ys[lo]) lo = i;
      if (std::isnan(ys[hi]) || y > ys[hi]) hi = i;
    }
    out.push_back(std::min(lo, hi));
    if (lo != hi) out.push_back(std::max(lo, hi));
  }
  out.push_back(n - 1);
  return out;
}

namespace {

// One series: the reports (indices into rows) that carry the metric.
struct Series {
  std::vector<size_t> rows;
  std::vector<double> ys;
};

}  // namespace

std::vector<MetricRow> DownsampleReports(std::vector<MetricRow> rows, size_t max_points, bool* downsampled) {
  if (downsampled != nullptr) *downsampled = false;
  // Series by (group, metric name); std::map keeps the pass deterministic.
  std::map<std::pair<std::string, std::string>, Series> series;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (const auto& [name, value] : rows[i].metrics) {
      Series& s = series[{rows[i].group, name}];
      s.rows.push_back(i);
      s.ys.push_back(value);
    }
  }
  bool any = false;
  for (const auto& [key, s] : series) any = any || s.rows.size() > max_points;
  if (!any) return rows;
  // Per report: the metric names some series chose; groups with no long
  // series keep their reports whole.
  std::vector<std::map<std::string, double>> kept(rows.size());
  std::unordered_map<std::string, bool> group_sampled;
  for (const auto& [key, s] : series) {
    if (s.rows.size() > max_points) group_sampled[key.first] = true;
  }
  for (const auto& [key, s] : series) {
    if (!group_sampled[key.first]) continue;
    for (size_t j : MinMaxBucketIndices(s.ys, max_points)) kept[s.rows[j]].emplace(key.second, s.ys[j]);
  }
  std::vector<MetricRow> out;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!group_sampled[rows[i].group]) {
      out.push_back(std::move(rows[i]));
      continue;
    }
    if (kept[i].empty()) continue;
    rows[i].metrics = std::move(kept[i]);
    out.push_back(std::move(rows[i]));
  }
  if (downsampled != nullptr) *downsampled = true;
  return out;
}

}  // namespace det::master
