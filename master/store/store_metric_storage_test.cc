// Metric storage (issue 50): migration 15 on a populated database, ids the
// Store assigns (never reused, across restarts and deletions too), and the
// metrics JSON written without nlohmann.
#include <sqlite3.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "master/store/store.h"
#include "master/store/store_internal.h"
#include "master/store/store_test_fixture.h"
#include "nlohmann/json.hpp"

namespace det {
namespace master {
namespace {

MetricRow Row(int64_t trial, int64_t batches, const std::string& group = "training") {
  MetricRow m;
  m.trial_id = trial;
  m.group = group;
  m.total_batches = batches;
  m.metrics = {{"loss", 0.25}};
  return m;
}

class MetricStorageTest : public TempStoreTest {
 protected:
  MetricStorageTest() : TempStoreTest("det_metric_storage_test") {}

  int64_t AddTrial(Store* store) {
    ExperimentRow e;
    e.name = "exp";
    e.state = "ACTIVE";
    auto exp = store->InsertExperiment(e);
    EXPECT_TRUE(exp.ok()) << exp.status();
    TrialRow t;
    t.experiment_id = exp.value_or(0);
    t.state = "ACTIVE";
    auto id = store->InsertTrial(t);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }
  void Reopen() {
    store_.reset();
    auto reopened = Store::Open(path_);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    store_ = std::move(*reopened);
  }
  // Every metric row, one line each, in id order.
  std::string Dump() {
    return RawQueryText(
        "SELECT group_concat(line, char(10)) FROM (SELECT printf('%d|%d|%d|%s|%d|%.17g|%s|%d|%d', id, trial_id, "
        "trial_run_id, metric_group, total_batches, total_epochs, metrics, time_ms, archived) AS line "
        "FROM metrics ORDER BY id)");
  }
  int64_t NewRowId(int64_t trial, int64_t batches) {
    EXPECT_TRUE(store_->InsertMetrics({Row(trial, batches)}).ok());
    return RawQueryInt(absl::StrCat("SELECT id FROM metrics WHERE trial_id = ", trial, " AND total_batches = ",
                                    batches, " AND metric_group = 'training'"));
  }
};

// A version-14 database (metrics with AUTOINCREMENT and four indexes) with
// rows of three trials in four groups, archived rows, ids with gaps and its
// newest rows deleted is migrated: the rows are equal, the indexes are the
// intended three (the groups index partial), ids are no longer
// AUTOINCREMENT and the next id is above every id ever given, then and after
// the newest rows are deleted again and the master restarts.
TEST_F(MetricStorageTest, Migration15KeepsAPopulatedDatabasesRowsAndNeverReusesIds) {
  store_.reset();
  path_ = dir_ + "/v14.db";
  auto old = Store::OpenAtVersionForTest(path_, 14);
  ASSERT_TRUE(old.ok()) << old.status();
  store_ = std::move(*old);
  ASSERT_EQ(store_->SchemaVersion().value_or(-1), 14);
  std::vector<int64_t> trials = {AddTrial(store_.get()), AddTrial(store_.get()), AddTrial(store_.get())};
  std::string sql;
  int64_t id = 0;
  for (int64_t t : trials) {
    for (int64_t b = 1; b <= 40; ++b) {
      for (const char* group : {"training", "validation", "profiling", "system"}) {
        if (std::string(group) != "training" && b % 10 != 0) continue;
        id += 1 + (b % 3);  // gaps
        absl::StrAppend(&sql, "INSERT INTO metrics VALUES (", id, ", ", t, ", ", b > 30 ? 1 : 0, ", '", group, "', ",
                        b, ", ", b * 0.5, ", '{\"loss\":", b, ",\"acc\":\"NaN\"}', ", 1000 + b, ", ",
                        b > 20 && b <= 30 ? 1 : 0, ");");
      }
    }
  }
  RawExec(sql);
  const int64_t largest = id;
  RawExec(absl::StrCat("DELETE FROM metrics WHERE id > ", largest - 20));  // the newest rows go
  ASSERT_EQ(RawQueryInt("SELECT seq FROM sqlite_sequence WHERE name = 'metrics'"), largest);
  const std::string before = Dump();
  const int64_t rows = RawQueryInt("SELECT COUNT(*) FROM metrics");
  ASSERT_GT(rows, 140);  // 3 trials x (40 training + 12 other), less the newest

  Reopen();
  EXPECT_EQ(store_->SchemaVersion().value_or(-1), Store::LatestSchemaVersion());
  EXPECT_EQ(Dump(), before);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics"), rows);
  EXPECT_EQ(RawQueryText("SELECT group_concat(name, ',') FROM (SELECT name FROM sqlite_master WHERE type = 'index' "
                         "AND tbl_name = 'metrics' ORDER BY name)"),
            "metrics_trial_id_id,metrics_trial_id_total_batches_run,metrics_trial_other_groups");
  EXPECT_NE(RawQueryText("SELECT sql FROM sqlite_master WHERE name = 'metrics_trial_other_groups'")
                .find("WHERE metric_group != 'training'"),
            std::string::npos);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM sqlite_master WHERE name = 'metrics' AND sql LIKE '%AUTOINCREMENT%'"), 0);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM sqlite_sequence WHERE name = 'metrics'"), 0);
  // The store reads the kept rows: one group through the partial index.
  auto validation = store_->ListMetrics(trials[1], "validation", /*include_archived=*/true);
  ASSERT_TRUE(validation.ok()) << validation.status();
  ASSERT_EQ(validation->size(), 4u);
  EXPECT_EQ((*validation)[2].total_batches, 30);
  EXPECT_TRUE((*validation)[2].archived);
  EXPECT_TRUE(std::isnan((*validation)[2].metrics.at("acc")));
  auto training = store_->ListMetrics(trials[0], "training", /*include_archived=*/false);
  ASSERT_TRUE(training.ok()) << training.status();
  EXPECT_EQ(training->size(), 30u);

  EXPECT_EQ(NewRowId(trials[0], 100), largest + 1);  // above the deleted newest
  RawExec(absl::StrCat("DELETE FROM metrics WHERE id = ", largest + 1));
  Reopen();
  EXPECT_EQ(NewRowId(trials[0], 101), largest + 2);
}

// The high-water mark of deleted ids outlives a restart: an experiment that
// held the newest ids is deleted, the master restarts, and the next row
// still gets an id above them (a stream's cursor may be there).
TEST_F(MetricStorageTest, IdsAreNeverReusedAfterADeletedExperimentAndARestart) {
  const int64_t keep = AddTrial(store_.get());
  const int64_t gone = AddTrial(store_.get());
  ASSERT_TRUE(store_->InsertMetrics({Row(keep, 1), Row(gone, 1), Row(gone, 2), Row(gone, 3, "validation")}).ok());
  auto newest = store_->MaxMetricId();
  ASSERT_TRUE(newest.ok()) << newest.status();
  const int64_t experiment = RawQueryInt(absl::StrCat("SELECT experiment_id FROM trials WHERE id = ", gone));
  for (;;) {
    auto n = store_->DeleteExperimentDataBatch(experiment, 2);
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 0) break;
  }
  ASSERT_EQ(RawQueryInt("SELECT MAX(id) FROM metrics"), *newest - 3);
  Reopen();
  EXPECT_EQ(NewRowId(keep, 2), *newest + 1);
}

// A row another connection wrote with the id the Store would give next
// (an operator's repair, say) does not make the Store drop a report: it
// counts on from the largest id stored.
TEST_F(MetricStorageTest, AnIdTakenPastTheStoreIsSkippedNotTheReport) {
  const int64_t t = AddTrial(store_.get());
  const int64_t first = NewRowId(t, 1);
  RawExec(absl::StrCat("INSERT INTO metrics VALUES (", first + 1, ", ", t,
                       ", 0, 'validation', 1, 0, '{\"x\":1}', 0, 0)"));
  EXPECT_EQ(NewRowId(t, 2), first + 2);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics"), 3);
  // A re-sent report is still stored once.
  ASSERT_TRUE(store_->InsertMetrics({Row(t, 2)}).ok());
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics"), 3);
}

// The same, with a stream served from the in-memory tail: the row the other
// connection wrote never passed through the tail, so the Store's retry
// invalidates it and the stream reads SQLite; it delivers both rows.
TEST_F(MetricStorageTest, AStreamDeliversARowWrittenPastTheStore) {
  const int64_t t = AddTrial(store_.get());
  const int64_t first = NewRowId(t, 1);
  auto before = store_->ListMetricsAfterId({t}, "", 0, 0);  // the tail now covers the trial
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->size(), 1u);
  const uint64_t tail_reads = store_->MetricTailStats().reads_from_tail;
  ASSERT_TRUE(store_->ListMetricsAfterId({t}, "", first, 0).ok());
  ASSERT_GT(store_->MetricTailStats().reads_from_tail, tail_reads) << "the tail did not answer the poll";
  RawExec(absl::StrCat("INSERT INTO metrics VALUES (", first + 1, ", ", t,
                       ", 0, 'validation', 1, 0, '{\"x\":1}', 0, 0)"));
  EXPECT_EQ(NewRowId(t, 2), first + 2);
  auto after = store_->ListMetricsAfterId({t}, "", first, 0);
  ASSERT_TRUE(after.ok()) << after.status();
  std::vector<int64_t> ids;
  for (const MetricRow& r : *after) ids.push_back(r.id);
  EXPECT_EQ(ids, (std::vector<int64_t>{first + 1, first + 2}));
}

// The plan of `sql` on the test's database, one line per step.
std::string QueryPlan(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string plan;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return "open failed";
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &st, nullptr) != SQLITE_OK) {
    plan = std::string("prepare failed: ") + sqlite3_errmsg(db);
  }
  while (st != nullptr && sqlite3_step(st) == SQLITE_ROW) {
    plan += std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 3))) + "\n";
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return plan;
}

// Migration 15's index of the groups other than training is partial: a query
// of one such group uses it only when it says metric_group != 'training'
// literally. Otherwise it seeks the trial's rows of every group and steps
// over its training rows (a validation chart of a 1M-row trial: 16 -> 74 ms).
TEST_F(MetricStorageTest, QueriesOfAnotherGroupUseItsPartialIndex) {
  using namespace store_internal;  // NOLINT(build/namespaces)
  const std::vector<std::pair<std::string, std::string>> other = {
      {"ScanMetrics", ScanMetricsSql("validation")},
      {"ListMetrics", ListMetricsSql("validation")},
      {"ListExperimentValidations", ExperimentValidationsSql()},
      {"rollup other row", RollupOtherRowSql("validation")},
      {"rollup tail rows", RollupTailRowsSql("validation")},
  };
  for (const auto& [what, sql] : other) {
    const std::string plan = QueryPlan(path_, sql);
    EXPECT_NE(plan.find("USING INDEX metrics_trial_other_groups"), std::string::npos) << what << ":\n" << plan;
  }
  // Training, which the partial index leaves out, is read another way.
  for (const std::string& sql : {std::string(ScanMetricsSql("training")), std::string(ListMetricsSql("training")),
                                 std::string(RollupTailRowsSql("training"))}) {
    const std::string plan = QueryPlan(path_, sql);
    EXPECT_EQ(plan.find("metrics_trial_other_groups"), std::string::npos) << plan;
    EXPECT_NE(plan.find("USING INDEX"), std::string::npos) << plan;
  }
}

// nlohmann's dump of the same object (NaN and the infinities as strings),
// as the master wrote metrics before it had its own writer.
std::string NlohmannEncode(const std::map<std::string, double>& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, v] : metrics) {
    if (std::isnan(v)) {
      j[name] = "NaN";
    } else if (std::isinf(v)) {
      j[name] = v > 0 ? "Infinity" : "-Infinity";
    } else {
      j[name] = v;
    }
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Names as nlohmann escapes them, byte for byte: quotes, backslashes, every
// control character, DEL, non-ASCII UTF-8 (2, 3 and 4 bytes) and ill-formed
// UTF-8 (replaced). Values 0.5 and the non-finite ones are written alike by
// both.
TEST(EncodeMetricsTest, NamesAreEscapedAsNlohmannEscapesThem) {
  std::map<std::string, double> m;
  std::string controls;
  for (int c = 0; c < 0x20; ++c) controls.push_back(static_cast<char>(c));
  for (const std::string& name :
       {std::string("loss"), std::string("a\"b"), std::string("back\\slash"), controls, std::string("del\x7f"),
        std::string("caf\xc3\xa9"), std::string("\xe6\x97\xa5\xe6\x9c\xac"), std::string("\xf0\x9f\x98\x80 smile"),
        std::string("bad\xff"), std::string("overlong\xc0\xaf"), std::string("surrogate\xed\xa0\x80"),
        std::string("cut\xe6\x97"), std::string(""), std::string("/slash<>&'")}) {
    m[name] = 0.5;
  }
  m["nan"] = std::nan("");
  m["inf"] = std::numeric_limits<double>::infinity();
  m["-inf"] = -std::numeric_limits<double>::infinity();
  EXPECT_EQ(store_internal::EncodeMetrics(m), NlohmannEncode(m));
  // One name at a time too (a difference names its name).
  for (const auto& [name, v] : m) {
    std::map<std::string, double> one = {{name, v}};
    EXPECT_EQ(store_internal::EncodeMetrics(one), NlohmannEncode(one)) << absl::CEscape(name);
  }
}

// Grouped metric commits keep their savepoints' journal in memory (store.cc,
// kStatementJournalSpillBytes): with SQLite's default bound, 64 KiB, each
// commit that changed that many existing pages created, wrote, unlinked and
// closed a temp file. The trial's b-trees are grown first, so that later
// reports spread over existing pages; inotify sees every file SQLite
// creates in its temp directory, even one unlinked at once.
TEST_F(MetricStorageTest, GroupedCommitsCreateNoTempFiles) {
  const int64_t trial = AddTrial(store_.get());
  auto call = [&](int64_t first, int64_t step) {
    std::vector<MetricRow> rows;
    for (int64_t i = 0; i < 1000; ++i) {
      MetricRow m = Row(trial, first + i * step);
      m.metrics["accuracy"] = 0.5;
      rows.push_back(std::move(m));
    }
    return store_->InsertMetricsGrouped(rows);
  };
  for (int64_t c = 0; c < 20; ++c) ASSERT_TRUE(call(c * 2000, 2).ok());  // even batches
  const std::string tmp = dir_ + "/sqlite_tmp";
  ASSERT_EQ(mkdir(tmp.c_str(), 0700), 0);
  struct TempDirectory {  // SQLite's, for this scope (also when an ASSERT returns)
    char* const saved = sqlite3_temp_directory;
    explicit TempDirectory(const std::string& dir) { sqlite3_temp_directory = sqlite3_mprintf("%s", dir.c_str()); }
    ~TempDirectory() {
      sqlite3_free(sqlite3_temp_directory);
      sqlite3_temp_directory = saved;
    }
  } temp_directory(tmp);
  const int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(inotify_add_watch(watch, tmp.c_str(), IN_CREATE), 0);
  for (int64_t c = 0; c < 20; ++c) ASSERT_TRUE(call(c * 2000 + 1, 2).ok());  // odd ones, between them
  char events[4096];
  const ssize_t n = read(watch, events, sizeof events);
  const int read_errno = errno;
  close(watch);
  EXPECT_EQ(n, -1) << "SQLite created a file in " << tmp << ": "
                   << (n > 0 ? reinterpret_cast<inotify_event*>(events)->name : "");
  EXPECT_EQ(read_errno, EAGAIN);
  EXPECT_EQ(RawQueryInt(absl::StrCat("SELECT COUNT(*) FROM metrics WHERE trial_id = ", trial)), 40000);
}

// DecodeMetrics reads EncodeMetrics' text without nlohmann: on every text,
// valid or not, it gives what nlohmann's reading gave (the same values, or
// an error), so rows written by older masters and odd names decode as
// before. The texts: encodings of random rows, hand-picked edge cases, and
// random byte edits of both.
TEST(DecodeMetricsTest, AgreesWithNlohmannOnEveryText) {
  std::mt19937_64 rng(5050);
  std::vector<std::string> texts = {
      "{}", "{ }", "{\"a\":1}", "{\"a\":1,}", "{\"a\":01}", "{\"a\":1.}", "{\"a\":.5}", "{\"a\":-}", "{\"a\":1e}",
      "{\"a\":1e400}", "{\"a\":-1e400}", "{\"a\":1e-400}", "{\"a\":\"NaN\",\"b\":\"Infinity\",\"c\":\"-Infinity\"}",
      "{\"a\":\"nan\"}", "{\"a\":true}", "{\"a\":null}", "{\"a\":1,\"a\":2}", "{\"a\\\"b\":1}", "{\"\xc3\xa9\":1}",
      "[1]", "", "{\"a\":1}x", "{\"a\":1", "{\"a\"1}", "{\"a\":-0}", "{\"a\":9007199254740993}",
      "{\"a\":123456789012345678901234}", "{\"a\":1E5}", "{\"a\":1e+5}", "{\"a\":{\"b\":1}}", "{\"a\":[1]}",
      "{\"\":2}", "{\"a\": 1}", "{\"a\":+1}", "{\"a\":0x10}", "{\"a\":Infinity}", "{\"a\":\"Infinity\" }",
      "{\"a\":4.9e-324,\"b\":2.2250738585072014e-308,\"c\":1.7976931348623157e308}"};
  const std::string name_chars = "ab_/.:- \"\\\n\x7f\xc3\xa9";
  for (int i = 0; i < 300; ++i) {
    std::map<std::string, double> m;
    for (int k = 0, n = static_cast<int>(rng() % 5); k < n; ++k) {
      std::string name;
      for (int c = 0, len = static_cast<int>(rng() % 6); c < len; ++c) {
        name.push_back(name_chars[rng() % name_chars.size()]);
      }
      const uint64_t bits = rng();
      double v;
      std::memcpy(&v, &bits, sizeof v);
      if (rng() % 2) v = static_cast<double>(static_cast<int64_t>(rng() % 20001) - 10000) / 100.0;
      m[name] = v;
    }
    texts.push_back(store_internal::EncodeMetrics(m));
  }
  for (size_t i = 0, base = texts.size(); i < 3000; ++i) {
    std::string t = texts[rng() % base];
    if (t.empty()) continue;
    const size_t at = rng() % t.size();
    switch (rng() % 3) {
      case 0: t[at] = "{}\":,-.e0159 \\N"[rng() % 15]; break;
      case 1: t.erase(at, 1); break;
      default: t.insert(at, 1, "{}\":,-.e0159 \\N"[rng() % 15]); break;
    }
    texts.push_back(t);
  }
  auto same = [](double a, double b) {  // the sign of a zero too
    return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
  };
  for (const std::string& t : texts) {
    auto fast = store_internal::DecodeMetrics(t);
    auto reference = store_internal::DecodeMetricsWithNlohmannForTest(t);
    ASSERT_EQ(fast.ok(), reference.ok()) << t << ": " << fast.status() << " / " << reference.status();
    if (!fast.ok()) {
      EXPECT_EQ(fast.status(), reference.status()) << t;
      continue;
    }
    ASSERT_EQ(fast->size(), reference->size()) << t;
    for (const auto& [name, v] : *reference) {
      auto it = fast->find(name);
      ASSERT_NE(it, fast->end()) << t << ": " << name;
      EXPECT_TRUE(same(it->second, v)) << t << ": " << name << " " << it->second << " vs " << v;
    }
  }
}

// Every finite value reads back as the same double, by nlohmann's parser and
// by DecodeMetrics; and the text is never longer than nlohmann's.
TEST(EncodeMetricsTest, ValuesReadBackExactly) {
  std::mt19937_64 rng(50);
  std::vector<double> values = {0.0, -0.0, 1.0, -1.0, 100.0, 0.1, 1.0 / 3, 1e-300, 5e-324, 1e308,
                                std::numeric_limits<double>::max(), std::numeric_limits<double>::min(),
                                9007199254740993.0, 1e15, 1e16, 1e21, 1e-5, 123456.789};
  for (int i = 0; i < 20000; ++i) {
    const uint64_t bits = rng();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isfinite(v)) values.push_back(v);
    values.push_back(static_cast<double>(static_cast<int64_t>(rng() % 2000001) - 1000000) / 1000.0);
  }
  for (double v : values) {
    const std::map<std::string, double> m = {{"v", v}};
    const std::string text = store_internal::EncodeMetrics(m);
    nlohmann::json j = nlohmann::json::parse(text);
    ASSERT_EQ(j["v"].get<double>(), v) << text;
    auto decoded = store_internal::DecodeMetrics(text);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    ASSERT_EQ(decoded->at("v"), v) << text;
    ASSERT_LE(text.size(), NlohmannEncode(m).size()) << text;
  }
}

}  // namespace
}  // namespace master
}  // namespace det
