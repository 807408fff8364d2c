#include "master/core/metric_downsample.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
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

std::vector<ScanPick> DownsampleScan(const Store::MetricScan& scan, const std::vector<bool>& keep_name,
                                     size_t max_points, bool* downsampled) {
  if (downsampled != nullptr) *downsampled = false;
  auto kept = [&](int32_t name) { return keep_name.empty() || keep_name[static_cast<size_t>(name)]; };
  // Series by (group, name) index; std::map keeps the pass deterministic.
  struct Series {
    std::vector<uint32_t> rows;
    std::vector<double> ys;
  };
  std::map<std::pair<int32_t, int32_t>, Series> series;
  for (size_t i = 0; i < scan.rows(); ++i) {
    for (uint32_t k = scan.offsets[i]; k < scan.offsets[i + 1]; ++k) {
      const auto& [name, value] = scan.values[k];
      if (!kept(name)) continue;
      Series& s = series[{scan.group_of[i], name}];
      s.rows.push_back(static_cast<uint32_t>(i));
      s.ys.push_back(value);
    }
  }
  std::vector<bool> group_sampled(scan.groups.size(), false);
  for (const auto& [key, s] : series) {
    if (s.rows.size() > max_points) group_sampled[static_cast<size_t>(key.first)] = true;
  }
  std::vector<std::vector<int32_t>> chosen(scan.rows());
  for (const auto& [key, s] : series) {
    if (!group_sampled[static_cast<size_t>(key.first)]) continue;
    for (size_t j : MinMaxBucketIndices(s.ys, max_points)) chosen[s.rows[j]].push_back(key.second);
  }
  std::vector<ScanPick> out;
  for (size_t i = 0; i < scan.rows(); ++i) {
    if (!group_sampled[static_cast<size_t>(scan.group_of[i])]) {
      out.push_back(ScanPick{i, true, {}});
      continue;
    }
    if (chosen[i].empty()) continue;
    std::sort(chosen[i].begin(), chosen[i].end());
    out.push_back(ScanPick{i, false, std::move(chosen[i])});
    if (downsampled != nullptr) *downsampled = true;
  }
  for (bool sampled : group_sampled) {
    if (sampled && downsampled != nullptr) *downsampled = true;
  }
  return out;
}

std::vector<MetricRow> DownsampleReports(std::vector<MetricRow> rows, size_t max_points, bool* downsampled) {
  Store::MetricScan scan;
  std::map<std::string, int32_t> names, groups;
  auto intern = [](std::map<std::string, int32_t>* index, std::vector<std::string>* list, const std::string& s) {
    auto [it, added] = index->emplace(s, static_cast<int32_t>(list->size()));
    if (added) list->push_back(s);
    return it->second;
  };
  for (const MetricRow& r : rows) {
    scan.ids.push_back(r.id);
    scan.batches.push_back(r.total_batches);
    scan.group_of.push_back(intern(&groups, &scan.groups, r.group));
    for (const auto& [name, value] : r.metrics) scan.values.emplace_back(intern(&names, &scan.names, name), value);
    scan.offsets.push_back(static_cast<uint32_t>(scan.values.size()));
  }
  std::vector<MetricRow> out;
  for (ScanPick& p : DownsampleScan(scan, {}, max_points, downsampled)) {
    MetricRow& r = rows[p.row];
    if (!p.whole) {
      std::map<std::string, double> kept;
      for (int32_t n : p.names) kept.emplace(scan.names[static_cast<size_t>(n)], r.metrics.at(scan.names[static_cast<size_t>(n)]));
      r.metrics = std::move(kept);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace det::master
