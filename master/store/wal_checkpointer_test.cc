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

// A raw connection to `path` as the Store opens its own (WAL, SQLite's
// auto-checkpoint off) with `pragmas` run after, waiting `busy_ms` on a lock,
// and a table t of blobs to fill; nullptr (after a failed expectation) if any
// step fails.
sqlite3* OpenWalTable(const std::string& path, int busy_ms, const std::string& pragmas) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_busy_timeout(db, busy_ms);
  const std::string sql = absl::StrCat("PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; ", pragmas,
                                       " CREATE TABLE t (id INTEGER PRIMARY KEY, b BLOB);");
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sqlite3_errmsg(db);
    sqlite3_close(db);
    return nullptr;
  }
  return db;
}

// The thresholds both WAL tests use: small enough to cross in seconds.
WalCheckpointer::Options SmallThresholds() {
  WalCheckpointer::Options options;
  options.passive_pages = 100;
  options.truncate_pages = 400;
  return options;
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
// PASSIVE threshold instead of holding every frame written (about 6,000
// pages), and the checkpoints are the thread's: the writer ran none. (The
// writer waits for the thread here; the bound under a writer that never
// waits, with a reader pinning the WAL, is the next test's.)
TEST_F(WalCheckpointerTest, TheWalStaysNearThePassiveThresholdWhenTheThreadKeepsUp) {
  store_.reset();
  const std::string path = dir_ + "/raw.db";
  sqlite3* db = OpenWalTable(path, 10000, "");  // busy timeout as the Store's connection
  ASSERT_NE(db, nullptr);
  auto c = WalCheckpointer::Start(path, db, SmallThresholds());
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

// A reader holding an old snapshot keeps SQLite from starting the WAL over,
// so PASSIVE checkpoints cannot bound it. The writer commits past
// truncate_pages without ever waiting for the thread: the TRUNCATE finds the
// reader (busy, after the checkpointer's 10 s busy timeout) while it is open;
// once it lets go, the next commit's TRUNCATE empties the WAL, and the -wal
// file is no larger than journal_size_limit.
TEST_F(WalCheckpointerTest, TruncateBoundsTheWalOnceAReaderLetsGo) {
  store_.reset();
  const std::string path = dir_ + "/raw.db";
  const int64_t page = 4096, limit = 256 * page;
  // The busy timeout waits out the TRUNCATE's wait for the reader.
  sqlite3* db = OpenWalTable(path, 120000, absl::StrCat("PRAGMA journal_size_limit=", limit, ";"));
  ASSERT_NE(db, nullptr);
  sqlite3* reader = nullptr;
  const WalCheckpointer::Options options = SmallThresholds();
  auto c = WalCheckpointer::Start(path, db, options);
  ASSERT_TRUE(c.ok()) << c.status();
  sqlite3_stmt* ins = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO t(b) VALUES (zeroblob(5000))", -1, &ins, nullptr), SQLITE_OK);
  auto commit = [&] {
    const int rc = sqlite3_step(ins);
    sqlite3_reset(ins);
    return rc;
  };
  for (int i = 0; i < 10; ++i) ASSERT_EQ(commit(), SQLITE_DONE) << sqlite3_errmsg(db);
  // The reader's snapshot: the WAL as it is now (its frames cannot be
  // overwritten while the read transaction lasts).
  ASSERT_EQ(sqlite3_open(path.c_str(), &reader), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(reader, "BEGIN; SELECT COUNT(*) FROM t;", nullptr, nullptr, nullptr), SQLITE_OK);
  // Past truncate_pages frames (a frame: a page and its 24-byte header).
  const int64_t past = 32 + (options.truncate_pages + 10) * (page + 24);
  int commits = 0;
  while (FileBytes(path + "-wal") <= past && commits < 5000) {
    ASSERT_EQ(commit(), SQLITE_DONE) << sqlite3_errmsg(db);
    ++commits;
  }
  const int64_t pinned = FileBytes(path + "-wal");
  EXPECT_GT(pinned, past) << "after " << commits << " commits";
  // Deadline: the checkpointer's busy timeout (10 s) and then some.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((*c)->stats().busy == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GT((*c)->stats().busy, 0) << "the TRUNCATE never found the reader";
  EXPECT_GT(FileBytes(path + "-wal"), limit) << "the WAL was emptied under the reader";
  const int64_t truncates = (*c)->stats().truncate;
  ASSERT_EQ(sqlite3_exec(reader, "COMMIT;", nullptr, nullptr, nullptr), SQLITE_OK);
  // One more commit wakes the thread; poll until its TRUNCATE succeeded.
  ASSERT_EQ(commit(), SQLITE_DONE) << sqlite3_errmsg(db);
  EXPECT_TRUE(PollUntil([&] {
    const WalCheckpointer::Stats s = (*c)->stats();
    return s.truncate > truncates && s.last_wal_pages == 0 && FileBytes(path + "-wal") <= limit;
  })) << "truncate " << (*c)->stats().truncate << " (before release " << truncates << "), WAL pages "
      << (*c)->stats().last_wal_pages << ", -wal " << FileBytes(path + "-wal") << " bytes";
  EXPECT_GE((*c)->stats().truncate, 1);
  EXPECT_LE(FileBytes(path + "-wal"), limit);
  EXPECT_EQ((*c)->stats().failed, 0);
  sqlite3_finalize(ins);
  c->reset();
  sqlite3_close(reader);
  sqlite3_close(db);
}

// The Store: its connection never checkpoints (wal_autocheckpoint 0), the
// checkpointer does once the WAL passes 4,000 pages, and closing the Store
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
  for (int call = 0; call < 4000 && store_->WalCheckpointStats().passive == 0; ++call) {
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
