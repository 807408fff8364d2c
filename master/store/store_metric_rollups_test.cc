// Chart rollups kept at ingestion (issue 50; metric_rollups.h, migration 16):
// what the store writes equals the blocks recomputed from the stored rows,
// across restarts, archives (a trial restarted from an earlier checkpoint),
// out-of-order reports and NaNs; a trial stored before migration 16 gets
// none (charts scan it).
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "master/store/metric_rollups.h"
#include "master/store/store.h"
#include "master/store/store_test_fixture.h"

namespace det {
namespace master {
namespace {

class MetricRollupStoreTest : public TempStoreTest {
 protected:
  MetricRollupStoreTest() : TempStoreTest("det_metric_rollup_store_test") {}

  // A training report of run 1 at batch b with two metrics, loss and acc.
  static MetricRow LossAccRow(int64_t trial_id, int64_t b) {
    MetricRow m;
    m.trial_id = trial_id;
    m.trial_run_id = 1;
    m.group = "training";
    m.total_batches = b;
    m.metrics = {{"loss", static_cast<double>(b % 97)}, {"acc", static_cast<double>(b % 31)}};
    return m;
  }
  int64_t AddTrial() {
    ExperimentRow e;
    e.name = "exp";
    e.state = "ACTIVE";
    auto exp = store_->InsertExperiment(e);
    EXPECT_TRUE(exp.ok()) << exp.status();
    TrialRow t;
    t.experiment_id = exp.value_or(0);
    t.state = "ACTIVE";
    auto id = store_->InsertTrial(t);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }
  void Reopen() {
    store_.reset();
    auto reopened = Store::Open(path_);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    store_ = std::move(*reopened);
  }
  // Training rows [from, to) of run `run` (values with ties and NaNs; `acc`
  // missing from every fifth) and a validation row every tenth batch,
  // inserted 300 at a time.
  void Report(int64_t trial, int64_t run, int64_t from, int64_t to) {
    std::vector<MetricRow> rows;
    for (int64_t b = from; b < to; ++b) {
      MetricRow m;
      m.trial_id = trial;
      m.trial_run_id = run;
      m.group = "training";
      m.total_batches = b;
      m.metrics["loss"] = static_cast<double>((b * 7919 + run) % 101) / 4;  // many ties
      if (b % 5 != 0) m.metrics["acc"] = b % 13 == 0 ? std::nan("") : std::sin(static_cast<double>(b));
      if (b % 7 == 0) m.metrics["acc_inf"] = b % 2 ? INFINITY : -INFINITY;
      rows.push_back(m);
      if (b % 10 == 0) {
        MetricRow v = m;
        v.group = "validation";
        v.metrics = {{"vloss", b % 3 == 0 ? std::nan("") : static_cast<double>(b % 17)}};
        rows.push_back(v);
      }
      if (rows.size() >= 300 || b + 1 == to) {
        ASSERT_TRUE(store_->InsertMetrics(rows).ok());
        rows.clear();
      }
    }
  }
  static std::string Value(double y) {
    if (std::isnan(y)) return "NaN";
    if (std::isinf(y)) return y > 0 ? "Inf" : "-Inf";
    char buf[64];
    snprintf(buf, sizeof buf, "%.17g", y);
    return buf;
  }
  static std::string Line(const std::string& group, const std::string& name, int64_t width, int64_t block,
                          int64_t lo_id, double lo, int64_t hi_id, double hi, int64_t last_batches, int64_t last_id) {
    return absl::StrCat(group, "|", name, "|", width, "|", block, "|", lo_id, "|", Value(lo), "|", hi_id, "|",
                        Value(hi), "|", last_batches, "|", last_id);
  }
  // Every row of metric_rollups of `trial` but the group markers, one line
  // each, in key order (a NULL value reads as NaN).
  std::string Stored(int64_t trial) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db,
                                 "SELECT metric_group, name, width, block, lo_id, lo, hi_id, hi, last_batches, "
                                 "last_id FROM metric_rollups WHERE trial_id = ? AND name != '' ORDER BY "
                                 "metric_group, name, width, block",
                                 -1, &st, nullptr),
              SQLITE_OK);
    sqlite3_bind_int64(st, 1, trial);
    auto real = [st](int i) {
      return sqlite3_column_type(st, i) == SQLITE_NULL ? std::nan("") : sqlite3_column_double(st, i);
    };
    std::string out;
    while (sqlite3_step(st) == SQLITE_ROW) {
      if (!out.empty()) out += "\n";
      out += Line(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)),
                  reinterpret_cast<const char*>(sqlite3_column_text(st, 1)), sqlite3_column_int64(st, 2),
                  sqlite3_column_int64(st, 3), sqlite3_column_int64(st, 4), real(5), sqlite3_column_int64(st, 6),
                  real(7), sqlite3_column_int64(st, 8), sqlite3_column_int64(st, 9));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return out;
  }
  int64_t GroupMarkers(int64_t trial) {
    return RawQueryInt(
        absl::StrCat("SELECT COUNT(*) FROM metric_rollups WHERE width = 0 AND name = '' AND trial_id = ", trial));
  }
  // The same lines recomputed from the unarchived rows: the series markers
  // and every closed block of every width.
  std::string Expected(int64_t trial) {
    struct Line {  // a line of Stored()
      std::string group, name;
      int64_t width, block, lo_id;
      double lo;
      int64_t hi_id;
      double hi;
      int64_t last_batches, last_id;
    };
    std::vector<Line> lines;
    for (const std::string group : {"training", "validation"}) {
      auto rows = store_->ListMetrics(trial, group, /*include_archived=*/false, -1, 0);
      EXPECT_TRUE(rows.ok()) << rows.status();
      if (!rows.ok() || rows->empty()) continue;
      std::map<std::string, std::vector<const MetricRow*>> series;
      for (const MetricRow& r : *rows) {
        for (const auto& [name, y] : r.metrics) series[name].push_back(&r);
      }
      for (const auto& [name, points] : series) {
        const MetricRow& f = *points.front();
        lines.push_back({group, name, 0, 0, f.id, 0, f.id, 0, f.total_batches, f.id});
        for (int64_t w : kRollupWidths) {
          for (size_t k = 0; (k + 1) * static_cast<size_t>(w) <= points.size(); ++k) {
            PointExtremes e;
            for (size_t i = k * w; i < (k + 1) * w; ++i) e.Add(points[i]->id, points[i]->metrics.at(name));
            const MetricRow& last = *points[(k + 1) * w - 1];
            lines.push_back({group, name, w, static_cast<int64_t>(k), e.lo, e.lo_y, e.hi, e.hi_y,
                             last.total_batches, last.id});
          }
        }
      }
    }
    std::sort(lines.begin(), lines.end(), [](const Line& a, const Line& b) {
      return std::tie(a.group, a.name, a.width, a.block) < std::tie(b.group, b.name, b.width, b.block);
    });
    std::string out;
    for (const Line& l : lines) {
      if (!out.empty()) out += "\n";
      out += MetricRollupStoreTest::Line(l.group, l.name, l.width, l.block, l.lo_id, l.lo, l.hi_id, l.hi,
                                         l.last_batches, l.last_id);
    }
    return out;
  }
};

// 13,000 training reports (3 names, NaNs, ties, infinities) and their
// validation reports, with restarts in the middle of open blocks, a restart
// from an earlier checkpoint (the reports after it archived and sent again
// by a new run), and validation reports that arrive out of order: the
// stored rollups are exactly the blocks recomputed from the rows.
TEST_F(MetricRollupStoreTest, StoredBlocksEqualTheBlocksOfTheStoredRowsAcrossRestartsAndArchives) {
  const int64_t trial = AddTrial();
  Report(trial, 1, 0, 5000);
  Reopen();  // mid-block at every width
  Report(trial, 1, 5000, 9100);
  ASSERT_TRUE(store_->ArchiveMetricsAfter(trial, 4321).ok());  // restart from the checkpoint at 4321
  EXPECT_EQ(Stored(trial), Expected(trial));  // no block past the checkpoint is left
  Report(trial, 2, 4322, 8000);
  Reopen();
  Report(trial, 2, 8000, 13000);
  // Validation reports behind the last one (not archived): out of order.
  std::vector<MetricRow> late;
  for (int64_t b : {12345, 12999, 7001}) {
    MetricRow v;
    v.trial_id = trial;
    v.trial_run_id = 3;
    v.group = "validation";
    v.total_batches = b;
    v.metrics = {{"vloss", -1.0 - b}};
    late.push_back(v);
  }
  ASSERT_TRUE(store_->InsertMetrics(late).ok());
  Report(trial, 2, 13000, 13100);
  const std::string expected = Expected(trial);
  ASSERT_GT(std::count(expected.begin(), expected.end(), '\n'), 300);
  EXPECT_EQ(Stored(trial), expected);
  Reopen();
  Report(trial, 2, 13100, 13300);
  EXPECT_EQ(Stored(trial), Expected(trial));
  EXPECT_EQ(GroupMarkers(trial), 2);
}

// A call whose rows reach a held series out of order (another client of the
// same trial, or a hostile one) rebuilds that series once, not once a row,
// and the blocks still equal the ones recomputed from the rows.
TEST_F(MetricRollupStoreTest, AnOutOfOrderCallRebuildsEachSeriesOnce) {
  const int64_t trial = AddTrial();
  std::vector<MetricRow> rows;
  auto row = [&](int64_t b) { return LossAccRow(trial, b); };
  for (int64_t b = 0; b < 6000; b += 2) rows.push_back(row(b));  // even batches, in order
  ASSERT_TRUE(store_->InsertMetrics(rows).ok());
  rows.clear();
  for (int64_t b = 1001; b < 1400; b += 2) rows.push_back(row(b));  // 200 odd ones, all behind
  const uint64_t before = store_->RollupRebuilds();
  ASSERT_TRUE(store_->InsertMetrics(rows).ok());
  EXPECT_EQ(store_->RollupRebuilds() - before, 2u) << "one rebuild per series (loss, acc), not per row";
  EXPECT_EQ(Stored(trial), Expected(trial));
  // In order first, then behind in falling and rising order: the earliest
  // row of the call is where the blocks are recomputed from.
  rows.clear();
  for (int64_t b : {6001, 6003, 1501, 801, 1503, 6005, 3}) rows.push_back(row(b));
  ASSERT_TRUE(store_->InsertMetrics(rows).ok());
  EXPECT_EQ(Stored(trial), Expected(trial));
  // After a restart no series is held: a row behind the last stored block
  // drops the blocks from it on, as for a held series.
  Reopen();
  ASSERT_TRUE(store_->InsertMetrics({row(2001)}).ok());
  EXPECT_EQ(Stored(trial), Expected(trial));
  ASSERT_TRUE(store_->InsertMetrics({row(6007)}).ok());
  EXPECT_EQ(Stored(trial), Expected(trial));
}

// The metric writer's group (several reporters of one trial at once, each
// behind the others) rebuilds each series once for the whole group, after
// every call's rows; a failing call of the group changes nothing of that.
TEST_F(MetricRollupStoreTest, AGroupOfOutOfOrderCallsRebuildsEachSeriesOnce) {
  const int64_t trial = AddTrial();
  std::vector<MetricRow> first;
  for (int64_t b = 0; b < 4000; b += 4) first.push_back(LossAccRow(trial, b));
  ASSERT_TRUE(store_->InsertMetrics(first).ok());
  // Four calls of 100 rows, interleaved as 4 concurrent clients send them:
  // each lands behind rows already stored; the third names no trial.
  std::vector<std::vector<MetricRow>> calls(4);
  for (int64_t k = 0; k < 400; ++k) calls[k % 4].push_back(LossAccRow(trial, 1000 + 4 * k + 1 + k % 3));
  calls[2].push_back(LossAccRow(9999, 5));
  const uint64_t before = store_->RollupRebuilds();
  const std::vector<absl::Status> statuses = StoreGroupPeer::CommitMetricGroup(store_.get(), calls);
  ASSERT_EQ(statuses.size(), 4u);
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_FALSE(statuses[2].ok());
  EXPECT_TRUE(statuses[3].ok()) << statuses[3];
  EXPECT_EQ(store_->RollupRebuilds() - before, 2u) << "one rebuild per series (loss, acc) for the group";
  EXPECT_EQ(store_->RollupOutOfOrderRebuilds(), 2u);
  EXPECT_EQ(Stored(trial), Expected(trial));
  // Held again after the rebuild: a row in order folds without one.
  ASSERT_TRUE(store_->InsertMetrics({LossAccRow(trial, 5000)}).ok());
  EXPECT_EQ(store_->RollupRebuilds() - before, 2u);
  EXPECT_EQ(Stored(trial), Expected(trial));
  // A failing call holds the group's earliest row of a series: its rows are
  // rolled back, so the rebuild must not start from that row (nor name it
  // as the series' first), and a call that was refused changes no block.
  const int64_t fresh = AddTrial();
  std::vector<MetricRow> later;
  for (int64_t b = 100; b <= 4096; b += 4) later.push_back(LossAccRow(fresh, b));
  ASSERT_TRUE(store_->InsertMetrics(later).ok());
  const std::string blocks = Stored(fresh);
  const uint64_t before_refused = store_->RollupRebuilds();
  const std::vector<absl::Status> refused =
      StoreGroupPeer::CommitMetricGroup(store_.get(), {{LossAccRow(fresh, 50), LossAccRow(9999, 5)}});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_FALSE(refused[0].ok());
  EXPECT_EQ(store_->RollupRebuilds() - before_refused, 0u);
  EXPECT_EQ(Stored(fresh), blocks);
  EXPECT_EQ(Stored(fresh), Expected(fresh));
  // Beside a call that succeeds out of order, the same.
  const std::vector<absl::Status> mixed = StoreGroupPeer::CommitMetricGroup(
      store_.get(), {{LossAccRow(fresh, 30), LossAccRow(9999, 5)}, {LossAccRow(fresh, 2001)}});
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_FALSE(mixed[0].ok());
  EXPECT_TRUE(mixed[1].ok()) << mixed[1];
  EXPECT_EQ(Stored(fresh), Expected(fresh));
}

// A trial with reports in flight together (det-trial's report queue) may
// have them queued out of order: the writer puts one series' calls in batch
// order, so nothing is rebuilt. Another trial's calls and a second group of
// the same trial keep their own order beside them.
TEST_F(MetricRollupStoreTest, AGroupWritesEachSeriesCallsInBatchOrder) {
  const int64_t trial = AddTrial(), other = AddTrial();
  std::vector<MetricRow> first;
  for (int64_t b = 0; b < 400; b += 4) first.push_back(LossAccRow(trial, b));
  // Every series held before the group (a series seen first is loaded, which counts as a rebuild).
  first.push_back(LossAccRow(other, 0));
  MetricRow validation = LossAccRow(trial, 0);
  validation.group = "validation";
  first.push_back(validation);
  ASSERT_TRUE(store_->InsertMetrics(first).ok());
  auto call = [&](int64_t t, int64_t from, const std::string& group = "training") {
    std::vector<MetricRow> rows;
    for (int64_t b = from; b < from + 196; b += 4) {
      rows.push_back(LossAccRow(t, b));
      rows.back().group = group;
    }
    return rows;
  };
  const uint64_t before = store_->RollupRebuilds();
  const std::vector<absl::Status> statuses = StoreGroupPeer::CommitMetricGroup(
      store_.get(), {call(trial, 800), call(other, 200), call(trial, 400, "validation"), call(trial, 600),
                     call(other, 4), call(trial, 400), call(trial, 4, "validation")});
  ASSERT_EQ(statuses.size(), 7u);
  for (const absl::Status& s : statuses) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(store_->RollupRebuilds() - before, 0u) << "every call extended its series in order";
  EXPECT_EQ(store_->RollupOutOfOrderRebuilds(), 0u);
  EXPECT_EQ(Stored(trial), Expected(trial));
  EXPECT_EQ(Stored(other), Expected(other));
  // The stored ids follow the batches within each series, as a stream reads them.
  EXPECT_EQ(RawQueryInt(absl::StrCat("SELECT COUNT(*) FROM metrics a JOIN metrics b ON b.trial_id = a.trial_id AND "
                                     "b.metric_group = a.metric_group AND b.id > a.id AND b.total_batches < "
                                     "a.total_batches WHERE a.trial_id IN (",
                                     trial, ", ", other, ")")),
            0);
}

// Migration 16 on a populated version-15 database: the new table starts
// empty; a trial whose rows were stored before it (no group marker) gets no
// rollups, also after the master restarts (charts scan it); a trial created
// after it gets them, and so does one whose every row was archived.
TEST_F(MetricRollupStoreTest, Migration16OnAPopulatedDatabaseKeepsNoRollupsForOlderTrials) {
  store_.reset();
  path_ = dir_ + "/v15.db";
  auto old = Store::OpenAtVersionForTest(path_, 15);
  ASSERT_TRUE(old.ok()) << old.status();
  store_ = std::move(*old);
  ASSERT_EQ(store_->SchemaVersion().value_or(-1), 15);
  const int64_t old_trial = AddTrial(), archived = AddTrial();
  std::string sql = "BEGIN;";
  int64_t id = 0;
  for (int64_t t : {old_trial, archived}) {
    for (int64_t b = 0; b < 700; ++b) {
      absl::StrAppend(&sql, "INSERT INTO metrics(id, trial_id, trial_run_id, metric_group, total_batches, "
                      "total_epochs, metrics, time_ms, archived) VALUES (", ++id, ", ", t, ", 1, 'training', ", b,
                      ", 0, '{\"loss\":", b % 11, "}', 0, 0);");
    }
  }
  RawExec(sql + "COMMIT;");
  store_.reset();
  const auto start = std::chrono::steady_clock::now();
  Reopen();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ timing ] open with migration 16 of a 1,400-row database: %.1f ms\n", ms);
  ASSERT_EQ(store_->SchemaVersion().value_or(-1), 16);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metric_rollups"), 0);
  EXPECT_EQ(RawQueryInt("SELECT COUNT(*) FROM metrics"), 1400);
  Report(old_trial, 1, 700, 1000);
  Reopen();
  Report(old_trial, 1, 1000, 1100);
  // Its training group began before the migration; its validation group after.
  EXPECT_EQ(RawQueryInt(absl::StrCat("SELECT COUNT(*) FROM metric_rollups WHERE metric_group = 'training' AND "
                                     "trial_id = ", old_trial)),
            0);
  EXPECT_EQ(RawQueryInt(absl::StrCat("SELECT COUNT(*) FROM metric_rollups WHERE metric_group = 'validation' AND "
                                     "trial_id = ", old_trial)),
            2);
  ASSERT_TRUE(store_->ArchiveMetricsAfter(archived, -1).ok());
  Report(archived, 2, 0, 300);
  const int64_t fresh = AddTrial();
  Report(fresh, 1, 0, 300);
  for (int64_t t : {archived, fresh}) {
    EXPECT_EQ(Stored(t), Expected(t)) << "trial " << t;
    EXPECT_EQ(GroupMarkers(t), 2) << "trial " << t;
  }
}

}  // namespace
}  // namespace master
}  // namespace det
