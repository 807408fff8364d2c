// Store: the metrics and task_logs tables.
#include "master/store/store.h"

#include <sqlite3.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store_internal.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::ColDouble;
using store_internal::ColInt;
using store_internal::ColText;
using store_internal::Dump;
using store_internal::ParseJson;
using store_internal::SqlLimit;

#define DET_METRIC_COLUMNS \
  "id, trial_id, trial_run_id, metric_group, total_batches, total_epochs, metrics, time_ms, archived"
#define DET_TASK_LOG_COLUMNS "id, trial_id, allocation_id, rank, time_ms, level, stream, message"

// Rows newer than ?2 that sort at or before the cursor (?4, ?5); seeks
// metrics(trial_id, id) to the rows newer than ?2 only.
constexpr char kMetricsOutOfOrder[] =
    "SELECT 1 FROM metrics INDEXED BY metrics_trial_id_id WHERE trial_id = ?1 AND id > ?2 AND archived = 0 "
    "AND (?3 = '' OR metric_group = ?3) AND (total_batches < ?4 OR (total_batches = ?4 AND id <= ?5)) LIMIT 1";
constexpr char kCountMetricsInIdRange[] =
    "SELECT COUNT(*) FROM metrics INDEXED BY metrics_trial_id_id WHERE trial_id = ?1 AND id > ?2 AND id <= ?3 "
    "AND archived = 0 AND (?4 = '' OR metric_group = ?4)";

// After the cursor (total_batches ?4, id ?6) in (total_batches, id) order; ?6
// is the largest id when the cursor has no id. One statement per case so
// each uses its index: (trial_id, total_batches, ...) for every group and
// for training, (trial_id, metric_group, total_batches) WHERE metric_group
// != 'training' for another group (migration 15: the literal term lets
// SQLite use that partial index).
#define DET_LIST_METRICS(group_terms)                                                   \
  "SELECT " DET_METRIC_COLUMNS " FROM metrics WHERE trial_id = ?1 AND " group_terms     \
  " AND (?3 OR archived = 0) AND total_batches >= ?4 AND (total_batches > ?4 OR id > ?6) " \
  "ORDER BY total_batches, id LIMIT ?5"
constexpr char kListMetrics[] = DET_LIST_METRICS("?2 = ''");
constexpr char kListTrainingMetrics[] = DET_LIST_METRICS("metric_group = ?2");
constexpr char kListOtherGroupMetrics[] = DET_LIST_METRICS("metric_group = ?2 AND metric_group != 'training'");
constexpr char kArchiveMetricsAfter[] =
    "UPDATE metrics SET archived = 1 WHERE trial_id = ? AND total_batches > ? AND archived = 0";

constexpr char kInsertTaskLog[] =
    "INSERT INTO task_logs(trial_id, allocation_id, rank, time_ms, level, stream, message) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)";
constexpr char kListTaskLogs[] =
    "SELECT " DET_TASK_LOG_COLUMNS " FROM task_logs WHERE trial_id = ? AND id > ? ORDER BY id LIMIT ?";
// The log volume of a trial as TaskLogLimits counts it.
constexpr char kTaskLogBytes[] =
    "SELECT COALESCE(SUM(LENGTH(CAST(message AS BLOB))), 0) + ?2 * COUNT(*) FROM task_logs WHERE trial_id = ?1";
constexpr char kTaskLogMarker[] =
    "SELECT id, message FROM task_logs WHERE trial_id = ? AND stream = 'dropped' ORDER BY id LIMIT 1";
constexpr char kOldestTaskLogs[] =
    "SELECT id, LENGTH(CAST(message AS BLOB)), time_ms FROM task_logs WHERE trial_id = ? AND stream != 'dropped' "
    "ORDER BY id";
constexpr char kDeleteTaskLogsUpTo[] = "DELETE FROM task_logs WHERE trial_id = ? AND id <= ? AND stream != 'dropped'";
constexpr char kInsertTaskLogMarker[] =
    "INSERT INTO task_logs(id, trial_id, allocation_id, rank, time_ms, level, stream, message) "
    "VALUES (?, ?, '', 0, ?, 'LOG_LEVEL_WARNING', 'dropped', ?)";
constexpr char kUpdateTaskLogMessage[] = "UPDATE task_logs SET message = ? WHERE id = ?";

// `message` cut to `max` bytes (at a UTF-8 character boundary) plus a marker
// when longer; unchanged otherwise (max 0: unbounded).
absl::string_view BoundedMessage(absl::string_view message, int64_t max, std::string* storage) {
  if (max <= 0 || static_cast<int64_t>(message.size()) <= max) return message;
  size_t keep = static_cast<size_t>(max);
  while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80) --keep;
  *storage = absl::StrCat(message.substr(0, keep), " ... [line truncated: ", message.size(), " bytes]");
  return *storage;
}

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no
// overlong forms, surrogates or code points above U+10FFFF), 0 if none.
size_t Utf8SequenceLength(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = byte(i);
  const auto cont = [&](size_t k, unsigned lo, unsigned hi) { return byte(k) >= lo && byte(k) <= hi; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(i + 1, 0x80, 0xBF) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return cont(i + 1, lo, hi) && cont(i + 2, 0x80, 0xBF) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return cont(i + 1, lo, hi) && cont(i + 2, 0x80, 0xBF) && cont(i + 3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

// A metric name as a JSON string, as nlohmann::json's dump writes it (not
// ASCII-escaped): '"' and '\\' escaped, \b \f \n \r \t, other control
// characters as \u00xx, well-formed UTF-8 copied as it is. Only a name with
// ill-formed UTF-8 (which no client sends) goes through nlohmann, whose
// error handler replaces it.
void AppendJsonName(const std::string& name, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  const size_t start = out->size();
  out->push_back('"');
  for (size_t i = 0; i < name.size();) {
    const auto c = static_cast<unsigned char>(name[i]);
    const size_t n = Utf8SequenceLength(name, i);
    if (n == 0) {  // ill-formed: nlohmann's replacement, rare
      out->resize(start);
      out->append(Dump(nlohmann::json(name)));
      return;
    }
    if (n > 1 || (c >= 0x20 && c != '"' && c != '\\')) {
      out->append(name, i, n);
    } else if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else {
      static constexpr char kShort[] = "btnvfr";  // 0x08..0x0d; \v (0x0b) has no short form in JSON
      out->push_back('\\');
      if (c >= 0x08 && c <= 0x0d && c != 0x0b) {
        out->push_back(kShort[c - 0x08]);
      } else {
        out->append("u00");
        out->push_back(kHex[c >> 4]);
        out->push_back(kHex[c & 0xf]);
      }
    }
    i += n;
  }
  out->push_back('"');
}

}  // namespace

// {"name":value,...} in name order, each value the shortest text that reads
// back as the same double; NaN and the infinities as strings (JSON has none).
// Written directly rather than through nlohmann::json: this runs for every
// metric row the master ingests.
std::string store_internal::EncodeMetrics(const std::map<std::string, double>& metrics) {
  std::string out = "{";
  char num[32];
  for (const auto& [name, v] : metrics) {
    if (out.size() > 1) out.push_back(',');
    AppendJsonName(name, &out);
    out.push_back(':');
    if (std::isnan(v)) {
      out.append("\"NaN\"");
    } else if (std::isinf(v)) {
      out.append(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
    } else {
      std::to_chars_result r = std::to_chars(num, num + sizeof(num), v);
      out.append(num, r.ptr);
    }
  }
  out.push_back('}');
  return out;
}

namespace {

using store_internal::DecodeMetrics;

absl::StatusOr<MetricRow> ReadMetric(sqlite3_stmt* s) {
  MetricRow r;
  r.id = ColInt(s, 0);
  r.trial_id = ColInt(s, 1);
  r.trial_run_id = ColInt(s, 2);
  r.group = ColText(s, 3);
  r.total_batches = ColInt(s, 4);
  r.total_epochs = ColDouble(s, 5);
  DET_ASSIGN_OR_RETURN(r.metrics, DecodeMetrics(ColText(s, 6)));
  r.time_ms = ColInt(s, 7);
  r.archived = ColInt(s, 8) != 0;
  return r;
}

TaskLogRow ReadTaskLog(sqlite3_stmt* s) {
  TaskLogRow r;
  r.id = ColInt(s, 0);
  r.trial_id = ColInt(s, 1);
  r.allocation_id = ColText(s, 2);
  r.rank = static_cast<int32_t>(ColInt(s, 3));
  r.time_ms = ColInt(s, 4);
  r.level = ColText(s, 5);
  r.stream = ColText(s, 6);
  r.message = ColText(s, 7);
  return r;
}

}  // namespace

// ---- Metrics ----

const char* store_internal::ListMetricsSql(const std::string& group) {
  return group.empty() ? kListMetrics : group == "training" ? kListTrainingMetrics : kListOtherGroupMetrics;
}

const char* store_internal::ExperimentValidationsSql() {
  return "SELECT m.id, m.trial_id, m.total_batches, m.time_ms, m.metrics FROM metrics m "
         "JOIN trials t ON t.id = m.trial_id WHERE t.experiment_id = ? AND m.metric_group = 'validation' "
         "AND m.metric_group != 'training' AND m.archived = 0 ORDER BY m.time_ms, m.id";
}

absl::StatusOr<std::vector<MetricRow>> Store::ListMetrics(int64_t trial_id, const std::string& group,
                                                          bool include_archived, int64_t after_batches,
                                                          int64_t limit, int64_t after_id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(store_internal::ListMetricsSql(group)));
  Binder b(st.get());
  b.Int(trial_id).Text(group).Int(include_archived ? 1 : 0).Int(after_batches).Int(SqlLimit(limit));
  b.Int(after_id > 0 ? after_id : std::numeric_limits<int64_t>::max());
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind metrics query");
  std::vector<MetricRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    DET_ASSIGN_OR_RETURN(MetricRow row, ReadMetric(st.get()));
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("list metrics of trial ", trial_id));
  return out;
}

absl::StatusOr<std::vector<MetricRow>> Store::GetMetricsByIds(const std::vector<int64_t>& ids) {
  if (ids.size() > 10000) return absl::InvalidArgumentError(absl::StrCat("at most 10000 ids, got ", ids.size()));
  std::vector<MetricRow> out;
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached("SELECT " DET_METRIC_COLUMNS " FROM metrics WHERE id = ?"));
  for (int64_t id : ids) {
    Binder b(st.get());
    b.Int(id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind metric id");
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) {
      DET_ASSIGN_OR_RETURN(MetricRow row, ReadMetric(st.get()));
      out.push_back(std::move(row));
    } else if (rc != SQLITE_DONE) {
      return Error(rc, absl::StrCat("metric ", id));
    }
    sqlite3_reset(st.get());
  }
  std::sort(out.begin(), out.end(), [](const MetricRow& a, const MetricRow& b) {
    return std::tie(a.total_batches, a.id) < std::tie(b.total_batches, b.id);
  });
  return out;
}

absl::Status Store::ArchiveMetricsAfter(int64_t trial_id, int64_t total_batches) {
  return Write([&]() -> absl::Status {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kArchiveMetricsAfter));
    Binder b(st.get());
    b.Int(trial_id).Int(total_batches);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind archive metrics");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("archive metrics of trial ", trial_id));
    // Chart rollups (metric_rollups.h): blocks and series markers past the
    // archived point are gone; the series are rebuilt from what is left.
    DET_ASSIGN_OR_RETURN(Stmt drop, Cached("DELETE FROM metric_rollups WHERE trial_id = ? AND last_batches > ? "
                                           "AND (width > 0 OR name != '')"));
    Binder db(drop.get());
    db.Int(trial_id).Int(total_batches);
    if (db.rc() != SQLITE_OK) return Error(db.rc(), "bind archive metric rollups");
    rc = sqlite3_step(drop.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("archive metric rollups of trial ", trial_id));
    metric_rollups_.DropTrial(trial_id);
    metric_rewrites_.fetch_add(1);
    return absl::OkStatus();
  });
}

absl::StatusOr<int64_t> Store::MaxMetricId() {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached("SELECT COALESCE(MAX(id), 0) FROM metrics"));
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, "largest metric id");
  return ColInt(st.get(), 0);
}

absl::StatusOr<int64_t> Store::CountMetricsInIdRange(int64_t trial_id, const std::string& group, int64_t above_id,
                                                     int64_t up_to_id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kCountMetricsInIdRange));
  Binder b(st.get());
  b.Int(trial_id).Int(above_id).Int(up_to_id).Text(group);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind metric count");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("count metrics of trial ", trial_id));
  return ColInt(st.get(), 0);
}

absl::StatusOr<bool> Store::MetricsReportedOutOfOrder(int64_t trial_id, const std::string& group, int64_t above_id,
                                                      int64_t after_batches, int64_t after_id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kMetricsOutOfOrder));
  Binder b(st.get());
  b.Int(trial_id).Int(above_id).Text(group).Int(after_batches).Int(after_id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind out-of-order metrics query");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("out-of-order metrics of trial ", trial_id));
  return false;
}

// ---- Task logs ----

void Store::set_task_log_limits(const TaskLogLimits& limits) {
  std::lock_guard<StoreMutex> lock(mu_);
  task_log_limits_ = limits;
}

absl::StatusOr<int64_t> Store::TaskLogBytesLocked(int64_t trial_id) {
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kTaskLogBytes));
  Binder b(st.get());
  b.Int(trial_id).Int(TaskLogLimits::kLineOverhead);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind task log volume");
  int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("task log volume of trial ", trial_id));
  return ColInt(st.get(), 0);
}

absl::Status Store::TrimTaskLogsLocked(int64_t trial_id, int64_t* bytes) {
  const int64_t max = task_log_limits_.max_trial_bytes;
  DET_ASSIGN_OR_RETURN(*bytes, TaskLogBytesLocked(trial_id));  // the count may have drifted up
  if (*bytes <= max) return absl::OkStatus();
  const int64_t excess = *bytes - max / 4 * 3;
  int64_t marker_id = 0;
  long long dropped_before = 0;
  std::string old_marker;
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kTaskLogMarker));
    Binder b(st.get());
    b.Int(trial_id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind task log marker");
    int rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) {
      marker_id = ColInt(st.get(), 0);
      old_marker = ColText(st.get(), 1);
      if (std::sscanf(old_marker.c_str(), "... %lld", &dropped_before) != 1) dropped_before = 0;
    } else if (rc != SQLITE_DONE) {
      return Error(rc, "read task log marker");
    }
  }
  int64_t last_id = 0, last_time = 0, freed = 0, n = 0;
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kOldestTaskLogs));
    Binder b(st.get());
    b.Int(trial_id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind oldest task logs");
    int rc = SQLITE_ROW;
    while (freed < excess && (rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      last_id = ColInt(st.get(), 0);
      freed += ColInt(st.get(), 1) + TaskLogLimits::kLineOverhead;
      last_time = ColInt(st.get(), 2);
      ++n;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error(rc, "read oldest task logs");
  }
  if (n == 0) return absl::OkStatus();
  {
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(kDeleteTaskLogsUpTo));
    Binder b(st.get());
    b.Int(trial_id).Int(last_id);
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind task log trim");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("drop old task logs of trial ", trial_id));
  }
  const std::string marker = absl::StrCat("... ", dropped_before + n, " earlier lines dropped (log limit of ", max,
                                          " bytes per trial)");
  {
    // The marker takes the place of the newest line dropped: it stays the
    // oldest line of the trial.
    DET_ASSIGN_OR_RETURN(Stmt st, Cached(marker_id == 0 ? kInsertTaskLogMarker : kUpdateTaskLogMessage));
    Binder b(st.get());
    if (marker_id == 0) {
      b.Int(last_id).Int(trial_id).Int(last_time).Text(marker);
    } else {
      b.Text(marker).Int(marker_id);
    }
    if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind task log marker");
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("write the task log marker of trial ", trial_id));
  }
  *bytes += -freed + static_cast<int64_t>(marker.size()) -
            (marker_id == 0 ? -TaskLogLimits::kLineOverhead : static_cast<int64_t>(old_marker.size()));
  return absl::OkStatus();
}

absl::Status Store::InsertTaskLogs(const std::vector<TaskLogRow>& rows) {
  if (rows.empty()) return absl::OkStatus();
  return Write([&]() -> absl::Status {
    Txn txn(this);
    DET_RETURN_IF_ERROR(txn.Begin());
    std::map<int64_t, int64_t> added;  // trial id -> bytes
    {
      DET_ASSIGN_OR_RETURN(Stmt st, Cached(kInsertTaskLog));
      std::string cut;
      for (const TaskLogRow& r : rows) {
        absl::string_view message = BoundedMessage(r.message, task_log_limits_.max_line_bytes, &cut);
        added[r.trial_id] += static_cast<int64_t>(message.size()) + TaskLogLimits::kLineOverhead;
        Binder b(st.get());
        b.Int(r.trial_id).Text(r.allocation_id).Int(r.rank).Int(r.time_ms).Text(r.level).Text(r.stream).Text(message);
        if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind task log");
        int rc = sqlite3_step(st.get());
        if (rc == SQLITE_CONSTRAINT_FOREIGNKEY) {
          return absl::FailedPreconditionError(absl::StrCat("cannot insert task logs: trial ", r.trial_id, " not found"));
        }
        if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("insert task logs of trial ", r.trial_id));
        sqlite3_reset(st.get());
      }
    }
    if (task_log_limits_.max_trial_bytes > 0) {
      for (const auto& [trial_id, bytes] : added) {
        auto it = task_log_bytes_.find(trial_id);
        if (it == task_log_bytes_.end()) {
          DET_ASSIGN_OR_RETURN(int64_t now, TaskLogBytesLocked(trial_id));  // includes this batch
          it = task_log_bytes_.emplace(trial_id, now).first;
        } else {
          it->second += bytes;
        }
        if (it->second > task_log_limits_.max_trial_bytes) DET_RETURN_IF_ERROR(TrimTaskLogsLocked(trial_id, &it->second));
      }
    }
    pending_events_.log_lines += static_cast<int64_t>(rows.size());  // reported when committed
    return txn.Commit();
  });
}

absl::StatusOr<std::vector<TaskLogRow>> Store::ListTaskLogs(int64_t trial_id, int64_t after_id, int64_t limit) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(kListTaskLogs));
  Binder b(st.get());
  b.Int(trial_id).Int(after_id).Int(SqlLimit(limit));
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind task log query");
  std::vector<TaskLogRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadTaskLog(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("list task logs of trial ", trial_id));
  return out;
}

// ---- Metric streams, validation history and log filters ----

namespace {

constexpr size_t kMaxFilterValues = 100;
constexpr size_t kMaxStreamTrials = 1000;

// " AND column IN (?, ...)" when `n` > 0.
std::string InClause(const char* column, size_t n) {
  return n == 0 ? std::string() : absl::StrCat(" AND ", column, " IN (", store_internal::Placeholders(n), ")");
}

// The WHERE clause of `f` (after_id excluded) and its parameters bound in
// the same order by BindLogFilter.
std::string LogFilterWhere(const TaskLogFilter& f) {
  std::string w = "trial_id = ?";
  w += InClause("level", f.levels.size());
  w += InClause("stream", f.streams.size());
  w += InClause("rank", f.ranks.size());
  w += InClause("allocation_id", f.allocation_ids.size());
  if (f.since_ms) w += " AND time_ms >= ?";
  if (f.until_ms) w += " AND time_ms < ?";
  // instr() is a literal match: '%' and '_' in the text are plain characters.
  if (!f.search_text.empty()) w += " AND instr(message, ?) > 0";
  return w;
}

void BindLogFilter(const TaskLogFilter& f, Binder& b) {
  b.Int(f.trial_id);
  for (const auto& v : f.levels) b.Text(v);
  for (const auto& v : f.streams) b.Text(v);
  for (int32_t v : f.ranks) b.Int(v);
  for (const auto& v : f.allocation_ids) b.Text(v);
  if (f.since_ms) b.Int(*f.since_ms);
  if (f.until_ms) b.Int(*f.until_ms);
  if (!f.search_text.empty()) b.Text(f.search_text);
}

absl::Status CheckLogFilter(const TaskLogFilter& f) {
  auto check = [](size_t n, const char* field) -> absl::Status {
    if (n <= kMaxFilterValues) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", n, " values; at most ", kMaxFilterValues));
  };
  DET_RETURN_IF_ERROR(check(f.levels.size(), "levels"));
  DET_RETURN_IF_ERROR(check(f.streams.size(), "stdtypes"));
  DET_RETURN_IF_ERROR(check(f.ranks.size(), "ranks"));
  return check(f.allocation_ids.size(), "allocation_ids");
}

}  // namespace

std::string Store::MetricsAfterIdSql(size_t trials, bool by_group) {
  return absl::StrCat("SELECT " DET_METRIC_COLUMNS " FROM metrics INDEXED BY metrics_trial_id_id WHERE id > ?",
                      InClause("trial_id", trials), by_group ? " AND metric_group = ?" : "", " ORDER BY id LIMIT ?");
}

// From the tail when it covers the cursor (the rows copied under mu_ as shared
// pointers, decoded after it is released), else the SQL below.
absl::StatusOr<std::vector<MetricRow>> Store::ListMetricsAfterId(const std::vector<int64_t>& trial_ids,
                                                                 const std::string& group, int64_t after_id,
                                                                 int64_t limit) {
  if (trial_ids.empty()) return std::vector<MetricRow>();
  if (trial_ids.size() > kMaxStreamTrials) {
    return absl::InvalidArgumentError(
        absl::StrCat("trial_ids: ", trial_ids.size(), " trials; at most ", kMaxStreamTrials));
  }
  std::vector<MetricTail::RowPtr> kept;
  {
    std::lock_guard<StoreMutex> lock(mu_);
    DET_ASSIGN_OR_RETURN(bool from_tail, ReadMetricTailLocked(trial_ids, group, after_id, limit, &kept));
    if (!from_tail) return ListMetricsAfterIdSqlLocked(trial_ids, group, after_id, limit);
  }
  std::vector<MetricRow> out;
  out.reserve(kept.size());
  for (const MetricTail::RowPtr& k : kept) {
    MetricRow r;
    r.id = k->id;
    r.trial_id = k->trial_id;
    r.trial_run_id = k->trial_run_id;
    r.group = k->group;
    r.total_batches = k->total_batches;
    r.total_epochs = k->total_epochs;
    DET_ASSIGN_OR_RETURN(r.metrics, DecodeMetrics(k->encoded));
    r.time_ms = k->time_ms;
    r.archived = k->archived;
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<bool> Store::ReadMetricTailLocked(const std::vector<int64_t>& trial_ids, const std::string& group,
                                                 int64_t after_id, int64_t limit,
                                                 std::vector<MetricTail::RowPtr>* out) {
  // Inside a transaction this thread's own uncommitted rows are in SQLite
  // but not in the tail: SQLite answers, as before.
  if (sqlite3_get_autocommit(db_) == 0) return false;
  const uint64_t rewrites = metric_rewrites_.load();
  if (metric_tail_.rewrites_seen() != rewrites) {  // rows archived or deleted since the tail took them
    metric_tail_.Invalidate();
    metric_tail_.set_rewrites_seen(rewrites);
  }
  if (!metric_tail_.has_coverage()) {  // after Open: start after the largest stored id
    DET_ASSIGN_OR_RETURN(Stmt st, Cached("SELECT COALESCE(MAX(id), 0) FROM metrics"));
    int rc = sqlite3_step(st.get());
    if (rc != SQLITE_ROW) return Error(rc, "largest metric id");
    metric_tail_.SetBaseline(ColInt(st.get(), 0));
  }
  return metric_tail_.Read(trial_ids, group, after_id, limit, out);
}

absl::StatusOr<std::vector<MetricRow>> Store::ListMetricsAfterIdSqlLocked(const std::vector<int64_t>& trial_ids,
                                                                          const std::string& group,
                                                                          int64_t after_id, int64_t limit) {
  DET_ASSIGN_OR_RETURN(Stmt st, CachedDynamic(MetricsAfterIdSql(trial_ids.size(), !group.empty())));
  Binder b(st.get());
  b.Int(after_id);
  for (int64_t id : trial_ids) b.Int(id);
  if (!group.empty()) b.Text(group);
  b.Int(SqlLimit(limit));
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind metric stream query");
  std::vector<MetricRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    DET_ASSIGN_OR_RETURN(MetricRow row, ReadMetric(st.get()));
    out.push_back(std::move(row));
  }
  if (rc != SQLITE_DONE) return Error(rc, "list metrics after id");
  return out;
}

MetricTail::Stats Store::MetricTailStats() {
  std::lock_guard<StoreMutex> lock(mu_);
  return metric_tail_.stats();
}

absl::StatusOr<std::vector<ValidationPoint>> Store::ListExperimentValidations(int64_t experiment_id) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, PrepareOnce(store_internal::ExperimentValidationsSql()));
  Binder b(st.get());
  b.Int(experiment_id);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind validation history query");
  std::vector<ValidationPoint> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    ValidationPoint p;
    p.id = ColInt(st.get(), 0);
    p.trial_id = ColInt(st.get(), 1);
    p.total_batches = ColInt(st.get(), 2);
    p.time_ms = ColInt(st.get(), 3);
    DET_ASSIGN_OR_RETURN(p.metrics, DecodeMetrics(ColText(st.get(), 4)));
    out.push_back(std::move(p));
  }
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("list validations of experiment ", experiment_id));
  return out;
}

absl::StatusOr<std::vector<TaskLogRow>> Store::ListTaskLogsFiltered(const TaskLogFilter& filter, int64_t limit) {
  DET_RETURN_IF_ERROR(CheckLogFilter(filter));
  std::lock_guard<StoreMutex> lock(mu_);
  const std::string sql = absl::StrCat("SELECT " DET_TASK_LOG_COLUMNS " FROM task_logs WHERE ",
                                       LogFilterWhere(filter), " AND id > ? ORDER BY id LIMIT ?");
  DET_ASSIGN_OR_RETURN(Stmt st, PrepareOnce(sql));
  Binder b(st.get());
  BindLogFilter(filter, b);
  b.Int(filter.after_id).Int(SqlLimit(limit));
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind filtered task log query");
  std::vector<TaskLogRow> out;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) out.push_back(ReadTaskLog(st.get()));
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("list task logs of trial ", filter.trial_id));
  return out;
}

absl::StatusOr<int64_t> Store::TaskLogTailStart(const TaskLogFilter& filter, int64_t tail) {
  if (tail <= 0) return absl::InvalidArgumentError("tail must be > 0");
  DET_RETURN_IF_ERROR(CheckLogFilter(filter));
  std::lock_guard<StoreMutex> lock(mu_);
  const std::string sql = absl::StrCat("SELECT id FROM task_logs WHERE ", LogFilterWhere(filter),
                                       " ORDER BY id DESC LIMIT 1 OFFSET ?");
  DET_ASSIGN_OR_RETURN(Stmt st, PrepareOnce(sql));
  Binder b(st.get());
  BindLogFilter(filter, b);
  b.Int(tail - 1);
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind task log tail query");
  int rc = sqlite3_step(st.get());
  if (rc == SQLITE_ROW) return ColInt(st.get(), 0) - 1;
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("task log tail of trial ", filter.trial_id));
  return int64_t{0};
}

}  // namespace master
}  // namespace det
