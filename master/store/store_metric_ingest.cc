// Store: metric ingestion. InsertMetrics writes one call's rows in a
// transaction of their own; InsertMetricsAsync/Grouped (the training-metric
// path, where thousands of trials report at once) hand them to the metric
// writer thread, which commits every call queued at that moment in one
// transaction: one WAL append and one lock round for many reports instead of
// one each (bench/master_scale).
#include <sqlite3.h>

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

constexpr char kInsertMetric[] =
    "INSERT OR IGNORE INTO metrics(trial_id, trial_run_id, metric_group, total_batches, total_epochs, "
    "metrics, time_ms, archived) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";

std::vector<std::string> Encode(const std::vector<MetricRow>& rows) {
  std::vector<std::string> encoded;
  encoded.reserve(rows.size());
  for (const auto& r : rows) encoded.push_back(EncodeMetrics(r.metrics));
  return encoded;
}

}  // namespace

absl::Status Store::InsertMetricRowsLocked(const std::vector<MetricRow>& rows,
                                           const std::vector<std::string>& encoded) {
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertMetric));
  for (size_t i = 0; i < rows.size(); ++i) {
    const MetricRow& r = rows[i];
    Binder b(st.get());
    b.Int(r.trial_id)
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
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("insert metrics of trial ", r.trial_id));
    sqlite3_reset(st.get());
  }
  return absl::OkStatus();
}

absl::Status Store::InsertMetrics(const std::vector<MetricRow>& rows) {
  if (rows.empty()) return absl::OkStatus();
  const std::vector<std::string> encoded = Encode(rows);  // outside the lock
  return Write([&]() -> absl::Status {
    Txn txn(this);
    DET_RETURN_IF_ERROR(txn.Begin());
    DET_RETURN_IF_ERROR(InsertMetricRowsLocked(rows, encoded));
    return txn.Commit();
  });
}

void Store::CommitMetricGroup(const std::vector<std::unique_ptr<PendingMetrics>>& group) {
  absl::Status outer = Write([&]() -> absl::Status {
    Txn txn(this);
    DET_RETURN_IF_ERROR(txn.Begin());
    for (const auto& p : group) {
      Txn savepoint(this);  // nested: a failing call's rows roll back alone
      p->status = savepoint.Begin();
      if (p->status.ok()) p->status = InsertMetricRowsLocked(p->rows, p->encoded);
      if (p->status.ok()) p->status = savepoint.Commit();
    }
    return txn.Commit();
  });
  if (outer.ok()) return;
  for (const auto& p : group) {
    if (p->status.ok()) p->status = outer;  // not committed
  }
}

void Store::MetricWriterLoop() {
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
