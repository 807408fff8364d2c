// Store: chart rollups kept as metric rows are written (metric_rollups.h,
// migration 16; issue 50). For each stored, unarchived row and each of its
// metric names, the series (trial, group, name) folds the point; the blocks
// it closes are written in the same transaction. A series not held in
// memory (after a restart, an eviction, a rollback) is rebuilt from its last
// closed 64-block, the wider open blocks merged from closed narrower blocks,
// and the rows after that block (at most kRebuildRows of them).
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/metric_rollups.h"
#include "master/store/store.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColInt;

// The most rows of a group read to rebuild one series; a series with more
// after its last closed 64-block (a trial stored before migration 16) is
// not kept, and charts scan its rows.
constexpr int64_t kRebuildRows = 4096;

constexpr char kUpsertRollup[] =
    "INSERT INTO metric_rollups(trial_id, metric_group, width, name, block, lo_id, lo, hi_id, hi, last_batches, "
    "last_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET lo_id = excluded.lo_id, "
    "lo = excluded.lo, hi_id = excluded.hi_id, hi = excluded.hi, last_batches = excluded.last_batches, "
    "last_id = excluded.last_id";
constexpr char kMarker[] =
    "SELECT last_batches, last_id FROM metric_rollups WHERE trial_id = ? AND metric_group = ? AND width = 0 "
    "AND name = ? AND block = 0";
constexpr char kLastBlock64[] =
    "SELECT block, last_batches, last_id FROM metric_rollups WHERE trial_id = ? AND metric_group = ? "
    "AND width = 64 AND name = ? ORDER BY block DESC LIMIT 1";
constexpr char kBlocks[] =
    "SELECT lo_id, lo, hi_id, hi, block FROM metric_rollups WHERE trial_id = ? AND metric_group = ? AND width = ? "
    "AND name = ? AND block >= ? AND block < ? ORDER BY block";
constexpr char kSeriesMarkers[] =
    "SELECT name, last_id FROM metric_rollups WHERE trial_id = ? AND metric_group = ? AND width = 0 "
    "AND name != '' ORDER BY name";
// Training and another group (the literal term lets SQLite use migration
// 15's partial index of the other groups).
#define DET_OTHER_ROW(group_terms) \
  "SELECT 1 FROM metrics WHERE trial_id = ?1 AND " group_terms " AND archived = 0 AND id != ?3 LIMIT 1"
constexpr char kOtherRow[] = DET_OTHER_ROW("metric_group = ?2");
constexpr char kOtherRowOtherGroup[] = DET_OTHER_ROW("metric_group = ?2 AND metric_group != 'training'");
#define DET_TAIL_ROWS(group_terms)                                                                     \
  "SELECT id, total_batches, metrics FROM metrics WHERE trial_id = ?1 AND " group_terms " AND archived = 0 " \
  "AND total_batches >= ?3 AND (total_batches > ?3 OR id > ?4) ORDER BY total_batches, id LIMIT ?5"
constexpr char kTailRows[] = DET_TAIL_ROWS("metric_group = ?2");
constexpr char kTailRowsOtherGroup[] = DET_TAIL_ROWS("metric_group = ?2 AND metric_group != 'training'");
// The blocks of one width whose last point comes after batch ?5. A series'
// blocks end at non-decreasing batches, so they are the trailing ones: the
// subquery walks back from the series' last block to the first that ends at
// or before ?5, so the cost is the blocks deleted, not the trial's length
// (with width > 0 as a range, the key's name column could not be used and
// every block of every series of the group was read).
constexpr char kDeleteBlocksAfter[] =
    "DELETE FROM metric_rollups WHERE trial_id = ?1 AND metric_group = ?2 AND width = ?3 AND name = ?4 "
    "AND block > COALESCE((SELECT block FROM metric_rollups WHERE trial_id = ?1 AND metric_group = ?2 "
    "AND width = ?3 AND name = ?4 AND last_batches <= ?5 ORDER BY block DESC LIMIT 1), -1) AND last_batches > ?5";

// A trial's groups: training (the partial index leaves it out), then the
// others one index probe each (metrics_trial_other_groups, migration 15).
constexpr char kHasTraining[] =
    "SELECT EXISTS(SELECT 1 FROM metrics WHERE trial_id = ? AND metric_group = 'training')";
constexpr char kNextOtherGroup[] =
    "SELECT MIN(metric_group) FROM metrics WHERE trial_id = ? AND metric_group != 'training' AND metric_group > ?";

std::optional<double> Stored(double y) { return std::isnan(y) ? std::nullopt : std::optional<double>(y); }
double Loaded(sqlite3_stmt* s, int i) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(s, i);
}

}  // namespace

const char* store_internal::RollupOtherRowSql(const std::string& group) {
  return group == "training" ? kOtherRow : kOtherRowOtherGroup;
}
const char* store_internal::RollupTailRowsSql(const std::string& group) {
  return group == "training" ? kTailRows : kTailRowsOtherGroup;
}

absl::Status Store::WriteRollupLocked(const RollupSeriesKey& key, const RollupBlock& b) {
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kUpsertRollup));
  Binder bind(st.get());
  bind.Int(key.trial_id).Text(key.group).Int(b.width).Text(key.name).Int(b.block);
  bind.Int(b.extremes.lo).OptDouble(Stored(b.extremes.lo_y)).Int(b.extremes.hi).OptDouble(Stored(b.extremes.hi_y));
  bind.Int(b.last_batches).Int(b.last_id);
  if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup");
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("write metric rollup of trial ", key.trial_id));
  return absl::OkStatus();
}

absl::StatusOr<bool> Store::RollupMarkerLocked(const RollupSeriesKey& key, int64_t* batches, int64_t* id) {
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kMarker));
  Binder bind(st.get());
  bind.Int(key.trial_id).Text(key.group).Text(key.name);
  if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup marker");
  const int rc = sqlite3_step(st.get());
  if (rc == SQLITE_DONE) return false;
  if (rc != SQLITE_ROW) return Error(rc, "read metric rollup marker");
  *batches = ColInt(st.get(), 0);
  *id = ColInt(st.get(), 1);
  return true;
}

// The series' state after its first p64 points (a multiple of 64): every
// open block wider than 64 merged from the closed blocks one width narrower
// (at most 3 each) and the open block below it.
absl::Status Store::RollupOpenBlocksLocked(const RollupSeriesKey& key, RollupSeries* s) {
  const int64_t p = s->points;
  for (size_t i = 1; i < kRollupWidths.size(); ++i) {
    const int64_t narrow = kRollupWidths[i - 1];
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kBlocks));
    Binder bind(st.get());
    bind.Int(key.trial_id).Text(key.group).Int(narrow).Text(key.name);
    bind.Int(p / kRollupWidths[i] * kRollupWidths[i] / narrow).Int(p / narrow);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup blocks");
    PointExtremes e;
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      PointExtremes b;
      b.count = narrow;
      b.lo = ColInt(st.get(), 0);
      b.lo_y = Loaded(st.get(), 1);
      b.hi = ColInt(st.get(), 2);
      b.hi_y = Loaded(st.get(), 3);
      e.Merge(b);
    }
    if (rc != SQLITE_DONE) return Error(rc, "read metric rollup blocks");
    e.Merge(s->open[i - 1]);
    s->open[i] = e;
  }
  return absl::OkStatus();
}

// Rebuilds series `key` (not held) from what the transaction holds, `row`
// included (it is stored already); stored blocks past `row` are dropped
// first. False: the series is not kept.
absl::StatusOr<bool> Store::RebuildRollupSeriesLocked(const RollupSeriesKey& key, const MetricRow& row) {
  int64_t first_batches = 0, first_id = 0;
  DET_ASSIGN_OR_RETURN(bool has_marker, RollupMarkerLocked(key, &first_batches, &first_id));
  if (!has_marker || first_batches > row.total_batches) {
    int64_t gb = 0, gid = 0;
    const RollupSeriesKey group{key.trial_id, key.group, ""};
    DET_ASSIGN_OR_RETURN(bool has_group, RollupMarkerLocked(group, &gb, &gid));
    if (!has_group) {  // rows stored before migration 16, unless this is the group's first
      DET_ASSIGN_OR_RETURN(Stmt st, Cached(store_internal::RollupOtherRowSql(key.group)));
      Binder bind(st.get());
      bind.Int(key.trial_id).Text(key.group).Int(row.id);
      if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup check");
      const int rc = sqlite3_step(st.get());
      if (rc == SQLITE_ROW) return false;
      if (rc != SQLITE_DONE) return Error(rc, "read metric rollup check");
    }
    if (!has_group || !has_marker || first_batches > row.total_batches) {
      RollupBlock m;
      m.extremes.Add(row.id, 0);
      m.last_batches = row.total_batches;
      m.last_id = row.id;
      if (!has_group) DET_RETURN_IF_ERROR(WriteRollupLocked(group, m));
      DET_RETURN_IF_ERROR(WriteRollupLocked(key, m));
      first_batches = row.total_batches;
      first_id = row.id;
    }
  }
  RollupSeries s;
  int64_t cursor_batches = first_batches, cursor_id = first_id - 1;
  // The cursor: after the series' last stored 64-point block.
  auto read_last_block = [&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kLastBlock64));
    Binder bind(st.get());
    bind.Int(key.trial_id).Text(key.group).Text(key.name);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup block");
    const int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) {
      s.points = (ColInt(st.get(), 0) + 1) * 64;
      s.last_batches = cursor_batches = ColInt(st.get(), 1);
      s.last_id = cursor_id = ColInt(st.get(), 2);
    } else if (rc != SQLITE_DONE) {
      return Error(rc, "read metric rollup block");
    }
    return absl::OkStatus();
  };
  DET_RETURN_IF_ERROR(read_last_block());
  if (s.points > 0 && std::make_pair(row.total_batches, row.id) < std::make_pair(s.last_batches, s.last_id)) {
    // Out of order (a held series dropped for it, or one not held after a
    // restart or an eviction): the stored blocks from the row on go.
    for (const int64_t width : kRollupWidths) {
      DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteBlocksAfter));
      Binder bind(st.get());
      bind.Int(key.trial_id).Text(key.group).Int(width).Text(key.name).Int(row.total_batches);
      if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup delete");
      const int rc = sqlite3_step(st.get());
      if (rc != SQLITE_DONE) return Error(rc, "delete metric rollups");
    }
    s = RollupSeries();
    cursor_batches = first_batches;
    cursor_id = first_id - 1;
    DET_RETURN_IF_ERROR(read_last_block());
  }
  DET_RETURN_IF_ERROR(RollupOpenBlocksLocked(key, &s));
  std::vector<std::pair<int64_t, int64_t>> at;  // (batches, id) of the rows after the cursor
  std::vector<double> ys;
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(store_internal::RollupTailRowsSql(key.group)));
    Binder bind(st.get());
    bind.Int(key.trial_id).Text(key.group).Int(cursor_batches).Int(cursor_id).Int(kRebuildRows + 1);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup rows");
    int rc, n = 0;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      if (++n > kRebuildRows) return false;
      const char* text = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 2));
      auto decoded = store_internal::DecodeMetrics(text == nullptr ? "" : text);
      if (!decoded.ok()) return decoded.status();
      auto it = decoded->find(key.name);
      if (it == decoded->end()) continue;
      at.emplace_back(ColInt(st.get(), 1), ColInt(st.get(), 0));
      ys.push_back(it->second);
    }
    if (rc != SQLITE_DONE) return Error(rc, "read metric rollup rows");
  }
  metric_rollups_.Restore(key, s);
  std::vector<RollupBlock> closed;
  for (size_t i = 0; i < at.size(); ++i) {
    if (!metric_rollups_.Add(key, at[i].first, at[i].second, ys[i], &closed)) {
      return absl::InternalError(absl::StrCat("metric rollup rebuild of trial ", key.trial_id, " out of order"));
    }
  }
  for (const RollupBlock& b : closed) DET_RETURN_IF_ERROR(WriteRollupLocked(key, b));
  return true;
}

absl::Status Store::RollupRowLocked(const MetricRow& row, RollupRebuildSet* rebuild) {
  if (row.archived) return absl::OkStatus();
  std::vector<RollupBlock> closed;
  for (const auto& [name, y] : row.metrics) {
    const RollupSeriesKey key{row.trial_id, row.group, name};
    if (metric_rollups_.Unkept(key)) continue;
    if (auto it = rebuild->find(key); it != rebuild->end()) {  // rebuilt once, after the call's rows
      if (row.total_batches < it->second.total_batches) {  // the earliest row, with its own id
        it->second.total_batches = row.total_batches;
        it->second.id = row.id;
      }
      continue;
    }
    closed.clear();
    if (metric_rollups_.Find(key) != nullptr && metric_rollups_.Add(key, row.total_batches, row.id, y, &closed)) {
      for (const RollupBlock& b : closed) DET_RETURN_IF_ERROR(WriteRollupLocked(key, b));
      continue;
    }
    if (metric_rollups_.Find(key) != nullptr) {  // out of order: drop it, rebuild after the call's rows
      metric_rollups_.Drop(key);
      MetricRow earliest;
      earliest.id = row.id;
      earliest.trial_id = row.trial_id;
      earliest.group = row.group;
      earliest.total_batches = row.total_batches;
      rebuild->emplace(key, std::move(earliest));
      continue;
    }
    rollup_loads_.fetch_add(1);
    DET_ASSIGN_OR_RETURN(bool kept, RebuildRollupSeriesLocked(key, row));
    if (!kept) metric_rollups_.MarkUnkept(key);
  }
  return absl::OkStatus();
}

absl::Status Store::RebuildOutOfOrderLocked(const RollupRebuildSet& rebuild) {
  for (const auto& [key, row] : rebuild) {
    rollup_out_of_order_.fetch_add(1);
    // From the earliest out-of-order row on (its stored blocks dropped there).
    DET_ASSIGN_OR_RETURN(bool kept, RebuildRollupSeriesLocked(key, row));
    if (!kept) metric_rollups_.MarkUnkept(key);
  }
  return absl::OkStatus();
}

absl::Status Store::ReadRollupBlocksLocked(const RollupSeriesKey& key, int64_t width, int64_t from, int64_t to,
                                           std::vector<RollupBlock>* out) {
  if (from >= to) return absl::OkStatus();
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kBlocks));
  Binder bind(st.get());
  bind.Int(key.trial_id).Text(key.group).Int(width).Text(key.name).Int(from).Int(to);
  if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup blocks");
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    RollupBlock b;
    b.width = width;
    b.block = ColInt(st.get(), 4);
    b.extremes.count = width;
    b.extremes.lo = ColInt(st.get(), 0);
    b.extremes.lo_y = Loaded(st.get(), 1);
    b.extremes.hi = ColInt(st.get(), 2);
    b.extremes.hi_y = Loaded(st.get(), 3);
    out->push_back(b);
  }
  if (rc != SQLITE_DONE) return Error(rc, "read metric rollup blocks");
  return absl::OkStatus();
}

absl::StatusOr<bool> Store::ReadRollupChart(int64_t trial_id, const std::string& group,
                                            const std::function<int64_t(int64_t points)>& width_for,
                                            int64_t max_tail_rows, std::vector<RollupChartSeries>* out) {
  std::lock_guard<StoreMutex> lock(mu_);
  int64_t unused_batches = 0, unused_id = 0;
  DET_ASSIGN_OR_RETURN(bool has_group, RollupMarkerLocked({trial_id, group, ""}, &unused_batches, &unused_id));
  if (!has_group) return false;  // rows stored before migration 16
  std::vector<std::pair<int64_t, int64_t>> cursor;  // per series: after its last closed 64-block
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kSeriesMarkers));
    Binder bind(st.get());
    bind.Int(trial_id).Text(group);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup markers");
    int rc;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      RollupChartSeries s;
      s.name = store_internal::ColText(st.get(), 0);
      s.first_id = s.last_id = ColInt(st.get(), 1);
      out->push_back(std::move(s));
    }
    if (rc != SQLITE_DONE) return Error(rc, "read metric rollup markers");
  }
  std::pair<int64_t, int64_t> from{std::numeric_limits<int64_t>::max(), 0};
  for (RollupChartSeries& s : *out) {
    if (metric_rollups_.Unkept({trial_id, group, s.name})) return false;
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kLastBlock64));
    Binder bind(st.get());
    bind.Int(trial_id).Text(group).Text(s.name);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup block");
    const int rc = sqlite3_step(st.get());
    cursor.emplace_back(-1, 0);
    if (rc == SQLITE_ROW) {
      s.points = (ColInt(st.get(), 0) + 1) * 64;
      cursor.back() = {ColInt(st.get(), 1), ColInt(st.get(), 2)};
      s.last_id = cursor.back().second;
    } else if (rc != SQLITE_DONE) {
      return Error(rc, "read metric rollup block");
    }
    from = std::min(from, cursor.back());
  }
  if (!out->empty()) {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(store_internal::RollupTailRowsSql(group)));
    Binder bind(st.get());
    bind.Int(trial_id).Text(group).Int(from.first).Int(from.second).Int(max_tail_rows + 1);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric rollup rows");
    int rc, n = 0;
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      if (++n > max_tail_rows) return false;
      const std::pair<int64_t, int64_t> at{ColInt(st.get(), 1), ColInt(st.get(), 0)};
      const char* text = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 2));
      DET_ASSIGN_OR_RETURN(auto metrics, store_internal::DecodeMetrics(text == nullptr ? "" : text));
      for (size_t i = 0; i < out->size(); ++i) {
        RollupChartSeries& s = (*out)[i];
        auto it = metrics.find(s.name);
        if (it == metrics.end() || !(cursor[i] < at)) continue;
        s.tail.emplace_back(s.points + static_cast<int64_t>(s.tail.size()), at.second, it->second);
        s.last_id = at.second;
      }
    }
    if (rc != SQLITE_DONE) return Error(rc, "read metric rollup rows");
  }
  for (RollupChartSeries& s : *out) {
    const int64_t p64 = s.points;
    s.points += static_cast<int64_t>(s.tail.size());
    s.width = width_for(s.points);
    if (s.width < kRollupWidths[0]) continue;
    size_t top = 0;  // the widest block width <= s.width
    while (top + 1 < kRollupWidths.size() && kRollupWidths[top + 1] <= s.width) ++top;
    const RollupSeriesKey key{trial_id, group, s.name};
    DET_RETURN_IF_ERROR(ReadRollupBlocksLocked(key, kRollupWidths[top], 0, p64 / kRollupWidths[top], &s.blocks));
    for (size_t j = 0; j < top; ++j) {
      const int64_t w = kRollupWidths[j], above = kRollupWidths[j + 1];
      DET_RETURN_IF_ERROR(ReadRollupBlocksLocked(key, w, p64 / above * above / w, p64 / w, &s.blocks));
    }
  }
  return true;
}

absl::StatusOr<std::vector<std::string>> Store::ListMetricGroups(int64_t trial_id, size_t max_groups) {
  std::lock_guard<StoreMutex> lock(mu_);
  std::vector<std::string> groups;
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kHasTraining));
    Binder bind(st.get());
    bind.Int(trial_id);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric groups");
    const int rc = sqlite3_step(st.get());
    if (rc != SQLITE_ROW) return Error(rc, "read metric groups");
    if (ColInt(st.get(), 0) != 0) groups.push_back("training");
  }
  std::string after;
  while (groups.size() <= max_groups) {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kNextOtherGroup));
    Binder bind(st.get());
    bind.Int(trial_id).Text(after);
    if (bind.rc() != SQLITE_OK) return Error(bind.rc(), "bind metric groups");
    const int rc = sqlite3_step(st.get());
    if (rc != SQLITE_ROW) return Error(rc, "read metric groups");
    if (sqlite3_column_type(st.get(), 0) == SQLITE_NULL) break;
    after = store_internal::ColText(st.get(), 0);
    groups.push_back(after);
  }
  std::sort(groups.begin(), groups.end());
  return groups;
}

}  // namespace master
}  // namespace det
