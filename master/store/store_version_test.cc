// Issue 47 (upgrade): the det-cpp release that last opened a database is
// recorded, and a database of a newer schema is refused naming both schema
// versions and both det-cpp releases, with nothing in it changed.
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

  // Closes the store, marks its database as of schema version 9999 (a
  // newer det-cpp's), runs `then` on it and opens it again: the open's
  // status.
  absl::Status ReopenAsNewerSchema(const std::string& then) {
    store_.reset();
    RawExec("INSERT INTO schema_migrations(version, applied_at) VALUES (9999, 0)");
    RawExec(then);
    return Store::Open(path_).status();
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
  const absl::Status s = ReopenAsNewerSchema("UPDATE kv SET value = '9.8.7' WHERE key = 'det_cpp_version'");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  const std::string msg(s.message());
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
  const absl::Status s = ReopenAsNewerSchema("DELETE FROM kv WHERE key = 'det_cpp_version'");
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
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
