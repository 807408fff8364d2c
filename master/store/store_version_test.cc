// Issue 47 (upgrade): the det-cpp release that last opened a database is
// recorded, and a database of a newer schema is refused naming both schema
// versions and both det-cpp releases, with nothing in it changed.
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/det_version.h"
#include "gtest/gtest.h"
#include "master/store/store.h"
#include "master/store/store_test_fixture.h"

namespace det {
namespace master {
namespace {

class StoreVersionTest : public TempStoreTest {
 protected:
  StoreVersionTest() : TempStoreTest("store_version_test") {}

  // The first column of the first row of `sql` on a raw connection ("" when
  // there is none).
  std::string RawQueryText(const std::string& sql) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    std::string v;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != nullptr) {
      v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
  }
  void RawExec(const std::string& sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
};

TEST_F(StoreVersionTest, OpenRecordsTheDetVersion) {
  EXPECT_EQ(RawQueryText("SELECT value FROM kv WHERE key = 'det_cpp_version'"), kDetVersion);
  // An older release's record is replaced by this one at the next open.
  store_.reset();
  RawExec("UPDATE kv SET value = '0.0.1' WHERE key = 'det_cpp_version'");
  auto s = Store::Open(path_);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(RawQueryText("SELECT value FROM kv WHERE key = 'det_cpp_version'"), kDetVersion);
}

TEST_F(StoreVersionTest, NewerSchemaIsRefusedNamingBothVersionsAndChangingNothing) {
  store_.reset();
  RawExec("INSERT INTO schema_migrations(version, applied_at) VALUES (9999, 0)");
  RawExec("UPDATE kv SET value = '9.8.7' WHERE key = 'det_cpp_version'");
  auto s = Store::Open(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(s.status().message());
  EXPECT_NE(msg.find(absl::StrCat(path_, " has schema version 9999 (last opened by det-cpp 9.8.7)")),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(absl::StrCat("this det-master is det-cpp ", kDetVersion, " and knows schema versions up to ",
                                  Store::LatestSchemaVersion())),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("run det-cpp 9.8.7 or newer on it"), std::string::npos) << msg;
  EXPECT_NE(msg.find("docs/operations/upgrade.md"), std::string::npos) << msg;
  EXPECT_EQ(RawQueryText("SELECT value FROM kv WHERE key = 'det_cpp_version'"), "9.8.7");
  EXPECT_EQ(RawQueryText("SELECT MAX(version) FROM schema_migrations"), "9999");
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A newer database in rollback-journal mode (a backup: det-cli master backup
// and VACUUM INTO write one) is refused before anything is written: no
// journal mode switch to WAL (header bytes 18 and 19 stay 1), no -wal or
// -shm file, the same bytes.
TEST_F(StoreVersionTest, ANewerRollbackJournalDatabaseIsRefusedBeforeAnyWrite) {
  store_.reset();
  RawExec("INSERT INTO schema_migrations(version, applied_at) VALUES (9999, 0)");
  RawExec("PRAGMA journal_mode=DELETE");
  ASSERT_FALSE(std::filesystem::exists(path_ + "-wal"));
  ASSERT_FALSE(std::filesystem::exists(path_ + "-shm"));
  const std::string before = FileBytes(path_);
  ASSERT_GT(before.size(), 20u);
  ASSERT_EQ(before[18], 1);
  ASSERT_EQ(before[19], 1);
  auto s = Store::Open(path_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(s.status().message()).find("has schema version 9999"), std::string::npos) << s.status();
  const std::string after = FileBytes(path_);
  EXPECT_TRUE(after == before) << "changed; header bytes 18/19 now " << int(after[18]) << "/" << int(after[19]);
  EXPECT_FALSE(std::filesystem::exists(path_ + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path_ + "-shm"));
}

// A newer database that recorded no release still names both schema versions.
TEST_F(StoreVersionTest, NewerSchemaWithoutARecordedReleaseNamesTheSchemaVersions) {
  store_.reset();
  RawExec("INSERT INTO schema_migrations(version, applied_at) VALUES (9999, 0)");
  RawExec("DELETE FROM kv WHERE key = 'det_cpp_version'");
  auto s = Store::Open(path_);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.status().message());
  EXPECT_NE(msg.find("has schema version 9999 (last opened by a det-cpp release that recorded no version)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find(absl::StrCat("knows schema versions up to ", Store::LatestSchemaVersion())), std::string::npos)
      << msg;
  EXPECT_EQ(RawQueryText("SELECT COUNT(*) FROM kv WHERE key = 'det_cpp_version'"), "0");
}

}  // namespace
}  // namespace master
}  // namespace det
