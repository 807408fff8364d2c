// Store::ListMetricsAfterId fed from the committed tail (issue 50): for a
// deterministic random interleaving of inserts (single, grouped with failing
// calls, inside rolled-back transactions, re-sent duplicates, a whole
// transaction SQLite rolls back), archives, experiment deletes and restarts,
// every answer equals the SQL over the committed database, and most are
// answered by the tail.
#include <sqlite3.h>

#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "master/store/store.h"
#include "master/store/store_internal.h"
#include "master/store/store_test_fixture.h"

namespace det {
namespace master {

namespace {

class StoreMetricTailTest : public TempStoreTest {
 protected:
  StoreMetricTailTest() : TempStoreTest("det_store_metric_tail_test") {}

  void TearDown() override {
    if (raw_ != nullptr) sqlite3_close(raw_);
    TempStoreTest::TearDown();
  }

  int64_t AddTrial() {
    ExperimentRow e;
    e.name = "tail";
    e.state = "ACTIVE";
    const int64_t exp = store_->InsertExperiment(e).value();
    TrialRow t;
    t.experiment_id = exp;
    t.state = "ACTIVE";
    const int64_t trial = store_->InsertTrial(t).value();
    experiment_of_[trial] = exp;
    return trial;
  }

  MetricRow RandomRow() {
    MetricRow m;
    if (rng_() % 20 == 0) {
      m.trial_id = 999999;  // no such trial: its call fails and rolls back alone
    } else {
      m.trial_id = trials_[rng_() % trials_.size()];
    }
    m.group = rng_() % 3 == 0 ? "validation" : "training";
    m.trial_run_id = static_cast<int64_t>(rng_() % 2);
    m.total_batches = rng_() % 8 == 0 ? static_cast<int64_t>(rng_() % 5) : ++batches_;  // some re-sent
    if (rng_() % 50 == 0) m.total_batches = 666;  // the trigger rolls back the whole transaction
    m.total_epochs = static_cast<double>(rng_() % 1000) / 7;
    m.time_ms = 1000 + static_cast<int64_t>(rng_() % 100000);
    m.archived = rng_() % 25 == 0;
    m.metrics = {{"loss", static_cast<double>(rng_() % 100000) / 13}};
    if (rng_() % 10 == 0) m.metrics["acc"] = std::numeric_limits<double>::quiet_NaN();
    return m;
  }
  std::vector<MetricRow> RandomRows() {
    std::vector<MetricRow> rows;
    const size_t n = 1 + rng_() % 5;
    for (size_t i = 0; i < n; ++i) rows.push_back(RandomRow());
    return rows;
  }

  // The committed rows the SQL of ListMetricsAfterId selects, on a
  // connection of its own.
  std::vector<MetricRow> Expected(const std::vector<int64_t>& trials, const std::string& group, int64_t after_id,
                                  int64_t limit) {
    if (raw_ == nullptr) {
      EXPECT_EQ(sqlite3_open(path_.c_str(), &raw_), SQLITE_OK);
    }
    std::string in;
    for (int64_t t : trials) absl::StrAppend(&in, in.empty() ? "" : ",", t);
    const std::string sql = absl::StrCat(
        "SELECT id, trial_id, trial_run_id, metric_group, total_batches, total_epochs, metrics, time_ms, archived "
        "FROM metrics WHERE id > ",
        after_id, " AND trial_id IN (", in, ")", group.empty() ? "" : " AND metric_group = '" + group + "'",
        " ORDER BY id LIMIT ", limit > 0 ? limit : -1);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(raw_, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(raw_);
    std::vector<MetricRow> out;
    while (sqlite3_step(st) == SQLITE_ROW) {
      MetricRow r;
      r.id = sqlite3_column_int64(st, 0);
      r.trial_id = sqlite3_column_int64(st, 1);
      r.trial_run_id = sqlite3_column_int64(st, 2);
      r.group = reinterpret_cast<const char*>(sqlite3_column_text(st, 3));
      r.total_batches = sqlite3_column_int64(st, 4);
      r.total_epochs = sqlite3_column_double(st, 5);
      r.metrics = store_internal::DecodeMetrics(reinterpret_cast<const char*>(sqlite3_column_text(st, 6))).value();
      r.time_ms = sqlite3_column_int64(st, 7);
      r.archived = sqlite3_column_int64(st, 8) != 0;
      out.push_back(r);
    }
    sqlite3_finalize(st);
    return out;
  }

  static std::string Show(const MetricRow& r) {
    return absl::StrCat(r.id, " t", r.trial_id, " run", r.trial_run_id, " ", r.group, " b", r.total_batches, " e",
                        r.total_epochs, " ", store_internal::EncodeMetrics(r.metrics), " ms", r.time_ms,
                        r.archived ? " archived" : "");
  }

  // One random poll, compared with the SQL.
  void CheckOnePoll(int step) {
    std::vector<int64_t> trials;
    for (int64_t t : trials_) {
      if (rng_() % 2 == 0) trials.push_back(t);
    }
    if (trials.empty()) trials.push_back(trials_[0]);
    const std::string groups[] = {"", "training", "validation"};
    const std::string group = groups[rng_() % 3];
    const int64_t max_id = store_->MaxMetricId().value();
    int64_t after = max_id - static_cast<int64_t>(rng_() % 12);
    if (rng_() % 10 == 0) after = static_cast<int64_t>(rng_() % (max_id + 1));
    if (after < 0) after = 0;
    const int64_t limit = rng_() % 3 == 0 ? 1 + static_cast<int64_t>(rng_() % 4) : 0;
    auto got = store_->ListMetricsAfterId(trials, group, after, limit);
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<MetricRow> want = Expected(trials, group, after, limit);
    std::string got_text, want_text;
    for (const MetricRow& r : *got) absl::StrAppend(&got_text, Show(r), "\n");
    for (const MetricRow& r : want) absl::StrAppend(&want_text, Show(r), "\n");
    ASSERT_EQ(got_text, want_text) << "step " << step << ", after_id " << after << ", group '" << group
                                   << "', limit " << limit;
  }

  void RandomStep() {
    switch (rng_() % 10) {
      case 0:
      case 1:
      case 2:
        (void)store_->InsertMetrics(RandomRows());
        break;
      case 3:
      case 4: {
        std::vector<std::vector<MetricRow>> calls;
        const size_t n = 1 + rng_() % 3;
        for (size_t i = 0; i < n; ++i) calls.push_back(RandomRows());
        StoreGroupPeer::CommitMetricGroup(store_.get(), calls);
        break;
      }
      case 5: {  // inside a Store::Transaction, committed or rolled back
        Store::Transaction txn(store_.get());
        (void)store_->InsertMetrics(RandomRows());
        (void)store_->InsertMetrics(RandomRows());
        if (rng_() % 2 == 0) (void)txn.Commit();
        break;
      }
      case 6:
        ASSERT_TRUE(store_->ArchiveMetricsAfter(trials_[rng_() % trials_.size()], batches_ - 3).ok());
        break;
      case 7:
        if (rng_() % 3 == 0) DeleteATrial();
        break;
      case 8:
        if (rng_() % 4 == 0) Restart();
        break;
      default:
        (void)store_->InsertMetricsGrouped(RandomRows());
    }
  }

  void DeleteATrial() {
    const size_t i = rng_() % trials_.size();
    const int64_t exp = experiment_of_[trials_[i]];
    for (;;) {
      auto n = store_->DeleteExperimentDataBatch(exp, 7);
      ASSERT_TRUE(n.ok()) << n.status();
      if (*n == 0) break;
    }
    ASSERT_TRUE(store_->DeleteExperimentRow(exp).ok());
    trials_[i] = AddTrial();
  }

  void Restart() {
    store_.reset();
    auto store = Store::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  std::mt19937 rng_{50};
  std::vector<int64_t> trials_;
  std::map<int64_t, int64_t> experiment_of_;
  int64_t batches_ = 0;
  sqlite3* raw_ = nullptr;
};

TEST_F(StoreMetricTailTest, StreamAnswersFromTheTailEqualTheSqlForRandomInterleavings) {
  for (int i = 0; i < 4; ++i) trials_.push_back(AddTrial());
  RawExec("CREATE TRIGGER boom BEFORE INSERT ON metrics WHEN NEW.total_batches = 666 "
          "BEGIN SELECT RAISE(ROLLBACK, 'boom'); END");
  uint64_t from_tail = 0, not_covered = 0;
  for (int step = 0; step < 400; ++step) {
    ASSERT_NO_FATAL_FAILURE(RandomStep()) << "step " << step;
    const uint64_t before = store_->MetricTailStats().reads_from_tail;
    const uint64_t before_nc = store_->MetricTailStats().reads_not_covered;
    for (int q = 0; q < 4; ++q) ASSERT_NO_FATAL_FAILURE(CheckOnePoll(step));
    from_tail += store_->MetricTailStats().reads_from_tail - before;
    not_covered += store_->MetricTailStats().reads_not_covered - before_nc;
  }
  std::printf("polls answered from the tail: %llu, from SQLite: %llu\n", static_cast<unsigned long long>(from_tail),
              static_cast<unsigned long long>(not_covered));
  EXPECT_GT(store_->MaxMetricId().value(), 500);
  // Both paths ran; the tail answered most polls (the cursors stay near the head).
  EXPECT_GT(from_tail, 800u) << "from the tail: " << from_tail << ", from SQLite: " << not_covered;
  EXPECT_GT(not_covered, 50u) << "from the tail: " << from_tail << ", from SQLite: " << not_covered;
}

// After a restart the tail starts at the largest stored id: a stream at the
// head is answered without SQLite, one behind it reads SQLite.
TEST_F(StoreMetricTailTest, AfterARestartStreamsAtTheHeadReadTheTailAndOthersSqlite) {
  trials_.push_back(AddTrial());
  MetricRow m;
  m.trial_id = trials_[0];
  m.group = "training";
  m.metrics = {{"loss", 1}};
  for (int i = 1; i <= 5; ++i) {
    m.total_batches = i;
    ASSERT_TRUE(store_->InsertMetrics({m}).ok());
  }
  Restart();
  const int64_t head = store_->MaxMetricId().value();
  auto behind = store_->ListMetricsAfterId(trials_, "", head - 2, 0);
  ASSERT_TRUE(behind.ok());
  EXPECT_EQ(behind->size(), 2u);
  EXPECT_EQ(store_->MetricTailStats().reads_not_covered, 1u);
  m.total_batches = 6;
  ASSERT_TRUE(store_->InsertMetrics({m}).ok());
  auto at_head = store_->ListMetricsAfterId(trials_, "", head, 0);
  ASSERT_TRUE(at_head.ok());
  ASSERT_EQ(at_head->size(), 1u);
  EXPECT_EQ((*at_head)[0].total_batches, 6);
  EXPECT_EQ(store_->MetricTailStats().reads_from_tail, 1u);
  // An archive rewrites rows the tail holds: it answers again only from
  // rows committed after it.
  ASSERT_TRUE(store_->ArchiveMetricsAfter(trials_[0], 3).ok());
  auto after_archive = store_->ListMetricsAfterId(trials_, "", head, 0);
  ASSERT_TRUE(after_archive.ok());
  ASSERT_EQ(after_archive->size(), 1u);
  EXPECT_TRUE((*after_archive)[0].archived);
  EXPECT_EQ(store_->MetricTailStats().reads_not_covered, 2u);
}

}  // namespace
}  // namespace master
}  // namespace det
