// DatabaseBackup (database_backup.h) on a real Store: the snapshot is
// consistent and writers are not blocked while it is taken, its chunks and
// SHA-256, one backup at a time, the free-space refusal, cancel, and the
// temporary files (0600, removed; stale ones removed at start).
#include "master/service/database_backup.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "gtest/gtest.h"
#include "master/store/store_test_fixture.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;
namespace fs = std::filesystem;

class DatabaseBackupTest : public TempStoreTest {
 protected:
  DatabaseBackupTest() : TempStoreTest("database_backup_test") {}
  void SetUp() override {
    TempStoreTest::SetUp();
    ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &writer_, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
    sqlite3_busy_timeout(writer_, 0);  // a blocked writer fails at once
  }
  void TearDown() override {
    sqlite3_close_v2(writer_);
    TempStoreTest::TearDown();
  }
  int Exec(const std::string& sql) { return sqlite3_exec(writer_, sql.c_str(), nullptr, nullptr, nullptr); }
  // Files of the data dir whose names start with the backup prefix.
  std::vector<std::string> BackupTemps() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().rfind(kBackupTempPrefix, 0) == 0) out.push_back(e.path().string());
    }
    return out;
  }
  static int64_t QueryInt(const std::string& db_path, const std::string& sql) {
    sqlite3* db = nullptr;
    sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* st = nullptr;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
      v = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close_v2(db);
    return v;
  }

  sqlite3* writer_ = nullptr;
};

TEST_F(DatabaseBackupTest, SnapshotIsConsistentAndWritersAreNotBlocked) {
  // About 2 MiB of rows, so the snapshot is sent in several chunks.
  ASSERT_EQ(Exec("BEGIN"), SQLITE_OK);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(Exec(absl::StrCat("INSERT INTO kv(key, value) VALUES ('row-", i, "', printf('%.1000c', 'x'))")),
              SQLITE_OK);
  }
  ASSERT_EQ(Exec("COMMIT"), SQLITE_OK);
  int during_rc = -1;
  std::string temp_during;
  BackupOptions options;
  options.during_snapshot = [&] {
    // Another connection commits while the snapshot's read transaction is
    // open, with no busy wait: under WAL it must not be blocked.
    during_rc = Exec("INSERT INTO kv(key, value) VALUES ('during', 'x')");
    auto temps = BackupTemps();
    if (!temps.empty()) temp_during = temps[0];
  };
  auto backup = DatabaseBackup::Start(path_, dir_, options);
  ASSERT_TRUE(backup.ok()) << backup.status();
  ASSERT_TRUE((*backup)->Snapshot().ok());
  EXPECT_EQ(during_rc, SQLITE_OK) << "a write was blocked by the snapshot: " << sqlite3_errmsg(writer_);
  // The temporary file: in the data dir, private, the one being written.
  ASSERT_EQ(temp_during, (*backup)->temp_path());
  struct stat st;
  ASSERT_EQ(stat(temp_during.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(fs::path(temp_during).parent_path(), fs::path(dir_));

  std::string bytes;
  apiv1::BackupDatabaseResponse chunk, last;
  int chunks = 0;
  while (true) {
    auto more = (*backup)->Next(&chunk);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ++chunks;
    EXPECT_EQ(chunk.offset(), static_cast<int64_t>(bytes.size()));
    EXPECT_LE(static_cast<int64_t>(chunk.data().size()), kBackupChunkBytes);
    bytes += chunk.data();
    last = chunk;
  }
  EXPECT_GE(chunks, 2);
  ASSERT_TRUE(last.done());
  EXPECT_EQ(last.size_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(last.sha256(), Sha256Hex(bytes));
  EXPECT_EQ(last.schema_version(), Store::LatestSchemaVersion());
  EXPECT_GT(last.snapshot_time().seconds(), 0);
  // Removed once the last chunk is read: before the client gets it.
  EXPECT_TRUE(BackupTemps().empty()) << "the temporary file was left behind";
  backup->reset();

  const std::string restored = dir_ + "/restored.db";
  std::ofstream(restored, std::ios::binary) << bytes;
  EXPECT_EQ(QueryInt(restored, "SELECT COUNT(*) FROM kv WHERE key LIKE 'row-%'"), 2000);
  EXPECT_EQ(QueryInt(restored, "SELECT COUNT(*) FROM kv WHERE key = 'during'"), 0)
      << "a write committed after the snapshot began is in it";
  EXPECT_EQ(QueryInt(path_, "SELECT COUNT(*) FROM kv WHERE key = 'during'"), 1);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(restored.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* check = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &check, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(check), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(check, 0)), "ok");
  sqlite3_finalize(check);
  sqlite3_close_v2(db);
}

TEST_F(DatabaseBackupTest, OneBackupAtATime) {
  auto first = DatabaseBackup::Start(path_, dir_);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = DatabaseBackup::Start(path_, dir_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("already running"), std::string::npos) << second.status();
  first->reset();
  auto third = DatabaseBackup::Start(path_, dir_);
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST_F(DatabaseBackupTest, RefusesWhenTheDataDirHasLessRoomThanTheDatabase) {
  BackupOptions options;
  options.free_bytes = [](const std::string&) -> absl::StatusOr<int64_t> { return 100; };
  auto backup = DatabaseBackup::Start(path_, dir_, options);
  ASSERT_FALSE(backup.ok());
  EXPECT_EQ(backup.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(backup.status().message());
  EXPECT_NE(message.find(dir_), std::string::npos) << message;
  EXPECT_NE(message.find("100 bytes free"), std::string::npos) << message;
  EXPECT_NE(message.find("free space"), std::string::npos) << message;
  EXPECT_TRUE(BackupTemps().empty());
  // The slot was given back.
  EXPECT_TRUE(DatabaseBackup::Start(path_, dir_).ok());
}

TEST_F(DatabaseBackupTest, ACancelledSnapshotRemovesItsFile) {
  ASSERT_EQ(Exec("INSERT INTO kv(key, value) VALUES ('a', printf('%.5000c', 'x'))"), SQLITE_OK);
  DatabaseBackup* running = nullptr;
  BackupOptions options;
  options.during_snapshot = [&] { running->Cancel(); };
  auto backup = DatabaseBackup::Start(path_, dir_, options);
  ASSERT_TRUE(backup.ok()) << backup.status();
  running = backup->get();
  absl::Status st = (*backup)->Snapshot();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(BackupTemps().size(), 1u);
  backup->reset();
  EXPECT_TRUE(BackupTemps().empty());
}

TEST_F(DatabaseBackupTest, StaleBackupsAreRemovedAndNothingElse) {
  std::ofstream(dir_ + "/.det-backup-0123.tmp") << "old";
  std::ofstream(dir_ + "/.det-backup-0123.tmp-journal") << "old";
  std::ofstream(dir_ + "/target") << "keep";
  ASSERT_EQ(symlink((dir_ + "/target").c_str(), (dir_ + "/.det-backup-link").c_str()), 0);
  std::ofstream(dir_ + "/keep.det-backup-x") << "keep";
  EXPECT_EQ(RemoveStaleBackups(dir_), 3);
  EXPECT_TRUE(BackupTemps().empty());
  EXPECT_TRUE(fs::exists(dir_ + "/target"));  // a symlink's target is not touched
  EXPECT_TRUE(fs::exists(dir_ + "/keep.det-backup-x"));
  EXPECT_TRUE(fs::exists(path_));
  EXPECT_EQ(RemoveStaleBackups(dir_ + "/missing"), 0);
}

}  // namespace
}  // namespace det::master
