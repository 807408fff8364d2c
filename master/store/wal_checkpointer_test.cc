// WalCheckpointer (issue 50): checkpoints on a thread of their own keep the
// WAL bounded while the writer never checkpoints, and stop with the Store.
#include "master/store/wal_checkpointer.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "master/store/store.h"
#include "master/store/store_test_fixture.h"

namespace det {
namespace master {
namespace {

int64_t FileBytes(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// Polls (every millisecond, for up to 10 s) until `done` holds.
template <typename Pred>
bool PollUntil(Pred done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

class WalCheckpointerTest : public TempStoreTest {
 protected:
  WalCheckpointerTest() : TempStoreTest("det_wal_checkpointer_test") {}
};

TEST_F(WalCheckpointerTest, OptionsOutOfBoundsAreRefusedNamingThem) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  WalCheckpointer::Options bad;
  bad.passive_pages = 0;
  auto c = WalCheckpointer::Start(path_, db, bad);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("passive_pages"), std::string::npos) << c.status();
  bad.passive_pages = 100;
  bad.truncate_pages = 50;
  c = WalCheckpointer::Start(path_, db, bad);
  EXPECT_NE(c.status().message().find("truncate_pages"), std::string::npos) << c.status();
  sqlite3_close(db);
}

// A writer with autocheckpoint off commits 3,000 transactions of ~2 pages;
// every 100 commits it lets the checkpointer catch up (polls its count, so
// the test does not depend on the scheduler). The -wal file stays near the
// threshold instead of holding every frame written (about 6,000 pages), and
// the checkpoints are the thread's: the writer ran none.
TEST_F(WalCheckpointerTest, TheWalStaysBoundedUnderSustainedInserts) {
  store_.reset();
  const std::string path = dir_ + "/raw.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, 10000);  // as the Store's connection
  ASSERT_EQ(sqlite3_exec(db,
                         "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; "
                         "CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  WalCheckpointer::Options options;
  options.passive_pages = 100;
  options.truncate_pages = 400;
  auto c = WalCheckpointer::Start(path, db, options);
  ASSERT_TRUE(c.ok()) << c.status();
  sqlite3_stmt* ins = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO t(b) VALUES (zeroblob(5000))", -1, &ins, nullptr), SQLITE_OK);
  int64_t largest_wal = 0, seen = 0;
  for (int i = 1; i <= 3000; ++i) {
    ASSERT_EQ(sqlite3_step(ins), SQLITE_DONE) << sqlite3_errmsg(db);
    sqlite3_reset(ins);
    if (i % 100 == 0) {
      ASSERT_TRUE(PollUntil([&] { return (*c)->stats().passive > seen; })) << "no checkpoint after commit " << i;
      seen = (*c)->stats().passive;
    }
    largest_wal = std::max(largest_wal, FileBytes(path + "-wal"));
  }
  sqlite3_finalize(ins);
  const int64_t page = 4096;
  EXPECT_LT(largest_wal, 1200 * page) << "the WAL grew to " << largest_wal << " bytes";
  EXPECT_GE((*c)->stats().passive, 25);
  EXPECT_EQ((*c)->stats().failed, 0);
  EXPECT_GE((*c)->stats().last_wal_pages, 0);  // -1: the checkpoints did nothing
  c->reset();  // stops the thread, closes its connection
  sqlite3_close(db);
  EXPECT_EQ(FileBytes(path + "-wal"), -1);  // the last close checkpointed and removed it
}

// The Store: its connection never checkpoints (wal_autocheckpoint 0), the
// checkpointer does once the WAL passes 1,000 pages, and closing the Store
// stops it and leaves no -wal file (its connection closed first).
TEST_F(WalCheckpointerTest, TheStoresWriterLeavesCheckpointsToTheThread) {
  int64_t autocheckpoint = -1;
  ASSERT_TRUE(store_
                  ->WithConnection([&](sqlite3* db) {
                    sqlite3_stmt* st = nullptr;
                    sqlite3_prepare_v2(db, "PRAGMA wal_autocheckpoint", -1, &st, nullptr);
                    if (sqlite3_step(st) == SQLITE_ROW) autocheckpoint = sqlite3_column_int64(st, 0);
                    sqlite3_finalize(st);
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(autocheckpoint, 0);
  ExperimentRow e;
  e.name = "wal";
  e.state = "ACTIVE";
  auto exp = store_->InsertExperiment(e);
  ASSERT_TRUE(exp.ok()) << exp.status();
  TrialRow t;
  t.experiment_id = *exp;
  t.state = "ACTIVE";
  auto trial = store_->InsertTrial(t);
  ASSERT_TRUE(trial.ok()) << trial.status();
  std::map<std::string, double> values;
  for (int k = 0; k < 40; ++k) values[absl::StrCat("metric_", k)] = k * 0.5;
  for (int call = 0; call < 400 && store_->WalCheckpointStats().passive == 0; ++call) {
    std::vector<MetricRow> rows;
    for (int r = 0; r < 20; ++r) {
      MetricRow m;
      m.trial_id = *trial;
      m.group = "training";
      m.total_batches = call * 20 + r + 1;
      m.metrics = values;
      rows.push_back(m);
    }
    ASSERT_TRUE(store_->InsertMetrics(rows).ok());
  }
  EXPECT_TRUE(PollUntil([&] { return store_->WalCheckpointStats().passive > 0; }));
  store_.reset();
  EXPECT_EQ(FileBytes(path_ + "-wal"), -1);
}

}  // namespace
}  // namespace master
}  // namespace det
