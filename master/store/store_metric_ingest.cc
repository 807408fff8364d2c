// Store: metric ingestion. InsertMetrics writes one call's rows in a
// transaction of their own; InsertMetricsAsync/Grouped (the training-metric
// path, where thousands of trials report at once) hand them to the metric
// writer thread, which commits every call queued at that moment in one
// transaction: one WAL append and one lock round for many reports instead of
// one each (bench/master_scale).
#include <pthread.h>
#include <sqlite3.h>

#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store.h"
#include "master/store/store_internal.h"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::EncodeMetrics;

// The id is the Store's (migration 15). A re-sent report (the same trial,
// batches, group and run) is skipped; an id already taken fails
// (SQLITE_CONSTRAINT_PRIMARYKEY) instead of dropping the row.
constexpr char kInsertMetric[] =
    "INSERT INTO metrics(id, trial_id, trial_run_id, metric_group, total_batches, total_epochs, "
    "metrics, time_ms, archived) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(trial_id, total_batches, metric_group, trial_run_id) DO NOTHING";
constexpr char kNextMetricId[] =
    "SELECT MAX(COALESCE((SELECT MAX(id) FROM metrics), 0), "
    "COALESCE((SELECT CAST(value AS INTEGER) FROM kv WHERE key = 'metrics_id_high_water'), 0)) + 1";

// What a trial has stored, as MetricLimits counts it (metric_limits.h).
// The profiler's groups have bounds of their own (IsProfilerGroup).
constexpr char kMetricNames[] =
    "SELECT DISTINCT j.key FROM metrics m, json_each(m.metrics) j WHERE m.trial_id = ?1 "
    "AND m.metric_group NOT IN ('profiling', 'system') LIMIT ?2";
constexpr char kMetricBytes[] =
    "SELECT COALESCE(SUM(LENGTH(CAST(metrics AS BLOB))), 0) + ?2 * COUNT(*) FROM metrics WHERE trial_id = ?1 "
    "AND metric_group NOT IN ('profiling', 'system')";
constexpr char kProfilerRows[] =
    "SELECT COALESCE(SUM(metric_group = 'profiling'), 0), COALESCE(SUM(metric_group = 'system'), 0), "
    "COALESCE(SUM(LENGTH(CAST(metrics AS BLOB))), 0) + ?2 * COUNT(*) "
    "FROM metrics WHERE trial_id = ?1 AND metric_group IN ('profiling', 'system') "
    "AND metric_group != 'training'";  // migration 15's index of the other groups
constexpr size_t kMaxCountedTrials = 10000;  // metric_budgets_ is cleared beyond

std::vector<std::string> Encode(const std::vector<MetricRow>& rows) {
  std::vector<std::string> encoded;
  encoded.reserve(rows.size());
  for (const auto& r : rows) encoded.push_back(EncodeMetrics(r.metrics));
  return encoded;
}

}  // namespace

void Store::set_metric_limits(const MetricLimits& limits) {
  std::lock_guard<StoreMutex> lock(mu_);
  metric_limits_ = limits;
}

absl::Status Store::AdmitMetricsLocked(const std::vector<MetricRow>& rows, const std::vector<std::string>& encoded,
                                       std::map<int64_t, MetricBudget>* added) {
  std::map<int64_t, std::pair<std::vector<MetricRow>, std::vector<std::string>>> by_trial;
  for (size_t i = 0; i < rows.size(); ++i) {
    by_trial[rows[i].trial_id].first.push_back(rows[i]);
    by_trial[rows[i].trial_id].second.push_back(encoded[i]);
  }
  for (const auto& [trial_id, part] : by_trial) {
    auto it = metric_budgets_.find(trial_id);
    if (it == metric_budgets_.end()) {
      if (metric_budgets_.size() >= kMaxCountedTrials) metric_budgets_.clear();
      MetricBudget budget;
      DET_ASSIGN_OR_RETURN(Stmt names, Cached(kMetricNames));
      Binder nb(names.get());
      const int64_t cap = metric_limits_.max_trial_names;
      nb.Int(trial_id).Int(cap > 0 ? cap + 1 : -1);
      int rc;
      while ((rc = sqlite3_step(names.get())) == SQLITE_ROW) budget.Add(MetricNameHash(store_internal::ColText(names.get(), 0)));
      if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("read the metric names of trial ", trial_id));
      DET_ASSIGN_OR_RETURN(Stmt bytes, Cached(kMetricBytes));
      Binder bb(bytes.get());
      bb.Int(trial_id).Int(MetricLimits::kRowOverhead);
      if (sqlite3_step(bytes.get()) != SQLITE_ROW) return Error(sqlite3_errcode(db_), "count metric bytes");
      budget.bytes = store_internal::ColInt(bytes.get(), 0);
      DET_ASSIGN_OR_RETURN(Stmt profiler, Cached(kProfilerRows));
      Binder pb(profiler.get());
      pb.Int(trial_id).Int(MetricLimits::kRowOverhead);
      if (sqlite3_step(profiler.get()) != SQLITE_ROW) return Error(sqlite3_errcode(db_), "count profiler rows");
      budget.profiling_rows = store_internal::ColInt(profiler.get(), 0);
      budget.system_rows = store_internal::ColInt(profiler.get(), 1);
      budget.profiler_bytes = store_internal::ColInt(profiler.get(), 2);
      it = metric_budgets_.emplace(trial_id, std::move(budget)).first;
    }
    DET_RETURN_IF_ERROR(
        CheckMetricRows(trial_id, part.first, part.second, metric_limits_, it->second, &(*added)[trial_id]));
  }
  return absl::OkStatus();
}

void Store::ForgetMetricBudgetsLocked(const std::vector<MetricRow>& rows) {
  for (const MetricRow& r : rows) metric_budgets_.erase(r.trial_id);
}

absl::Status Store::LoadNextMetricIdLocked() {
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kNextMetricId));
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, "read the next metric id");
  next_metric_id_ = std::max(next_metric_id_, store_internal::ColInt(st.get(), 0));
  return absl::OkStatus();
}

absl::Status Store::InsertMetricRowsLocked(const std::vector<MetricRow>& rows, const std::vector<std::string>& encoded,
                                           RollupRebuildSet* group_rebuild) {
  std::map<int64_t, MetricBudget> added;
  DET_RETURN_IF_ERROR(AdmitMetricsLocked(rows, encoded, &added));
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertMetric));
  std::vector<bool> stored(rows.size(), false);
  size_t skipped = 0;
  if (next_metric_id_ == 0) DET_RETURN_IF_ERROR(LoadNextMetricIdLocked());
  bool reloaded = false;
  RollupRebuildSet own_rebuild;
  RollupRebuildSet* rebuild = group_rebuild != nullptr ? group_rebuild : &own_rebuild;
  for (size_t i = 0; i < rows.size(); ++i) {
    const MetricRow& r = rows[i];
    Binder b(st.get());
    b.Int(next_metric_id_)
        .Int(r.trial_id)
        .Int(r.trial_run_id)
        .Text(r.group)
        .Int(r.total_batches)
        .Double(r.total_epochs)
        .Text(encoded[i])
        .Int(r.time_ms)
        .Int(r.archived ? 1 : 0);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind metrics");
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
      return absl::FailedPreconditionError(absl::StrCat("cannot insert metrics: trial ", r.trial_id, " not found"));
    }
    if (rc == SQLITE_CONSTRAINT_PRIMARYKEY && !reloaded) {
      // A row written past this Store (another connection): count on from
      // the largest id stored, once per call. That row never passed through
      // the metric tail: invalidate it, so streams read SQLite (issue 50).
      sqlite3_reset(st.get());
      metric_rewrites_.fetch_add(1);
      DET_RETURN_IF_ERROR(LoadNextMetricIdLocked());
      reloaded = true;
      --i;
      continue;
    }
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("insert metrics of trial ", r.trial_id));
    // 0 for a row INSERT OR IGNORE skipped (a re-sent report): not counted,
    // and no budget charged for it.
    const int changed = sqlite3_changes(db_);
    pending_events_.rows[MetricRowKindIndex(r.group)] += changed;
    sqlite3_reset(st.get());
    stored[i] = changed == 1;
    if (!stored[i]) {
      ++skipped;
      continue;
    }
    // Issue 50: the rollups and the in-memory tail see each stored row.
    MetricRow with_id = r;
    with_id.id = next_metric_id_++;
    DET_RETURN_IF_ERROR(RollupRowLocked(with_id, rebuild));
    metric_tail_.Stage(with_id, encoded[i]);
  }
  if (group_rebuild == nullptr) DET_RETURN_IF_ERROR(RebuildOutOfOrderLocked(own_rebuild));
  if (skipped > 0) {  // charge only the rows stored: what they add, as admitted
    std::vector<MetricRow> kept;
    std::vector<std::string> kept_encoded;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!stored[i]) continue;
      kept.push_back(rows[i]);
      kept_encoded.push_back(encoded[i]);
    }
    added.clear();
    DET_RETURN_IF_ERROR(AdmitMetricsLocked(kept, kept_encoded, &added));  // a subset of what passed
  }
  for (const auto& [trial_id, a] : added) ApplyMetricBudget(a, &metric_budgets_[trial_id]);
  store_internal::ReportIfCommitted(db_, &pending_events_);  // else when the transaction commits
  return absl::OkStatus();
}

absl::Status Store::InsertMetrics(const std::vector<MetricRow>& rows) {
  if (rows.empty()) return absl::OkStatus();
  const std::vector<std::string> encoded = Encode(rows);  // outside the lock
  absl::Status s = Write([&]() -> absl::Status {
    Txn txn(this);
    DET_RETURN_IF_ERROR(txn.Begin());
    DET_RETURN_IF_ERROR(InsertMetricRowsLocked(rows, encoded));
    absl::Status committed = txn.Commit();
    if (!committed.ok()) ForgetMetricBudgetsLocked(rows);  // recounted when next needed
    return committed;
  });
  return s;
}

// The order CommitMetricGroup writes `group`'s calls in: by (trial, group,
// first batch), stable. A trial that keeps several reports in flight (det-
// trial's report queue) may have them queued in another order than it sent
// them; written in batch order, its rows extend each series in order and no
// rollup is rebuilt. Calls of different trials keep no order among
// themselves in any case (they race to the queue).
std::vector<size_t> Store::GroupWriteOrder(const std::vector<std::unique_ptr<PendingMetrics>>& group) {
  struct Key {
    int64_t trial = 0, first = 0;
    const std::string* metric_group = nullptr;
  };
  static const std::string kNone;
  std::vector<Key> keys(group.size());
  for (size_t i = 0; i < group.size(); ++i) {
    const std::vector<MetricRow>& rows = group[i]->rows;
    keys[i].metric_group = rows.empty() ? &kNone : &rows.front().group;
    if (rows.empty()) continue;
    keys[i].trial = rows.front().trial_id;
    keys[i].first = rows.front().total_batches;  // a reporter sends a call's rows in order
  }
  std::vector<size_t> order(group.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const Key &x = keys[a], &y = keys[b];
    if (x.trial != y.trial) return x.trial < y.trial;
    if (*x.metric_group != *y.metric_group) return *x.metric_group < *y.metric_group;
    return x.first < y.first;
  });
  return order;
}

void Store::CommitMetricGroup(const std::vector<std::unique_ptr<PendingMetrics>>& group) {
  const std::vector<size_t> order = GroupWriteOrder(group);
  absl::Status outer = Write([&]() -> absl::Status {
    Txn txn(this);
    DET_RETURN_IF_ERROR(txn.Begin());
    // Series reached out of order by any call are rebuilt once, after every
    // call's rows (concurrent reporters of one trial put several such calls
    // in a group). A call rolled back takes its entries with it: they may
    // name its rows, which no longer exist.
    RollupRebuildSet rebuild;
    for (size_t i : order) {
      const std::unique_ptr<PendingMetrics>& p = group[i];
      RollupRebuildSet before_call = rebuild;
      Txn savepoint(this);  // nested: a failing call's rows roll back alone
      p->status = savepoint.Begin();
      if (p->status.ok()) p->status = InsertMetricRowsLocked(p->rows, p->encoded, &rebuild);
      if (p->status.ok()) p->status = savepoint.Commit();
      if (!p->status.ok()) rebuild = std::move(before_call);
    }
    absl::Status committed = RebuildOutOfOrderLocked(rebuild);  // failing, it fails the group
    if (committed.ok()) committed = txn.Commit();
    if (!committed.ok()) {
      for (const auto& p : group) ForgetMetricBudgetsLocked(p->rows);  // recounted when next needed
    }
    return committed;
  });
  if (outer.ok()) return;
  for (const auto& p : group) {
    if (p->status.ok()) p->status = outer;  // not committed
  }
}

void Store::MetricWriterLoop() {
  // Named for top, perf and gdb: it inherits the name of the gRPC thread
  // whose report started it otherwise.
  pthread_setname_np(pthread_self(), "det-metric-wr");
  std::unique_lock<std::mutex> lock(group_mu_);
  while (true) {
    group_cv_.wait(lock, [&] { return group_stopping_ || !group_queue_.empty(); });
    if (group_queue_.empty()) return;  // stopping, and everything written
    // Take the queued calls in arrival order, whole, up to the bound (always
    // at least one), and write them while new calls queue.
    size_t n = 0, rows = 0;
    for (; n < group_queue_.size(); ++n) {
      const size_t add = group_queue_[n]->rows.size();
      if (n > 0 && rows + add > kMaxGroupRows) break;
      rows += add;
    }
    std::vector<std::unique_ptr<PendingMetrics>> group;
    group.reserve(n);
    for (size_t i = 0; i < n; ++i) group.push_back(std::move(group_queue_[i]));
    group_queue_.erase(group_queue_.begin(), group_queue_.begin() + static_cast<std::ptrdiff_t>(n));
    group_writing_ = true;
    lock.unlock();
    CommitMetricGroup(group);
    for (const auto& p : group) p->done(p->status);
    group.clear();
    lock.lock();
    group_writing_ = false;
  }
}

void Store::StopMetricWriter() {
  std::thread writer;
  {
    std::lock_guard<std::mutex> lock(group_mu_);
    group_stopping_ = true;
    writer = std::move(group_writer_);
  }
  group_cv_.notify_all();
  if (writer.joinable()) writer.join();
}

void Store::InsertMetricsAsync(std::vector<MetricRow> rows, std::function<void(absl::Status)> done) {
  if (rows.empty()) {
    done(absl::OkStatus());
    return;
  }
  auto p = std::make_unique<PendingMetrics>();
  p->encoded = Encode(rows);  // outside every lock
  p->rows = std::move(rows);
  p->done = std::move(done);
  {
    std::lock_guard<std::mutex> lock(group_mu_);
    if (group_stopping_) {
      p->status = absl::UnavailableError("the store is closing: metrics not written");
    } else {
      if (!group_writer_.joinable()) group_writer_ = std::thread([this] { MetricWriterLoop(); });
      group_queue_.push_back(std::move(p));
    }
  }
  if (p != nullptr) {
    p->done(p->status);
    return;
  }
  group_cv_.notify_one();
}

absl::Status Store::InsertMetricsGrouped(const std::vector<MetricRow>& rows) {
  std::promise<absl::Status> committed;
  std::future<absl::Status> result = committed.get_future();
  InsertMetricsAsync(rows, [&committed](absl::Status s) { committed.set_value(std::move(s)); });
  return result.get();
}

size_t Store::MetricCallersWaiting() {
  std::lock_guard<std::mutex> lock(group_mu_);
  return group_queue_.size() + (group_writing_ ? 1 : 0);
}

}  // namespace master
}  // namespace det
