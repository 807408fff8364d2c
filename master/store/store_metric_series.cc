// Store::ScanMetrics: many metric rows in a compact form for chart
// downsampling. The stored metrics JSON (always written by EncodeMetrics:
// one flat object of numbers and "NaN"/"Infinity"/"-Infinity") is scanned
// in place instead of being parsed into a tree and a std::map per row,
// which made charting a trial with a million rows take seconds and
// hundreds of MiB.
#include <sqlite3.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "master/store/store.h"
#include "master/store/store_internal.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {
namespace {

using store_internal::Binder;
using store_internal::SqlLimit;

// The same selection and order as ListMetrics (store_metrics_logs.cc).
constexpr char kScanMetrics[] =
    "SELECT id, total_batches, metric_group, metrics FROM metrics WHERE trial_id = ?1 AND ?2 = '' "
    "AND (?3 OR archived = 0) AND total_batches >= ?4 AND (total_batches > ?4 OR id > ?6) "
    "ORDER BY total_batches, id LIMIT ?5";
#define DET_SCAN_GROUP_METRICS(group_terms)                                                             \
  "SELECT id, total_batches, metric_group, metrics FROM metrics WHERE trial_id = ?1 AND " group_terms      \
  " AND (?3 OR archived = 0) AND total_batches >= ?4 AND (total_batches > ?4 OR id > ?6) "                \
  "ORDER BY total_batches, id LIMIT ?5"
constexpr char kScanTrainingMetrics[] = DET_SCAN_GROUP_METRICS("metric_group = ?2");
// The literal term lets SQLite use migration 15's partial index.
constexpr char kScanOtherGroupMetrics[] =
    DET_SCAN_GROUP_METRICS("metric_group = ?2 AND metric_group != 'training'");

class Interner {
 public:
  explicit Interner(std::vector<std::string>* names) : names_(names) {
    for (size_t i = 0; i < names->size(); ++i) index_.emplace((*names)[i], static_cast<int32_t>(i));
  }
  int32_t Of(const char* s, size_t n) {
    key_.assign(s, n);
    auto it = index_.find(key_);
    if (it != index_.end()) return it->second;
    const int32_t i = static_cast<int32_t>(names_->size());
    names_->push_back(key_);
    index_.emplace(key_, i);
    return i;
  }

 private:
  std::vector<std::string>* names_;
  std::unordered_map<std::string, int32_t> index_;
  std::string key_;
};

// Scans a flat JSON object of numbers (or the strings "NaN", "Infinity",
// "-Infinity") as EncodeMetrics writes it; false when the text is anything
// else (an escaped name, say), for the caller to parse it fully.
bool ScanFlat(const char* p, Interner* names, std::vector<std::pair<int32_t, double>>* out) {
  auto ws = [&] {
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') ++p;
  };
  ws();
  if (*p++ != '{') return false;
  ws();
  if (*p == '}') return true;
  for (;;) {
    ws();
    if (*p++ != '"') return false;
    const char* name = p;
    while (*p != '"' && *p != '\\' && *p != '\0') ++p;
    if (*p != '"') return false;
    const size_t len = static_cast<size_t>(p - name);
    ++p;
    ws();
    if (*p++ != ':') return false;
    ws();
    double v = 0;
    if (*p == '"') {
      const char* s = ++p;
      while (*p != '"' && *p != '\0') ++p;
      if (*p != '"') return false;
      const std::string_view text(s, static_cast<size_t>(p - s));
      ++p;
      if (text == "NaN") v = std::numeric_limits<double>::quiet_NaN();
      else if (text == "Infinity") v = std::numeric_limits<double>::infinity();
      else if (text == "-Infinity") v = -std::numeric_limits<double>::infinity();
      else return false;
    } else {
      char* end = nullptr;
      v = std::strtod(p, &end);
      if (end == p) return false;
      p = end;
    }
    out->emplace_back(names->Of(name, len), v);
    ws();
    if (*p == ',') {
      ++p;
      continue;
    }
    return *p == '}';
  }
}

// The slow path: any JSON object of numbers and the three strings.
bool ParseFull(const char* text, Interner* names, std::vector<std::pair<int32_t, double>>* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  for (const auto& [name, v] : j.items()) {
    double d = 0;
    if (v.is_number()) d = v.get<double>();
    else if (v == "NaN") d = std::numeric_limits<double>::quiet_NaN();
    else if (v == "Infinity") d = std::numeric_limits<double>::infinity();
    else if (v == "-Infinity") d = -std::numeric_limits<double>::infinity();
    else return false;
    out->emplace_back(names->Of(name.data(), name.size()), d);
  }
  return true;
}

}  // namespace

const char* store_internal::ScanMetricsSql(const std::string& group) {
  return group.empty() ? kScanMetrics : group == "training" ? kScanTrainingMetrics : kScanOtherGroupMetrics;
}

absl::StatusOr<int64_t> Store::ScanMetrics(int64_t trial_id, const std::string& group, bool include_archived,
                                           int64_t after_batches, int64_t after_id, int64_t limit,
                                           MetricScan* scan, size_t max_values) {
  std::lock_guard<StoreMutex> lock(mu_);
  DET_ASSIGN_OR_RETURN(Stmt st, Cached(store_internal::ScanMetricsSql(group)));
  Binder b(st.get());
  b.Int(trial_id).Text(group).Int(include_archived ? 1 : 0).Int(after_batches).Int(SqlLimit(limit));
  b.Int(after_id > 0 ? after_id : std::numeric_limits<int64_t>::max());
  if (b.rc() != SQLITE_OK) return Error(b.rc(), "bind metric scan");
  Interner names(&scan->names);
  Interner groups(&scan->groups);
  int64_t n = 0;
  const size_t values_before = scan->values.size();
  int32_t last_group = -1;
  std::string last_group_text;
  int rc;
  while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
    sqlite3_stmt* s = st.get();
    const char* g = reinterpret_cast<const char*>(sqlite3_column_text(s, 2));
    const size_t glen = static_cast<size_t>(sqlite3_column_bytes(s, 2));
    if (last_group < 0 || last_group_text.size() != glen || std::memcmp(last_group_text.data(), g, glen) != 0) {
      last_group = groups.Of(g, glen);
      last_group_text.assign(g, glen);
    }
    const char* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 3));
    const size_t before = scan->values.size();
    if (text == nullptr || !ScanFlat(text, &names, &scan->values)) {
      scan->values.resize(before);
      if (text == nullptr || !ParseFull(text, &names, &scan->values)) {
        return absl::DataLossError(absl::StrCat("stored metrics of row ", sqlite3_column_int64(s, 0),
                                                " are not an object of numbers"));
      }
    }
    scan->ids.push_back(sqlite3_column_int64(s, 0));
    scan->batches.push_back(sqlite3_column_int64(s, 1));
    scan->group_of.push_back(last_group);
    scan->offsets.push_back(static_cast<uint32_t>(scan->values.size()));
    ++n;
    if (scan->values.size() - values_before > max_values) break;
  }
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) return Error(rc, absl::StrCat("scan metrics of trial ", trial_id));
  return n;
}

}  // namespace master
}  // namespace det
