// Private to master/store/: what the store_*.cc files share. The Store's
// statement wrappers (Store::Stmt, Store::Txn), Store::Write, and helpers that
// bind parameters, read columns and encode JSON columns.
//
// Layout of the Store's implementation:
//   store.cc              statements, Transaction, Open, key-value, integrity
//   store_migrations.cc   the numbered schema migrations and Migrate()
//   store_experiments.cc  experiments
//   store_trials.cc       trials
//   store_metrics_logs.cc metrics and task logs
//   store_checkpoints.cc  checkpoints
//   store_agents.cc       agents and allocations
//   store_users.cc        users and login tokens
//   store_workspaces.cc   workspaces and projects
#ifndef DET_MASTER_STORE_STORE_INTERNAL_H_
#define DET_MASTER_STORE_STORE_INTERNAL_H_

#include <sqlite3.h>

#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "master/store/store.h"
#include "master/store/store_events.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {

// A prepared statement in use: reset (cached) or finalized (one-off) on
// destruction. Move-only.
class Store::Stmt {
 public:
  Stmt(sqlite3_stmt* stmt, bool owned) : stmt_(stmt), owned_(owned) {}
  Stmt(Stmt&& other) noexcept : stmt_(std::exchange(other.stmt_, nullptr)), owned_(other.owned_) {}
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt() {
    if (stmt_ == nullptr) return;
    if (owned_) {
      sqlite3_finalize(stmt_);
    } else {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
  }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
  bool owned_;
};

// One method's own all-or-nothing group of statements (a multi-row insert, a
// migration): BEGIN IMMEDIATE on Begin(); ROLLBACK on destruction unless
// committed. Inside a Store::Transaction it is a savepoint instead: its
// failure undoes its own writes at once (and, through Store::Write, fails the
// Transaction); its success commits nothing yet. The Store's pending /metrics
// events follow it: restored to what they were at Begin() on rollback,
// reported on an outermost Commit().
// Requires store->mu_ for its whole life.
class Store::Txn {
 public:
  explicit Txn(Store* store) : store_(store) {}
  ~Txn() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  Txn(const Txn&) = delete;
  Txn& operator=(const Txn&) = delete;
  absl::Status Begin() ABSL_NO_THREAD_SAFETY_ANALYSIS;
  absl::Status Commit() ABSL_NO_THREAD_SAFETY_ANALYSIS;

 private:
  absl::Status Run(const char* sql, absl::string_view what, bool opens) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  Store* store_;
  bool open_ = false;
  bool nested_ = false;
  PendingStoreEvents saved_;  // the Store's pending events at Begin()
  size_t saved_tail_ = 0;     // metric_tail_.Mark() at Begin()
  size_t saved_rollups_ = 0;  // metric_rollups_.Mark() at Begin()
};

namespace store_internal {

inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace store_internal

template <typename Body>
auto Store::Write(Body body) -> decltype(body()) {
  std::lock_guard<StoreMutex> lock(mu_);
  if (txn_depth_ > 0 && !txn_error_.ok()) {
    return absl::AbortedError(
        absl::StrCat("not written: the Store::Transaction already failed: ", txn_error_.message()));
  }
  const auto began = std::chrono::steady_clock::now();
  auto result = body();
  if (txn_depth_ > 0 && !result.ok()) txn_error_ = store_internal::StatusOf(result);
  if (txn_depth_ == 0) ReportWriteTransaction(began);  // store_events.h
  return result;
}

namespace store_internal {

// Binds parameters 1, 2, ... in order; remembers the first failure.
class Binder {
 public:
  explicit Binder(sqlite3_stmt* stmt) : stmt_(stmt) {}

  Binder& Int(int64_t v) {
    if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_int64(stmt_, ++index_, v);
    return *this;
  }
  // The text must stay alive until the statement is stepped.
  Binder& Text(absl::string_view v) {
    if (rc_ == SQLITE_OK) {
      rc_ = sqlite3_bind_text64(stmt_, ++index_, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
    }
    return *this;
  }
  // NaN is stored as NULL (SQLite does the same for a bound NaN).
  Binder& Double(double v) {
    if (rc_ == SQLITE_OK) {
      rc_ = std::isnan(v) ? sqlite3_bind_null(stmt_, ++index_) : sqlite3_bind_double(stmt_, ++index_, v);
    }
    return *this;
  }
  Binder& OptDouble(const std::optional<double>& v) {
    if (!v.has_value()) {
      if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_null(stmt_, ++index_);
      return *this;
    }
    return Double(*v);
  }
  Binder& OptInt(const std::optional<int64_t>& v) {
    if (!v.has_value()) {
      if (rc_ == SQLITE_OK) rc_ = sqlite3_bind_null(stmt_, ++index_);
      return *this;
    }
    return Int(*v);
  }
  int rc() const { return rc_; }

 private:
  sqlite3_stmt* stmt_;
  int index_ = 0;
  int rc_ = SQLITE_OK;
};

inline std::string ColText(sqlite3_stmt* s, int i) {
  const unsigned char* p = sqlite3_column_text(s, i);
  if (p == nullptr) return std::string();
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(s, i)));
}
inline int64_t ColInt(sqlite3_stmt* s, int i) { return sqlite3_column_int64(s, i); }
inline double ColDouble(sqlite3_stmt* s, int i) { return sqlite3_column_double(s, i); }
inline std::optional<double> ColOptDouble(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_double(s, i);
}
inline std::optional<int64_t> ColOptInt(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int64(s, i);
}

// Reports `pending` (store_events.h) when `db` has no open transaction: what
// was just recorded was committed by its own statement. Inside a transaction
// it waits for the commit (Store::Txn::Commit, Store::Transaction::End).
inline void ReportIfCommitted(sqlite3* db, PendingStoreEvents* pending) {
  if (sqlite3_get_autocommit(db) != 0) pending->Flush(CurrentStoreEvents());
}

// `limit` for a LIMIT clause: SQLite reads -1 as no limit.
inline int64_t SqlLimit(int64_t limit) { return limit > 0 ? limit : -1; }

// "?, ?, ?" for n parameters.
std::string Placeholders(size_t n);
// Store::Open's first step (store_migrations.cc): reads the schema version of
// the existing database at `path` on a read-only connection (no PRAGMA, no
// journal mode switch, so a rollback-journal backup stays one) and returns
// Migrate's FailedPrecondition when it is newer than this binary's. OK when
// there is no database yet or no schema_migrations table (Open goes on).
absl::Status RefuseNewerSchema(const std::string& path);

// JSON text of `j`. Never throws: invalid UTF-8 is replaced rather than
// rejected.
std::string Dump(const nlohmann::json& j);

// Parses a stored JSON column; DataLoss naming `what` if it does not parse.
absl::StatusOr<nlohmann::json> ParseJson(const std::string& text, absl::string_view what);

// A metric row's values as the stored JSON text: {"name":value,...} in name
// order, each value the shortest text that reads back as the same double,
// NaN and the infinities as strings (store_metrics_logs.cc).
std::string EncodeMetrics(const std::map<std::string, double>& metrics);
// The inverse of EncodeMetrics; DataLoss for text that is not such an object
// (metric_decode.cc). EncodeMetrics' own output is read without nlohmann;
// any other JSON object of numbers (and "NaN", "Infinity", "-Infinity")
// decodes as nlohmann reads it.
absl::StatusOr<std::map<std::string, double>> DecodeMetrics(const std::string& text);
// DecodeMetrics through nlohmann only: the reference the tests compare with.
absl::StatusOr<std::map<std::string, double>> DecodeMetricsWithNlohmannForTest(const std::string& text);

// The SQL each query of one group's metric rows runs for `group`. Another
// group's says metric_group != 'training' literally: only then does SQLite
// use migration 15's partial index metrics_trial_other_groups instead of
// stepping over every training row of the trial
// (store_metric_storage_test.cc checks the plans).
const char* ScanMetricsSql(const std::string& group);     // store_metric_series.cc ("": every group)
const char* ListMetricsSql(const std::string& group);     // store_metrics_logs.cc ("": every group)
const char* ExperimentValidationsSql();                   // store_metrics_logs.cc (group validation)
const char* RollupOtherRowSql(const std::string& group);  // store_metric_rollups.cc
const char* RollupTailRowsSql(const std::string& group);  // store_metric_rollups.cc

}  // namespace store_internal
}  // namespace master
}  // namespace det

#endif  // DET_MASTER_STORE_STORE_INTERNAL_H_
