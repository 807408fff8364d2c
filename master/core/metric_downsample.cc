#include "master/core/metric_downsample.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

namespace det::master {

size_t ChartBucketWidth(size_t n, size_t max_points) {
  if (n <= std::max<size_t>(max_points, 2)) return 0;
  const size_t buckets = std::max<size_t>((std::max<size_t>(max_points, 4) - 2) / 2, 1);
  size_t w = 1;
  while ((n + w - 1) / w > buckets) w *= 2;
  return w;
}

std::vector<size_t> MinMaxBucketIndices(const std::vector<double>& ys, size_t max_points) {
  const size_t n = ys.size();
  const size_t w = ChartBucketWidth(n, max_points);
  std::vector<size_t> out;
  if (w == 0) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  out.reserve(2 * (n / w + 1) + 2);
  out.push_back(0);
  for (size_t begin = 0; begin < n; begin += w) {
    PointExtremes e;
    for (size_t i = begin; i < std::min(n, begin + w); ++i) e.Add(static_cast<int64_t>(i), ys[i]);
    out.push_back(static_cast<size_t>(e.lo));
    out.push_back(static_cast<size_t>(e.hi));
  }
  out.push_back(n - 1);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<ScanPick> DownsampleScan(const Store::MetricScan& scan, const std::vector<bool>& keep_name,
                                     size_t max_points, bool* downsampled) {
  if (downsampled != nullptr) *downsampled = false;
  auto kept = [&](int32_t name) { return keep_name.empty() || keep_name[static_cast<size_t>(name)]; };
  // Series by (group, name), found through a dense (group x name) table:
  // this loop runs once per stored value (millions for a long trial).
  struct Series {
    int32_t group = 0, name = 0;
    std::vector<uint32_t> rows;
    std::vector<double> ys;
  };
  const size_t names = scan.names.size();
  std::vector<int32_t> slot(scan.groups.size() * names, -1);
  std::vector<Series> series;
  for (size_t i = 0; i < scan.rows(); ++i) {
    const size_t group = static_cast<size_t>(scan.group_of[i]);
    for (uint32_t k = scan.offsets[i]; k < scan.offsets[i + 1]; ++k) {
      const auto& [name, value] = scan.values[k];
      if (!kept(name)) continue;
      int32_t& index = slot[group * names + static_cast<size_t>(name)];
      if (index < 0) {
        index = static_cast<int32_t>(series.size());
        series.push_back(Series{scan.group_of[i], name, {}, {}});
      }
      Series& s = series[static_cast<size_t>(index)];
      s.rows.push_back(static_cast<uint32_t>(i));
      s.ys.push_back(value);
    }
  }
  std::vector<bool> group_sampled(scan.groups.size(), false);
  for (const Series& s : series) {
    if (s.rows.size() > max_points) group_sampled[static_cast<size_t>(s.group)] = true;
  }
  // (row, name) of every chosen point, then grouped by row.
  std::vector<std::pair<uint32_t, int32_t>> chosen;
  for (const Series& s : series) {
    if (!group_sampled[static_cast<size_t>(s.group)]) continue;
    for (size_t j : MinMaxBucketIndices(s.ys, max_points)) chosen.emplace_back(s.rows[j], s.name);
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<ScanPick> out;
  size_t c = 0;
  for (size_t i = 0; i < scan.rows(); ++i) {
    if (!group_sampled[static_cast<size_t>(scan.group_of[i])]) {
      out.push_back(ScanPick{i, true, {}});
      continue;
    }
    if (c == chosen.size() || chosen[c].first != i) continue;
    ScanPick pick{i, false, {}};
    for (; c < chosen.size() && chosen[c].first == i; ++c) pick.names.push_back(chosen[c].second);
    out.push_back(std::move(pick));
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
