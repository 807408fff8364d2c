#include "master/store/metric_rollups.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace det {
namespace master {

const RollupSeries* MetricRollups::Find(const RollupSeriesKey& key) const {
  auto it = series_.find(key);
  return it == series_.end() ? nullptr : &it->second;
}

void MetricRollups::Touch(const RollupSeriesKey& key, RollupSeries* s) {
  if (s->journal != static_cast<size_t>(-1) && s->journal >= floor_) return;
  s->journal = touched_.size();
  touched_.push_back(key);
}

void MetricRollups::Restore(const RollupSeriesKey& key, const RollupSeries& state) {
  auto it = series_.find(key);
  if (it == series_.end()) {
    if (series_.size() >= max_series_) series_.erase(series_.begin());  // rebuilt when next needed
    it = series_.emplace(key, RollupSeries{}).first;
  }
  const size_t journal = it->second.journal;
  it->second = state;
  it->second.journal = journal;
  Touch(key, &it->second);
}

bool MetricRollups::Add(const RollupSeriesKey& key, int64_t batches, int64_t id, double y,
                        std::vector<RollupBlock>* closed) {
  auto it = series_.find(key);
  if (it == series_.end()) return false;
  RollupSeries& s = it->second;
  if (s.points > 0 && !(batches > s.last_batches || (batches == s.last_batches && id > s.last_id))) return false;
  Touch(key, &s);
  ++s.points;
  s.last_batches = batches;
  s.last_id = id;
  for (size_t i = 0; i < kRollupWidths.size(); ++i) {
    s.open[i].Add(id, y);
    if (s.points % kRollupWidths[i] != 0) continue;
    RollupBlock b;
    b.width = kRollupWidths[i];
    b.block = s.points / kRollupWidths[i] - 1;
    b.extremes = s.open[i];
    b.last_batches = batches;
    b.last_id = id;
    closed->push_back(b);
    s.open[i] = PointExtremes{};
  }
  return true;
}

void MetricRollups::Drop(const RollupSeriesKey& key) { series_.erase(key); }

void MetricRollups::DropTrial(int64_t trial_id) {
  auto it = series_.lower_bound(RollupSeriesKey{trial_id, "", ""});
  while (it != series_.end() && it->first.trial_id == trial_id) it = series_.erase(it);
  auto u = unkept_.lower_bound(RollupSeriesKey{trial_id, "", ""});
  while (u != unkept_.end() && u->trial_id == trial_id) u = unkept_.erase(u);
}

void MetricRollups::MarkUnkept(const RollupSeriesKey& key) {
  series_.erase(key);
  if (unkept_.size() >= max_series_) unkept_.erase(unkept_.begin());
  unkept_.insert(key);
}

void MetricRollups::RollbackTo(size_t mark) {
  for (size_t i = mark; i < touched_.size(); ++i) series_.erase(touched_[i]);
  if (mark < touched_.size()) touched_.resize(mark);
  // The savepoint still open began at or before `mark`: a series changed
  // again after this gets a new entry (more entries than needed, never
  // fewer).
  floor_ = mark;
}

void MetricRollups::Commit() {
  for (const RollupSeriesKey& key : touched_) {
    auto it = series_.find(key);
    if (it != series_.end()) it->second.journal = static_cast<size_t>(-1);
  }
  touched_.clear();
  floor_ = 0;
}

std::vector<PointExtremes> MergeRunsIntoBuckets(const std::vector<RollupRun>& runs, int64_t w) {
  std::vector<PointExtremes> buckets;
  for (const RollupRun& r : runs) {
    const size_t b = static_cast<size_t>(r.start / w);
    if (buckets.size() <= b) buckets.resize(b + 1);
    buckets[b].Merge(r.e);
  }
  return buckets;
}

bool RollupRunsFor(const std::vector<RollupBlock>& blocks, int64_t points, int64_t w,
                   const std::vector<std::tuple<int64_t, int64_t, double>>& tail, std::vector<RollupRun>* runs) {
  std::map<std::pair<int64_t, int64_t>, const RollupBlock*> by_start;  // (start, -width)
  for (const RollupBlock& b : blocks) {
    if (b.width <= w) by_start.emplace(std::make_pair(b.block * b.width, -b.width), &b);
  }
  std::map<int64_t, std::pair<int64_t, double>> tail_at;
  for (const auto& [index, key, y] : tail) tail_at.emplace(index, std::make_pair(key, y));
  int64_t p = 0;
  while (p < points) {
    auto it = by_start.lower_bound(std::make_pair(p, std::numeric_limits<int64_t>::min()));
    bool used = false;
    for (; it != by_start.end() && it->first.first == p; ++it) {  // widest first
      const RollupBlock& b = *it->second;
      if (p + b.width > points) continue;
      runs->push_back(RollupRun{p, b.extremes});
      p += b.width;
      used = true;
      break;
    }
    if (used) continue;
    auto t = tail_at.find(p);
    if (t == tail_at.end()) return false;
    RollupRun one{p, {}};
    one.e.Add(t->second.first, t->second.second);
    runs->push_back(one);
    ++p;
  }
  return true;
}

}  // namespace master
}  // namespace det
