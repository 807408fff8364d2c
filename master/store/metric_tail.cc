// MetricTail (metric_tail.h): the committed metric rows streams read.
#include "master/store/metric_tail.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <tuple>
#include <utility>

namespace det {
namespace master {

MetricTail::MetricTail(size_t max_rows, size_t max_bytes)
    : max_rows_(std::max<size_t>(max_rows, 1)), max_bytes_(std::max<size_t>(max_bytes, 1)) {}

void MetricTail::Stage(const MetricRow& row, const std::string& encoded) {
  auto r = std::make_shared<Row>();
  r->id = row.id;
  r->trial_id = row.trial_id;
  r->trial_run_id = row.trial_run_id;
  r->total_batches = row.total_batches;
  r->time_ms = row.time_ms;
  r->total_epochs = row.total_epochs;
  r->archived = row.archived;
  r->group = row.group;
  r->encoded = encoded;
  max_seen_id_ = std::max(max_seen_id_, row.id);
  staged_.push_back(std::move(r));
}

void MetricTail::RollbackTo(size_t mark) {
  if (mark <= staged_base_) {
    staged_.clear();
  } else if (mark - staged_base_ < staged_.size()) {
    staged_.resize(mark - staged_base_);
  }
}

void MetricTail::Abort() {
  staged_.clear();
  staged_base_ = 0;
}

void MetricTail::Commit() {
  std::vector<RowPtr> staged = std::move(staged_);
  staged_.clear();
  staged_base_ = 0;
  std::sort(staged.begin(), staged.end(), [](const RowPtr& a, const RowPtr& b) { return a->id < b->id; });
  for (RowPtr& r : staged) {
    const int64_t last = rows_.empty() ? covered_after_.value_or(INT64_MIN) : rows_.back()->id;
    if (r->id <= last) {
      // Not after what is kept: the ids broke their contract. Keep nothing
      // rather than answer out of order; SQLite answers until rows follow.
      Invalidate();
      continue;
    }
    if (!covered_after_.has_value()) covered_after_ = r->id - 1;  // every earlier commit has a smaller id
    Append(std::move(r));
  }
}

void MetricTail::Append(RowPtr row) {
  const uint64_t seq = front_seq_ + rows_.size();
  by_trial_[row->trial_id].push_back(seq);
  bytes_ += Cost(*row);
  rows_.push_back(std::move(row));
  while (rows_.size() > max_rows_ || (bytes_ > max_bytes_ && !rows_.empty())) EvictFront();
}

void MetricTail::EvictFront() {
  const RowPtr& r = rows_.front();
  covered_after_ = std::max(covered_after_.value_or(INT64_MIN), r->id);
  auto it = by_trial_.find(r->trial_id);
  if (it != by_trial_.end()) {
    it->second.pop_front();
    if (it->second.empty()) by_trial_.erase(it);
  }
  bytes_ -= Cost(*r);
  rows_.pop_front();
  ++front_seq_;
  ++stats_.evicted;
}

void MetricTail::Invalidate() {
  front_seq_ += rows_.size();
  rows_.clear();
  by_trial_.clear();
  bytes_ = 0;
  staged_base_ += staged_.size();
  staged_.clear();
  if (max_seen_id_ > 0) {
    covered_after_ = max_seen_id_;
  } else {
    covered_after_.reset();
  }
  ++stats_.invalidations;
}

void MetricTail::SetBaseline(int64_t largest_stored_id) {
  if (covered_after_.has_value() || !rows_.empty() || !staged_.empty()) return;
  covered_after_ = std::max(largest_stored_id, max_seen_id_);
}

bool MetricTail::Read(const std::vector<int64_t>& trial_ids, const std::string& group, int64_t after_id,
                      int64_t limit, std::vector<RowPtr>* out) {
  if (!covered_after_.has_value() || after_id < *covered_after_) {
    ++stats_.reads_not_covered;
    return false;
  }
  ++stats_.reads_from_tail;
  // One cursor per trial (its next sequence number and its end), merged by id.
  using Cursor = std::pair<std::deque<uint64_t>::const_iterator, std::deque<uint64_t>::const_iterator>;
  std::vector<Cursor> cursors;
  std::vector<int64_t> ids = trial_ids;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int64_t trial : ids) {
    auto it = by_trial_.find(trial);
    if (it == by_trial_.end()) continue;
    const std::deque<uint64_t>& seqs = it->second;
    auto first = std::partition_point(seqs.begin(), seqs.end(),
                                      [&](uint64_t seq) { return AtSeq(seq).id <= after_id; });
    if (first != seqs.end()) cursors.emplace_back(first, seqs.end());
  }
  // Sequence numbers follow ids, so the smallest sequence is the smallest id.
  using Head = std::pair<uint64_t, size_t>;  // (sequence, cursor index)
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
  for (size_t i = 0; i < cursors.size(); ++i) heads.emplace(*cursors[i].first, i);
  int64_t added = 0;
  while (!heads.empty() && (limit <= 0 || added < limit)) {
    const auto [seq, i] = heads.top();
    heads.pop();
    const RowPtr& row = rows_[seq - front_seq_];
    if (group.empty() || row->group == group) {
      out->push_back(row);
      ++added;
    }
    if (++cursors[i].first != cursors[i].second) heads.emplace(*cursors[i].first, i);
  }
  return true;
}

MetricTail::Stats MetricTail::stats() const {
  Stats s = stats_;
  s.rows = rows_.size();
  s.bytes = bytes_;
  return s;
}

}  // namespace master
}  // namespace det
