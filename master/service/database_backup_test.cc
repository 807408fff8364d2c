// DatabaseBackup (database_backup.h) on a real Store: the snapshot is the
// served database when the copy ends (the master's writes meanwhile in it,
// other writers not blocked), also after det.db was deleted or replaced on
// disk; its chunks and SHA-256, one backup at a time, the free-space
// refusal with headroom, cancel, the temporary files (0600, removed; stale
// ones removed at start), and the write watch of a gRPC call.
#include "master/service/database_backup.h"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
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
  // On another connection (another process's writes).
  int Exec(const std::string& sql) { return sqlite3_exec(writer_, sql.c_str(), nullptr, nullptr, nullptr); }
  // On the Store's own connection (the master's writes).
  absl::Status ExecServed(const std::string& sql) {
    return store_->WithConnection([&](sqlite3* db) {
      char* err = nullptr;
      if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) == SQLITE_OK) return absl::OkStatus();
      absl::Status st = absl::InternalError(err != nullptr ? err : "error");
      sqlite3_free(err);
      return st;
    });
  }
  // Every chunk of a taken snapshot.
  static std::string ReadAll(DatabaseBackup& backup) {
    std::string bytes;
    apiv1::BackupDatabaseResponse chunk;
    while (true) {
      auto more = backup.Next(&chunk);
      EXPECT_TRUE(more.ok()) << more.status();
      if (!more.ok() || !*more) return bytes;
      bytes += chunk.data();
    }
  }
  // A backup file is a rollback-journal database (header bytes 18 and 19
  // are 1, like VACUUM INTO's) whose integrity_check is ok.
  static void ExpectRollbackJournalAndIntact(const std::string& file) {
    std::ifstream in(file, std::ios::binary);
    char header[20] = {};
    in.read(header, sizeof(header));
    EXPECT_EQ(header[18], 1);
    EXPECT_EQ(header[19], 1);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(file.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* check = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &check, nullptr), SQLITE_OK);
    ASSERT_EQ(sqlite3_step(check), SQLITE_ROW);
    EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(check, 0)), "ok");
    sqlite3_finalize(check);
    sqlite3_close_v2(db);
  }
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

// Review 2, finding 2: the steps run back to back under the Store's lock,
// which is not fair; a master write that waited during a step must get the
// lock before the next step, not after the whole copy.
TEST_F(DatabaseBackupTest, AWriterWaitingDuringAStepCommitsBeforeTheNextStep) {
  ASSERT_EQ(Exec("BEGIN"), SQLITE_OK);
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(Exec(absl::StrCat("INSERT INTO kv(key, value) VALUES ('row-", i, "', printf('%.1000c', 'x'))")),
              SQLITE_OK);
  }
  ASSERT_EQ(Exec("COMMIT"), SQLITE_OK);
  std::thread writer;
  absl::Status written = absl::UnknownError("the writer did not run");
  int waiters = 0;
  std::vector<int> steps_without_the_write;
  BackupOptions options;
  options.pages_per_step = 4;
  options.in_step = [&](int step) {
    if (step == 1) {
      // The master writes while the step holds the lock: it waits for it.
      writer = std::thread([&] { written = store_->PutValue("written-during", "yes"); });
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while ((waiters = store_->LockWaitersForTest()) == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();  // polling for the writer to block, with a deadline
      }
      return;
    }
    auto value = store_->GetValue("written-during");  // the same thread: the lock is recursive
    if (!value.ok() || !value->has_value()) steps_without_the_write.push_back(step);
  };
  auto backup = DatabaseBackup::Start(store_.get(), dir_, options);
  ASSERT_TRUE(backup.ok()) << backup.status();
  ASSERT_TRUE((*backup)->Snapshot().ok());
  writer.join();
  ASSERT_EQ(waiters, 1) << "the writer never blocked on the Store's lock";
  ASSERT_TRUE(written.ok()) << written;
  EXPECT_TRUE(steps_without_the_write.empty())
      << "the waiting write was not committed before step " << steps_without_the_write.front() << " (and "
      << steps_without_the_write.size() - 1 << " later steps): the backup took the lock back before the writer";
  EXPECT_EQ(QueryInt((*backup)->temp_path(), "SELECT COUNT(*) FROM kv WHERE key = 'written-during'"), 1);
}

TEST_F(DatabaseBackupTest, SnapshotIsTheServedDatabaseWhenItEndsAndWritersAreNotBlocked) {
  // About 2 MiB of rows, so the snapshot takes many steps and chunks.
  ASSERT_EQ(Exec("BEGIN"), SQLITE_OK);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(Exec(absl::StrCat("INSERT INTO kv(key, value) VALUES ('row-", i, "', printf('%.1000c', 'x'))")),
              SQLITE_OK);
  }
  ASSERT_EQ(Exec("COMMIT"), SQLITE_OK);
  int during_rc = -1;
  std::string temp_during;
  BackupOptions options;
  options.pages_per_step = 16;
  options.during_snapshot = [&](int step) {
    if (step != 1) return;
    // The master writes through its own connection mid-copy: SQLite copies
    // that write into the backup too. Another connection commits with no
    // busy wait: it is not blocked (it restarts the copy).
    ASSERT_TRUE(ExecServed("INSERT INTO kv(key, value) VALUES ('served-during', 'x')").ok());
    during_rc = Exec("INSERT INTO kv(key, value) VALUES ('other-during', 'x')");
    auto temps = BackupTemps();
    if (!temps.empty()) temp_during = temps[0];
  };
  auto backup = DatabaseBackup::Start(store_.get(), dir_, options);
  ASSERT_TRUE(backup.ok()) << backup.status();
  ASSERT_TRUE((*backup)->Snapshot().ok());
  EXPECT_EQ(during_rc, SQLITE_OK) << "a write was blocked by the snapshot: " << sqlite3_errmsg(writer_);
  // The temporary file: in the data dir, private, the one being written.
  ASSERT_EQ(temp_during, (*backup)->temp_path());
  struct stat st;
  ASSERT_EQ(stat(temp_during.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(fs::path(temp_during).parent_path(), fs::path(dir_));

  const std::string bytes = ReadAll(**backup);
  EXPECT_TRUE(BackupTemps().empty()) << "the temporary file was left behind";
  backup->reset();
  const std::string restored = dir_ + "/restored.db";
  std::ofstream(restored, std::ios::binary) << bytes;
  EXPECT_EQ(QueryInt(restored, "SELECT COUNT(*) FROM kv WHERE key LIKE 'row-%'"), 2000);
  EXPECT_EQ(QueryInt(restored, "SELECT COUNT(*) FROM kv WHERE key IN ('served-during', 'other-during')"), 2)
      << "a write committed before the copy ended is not in it";
  ExpectRollbackJournalAndIntact(restored);
}

TEST_F(DatabaseBackupTest, ChunksCarryTheSizeAndTheSha256) {
  ASSERT_EQ(Exec(absl::StrCat("INSERT INTO kv(key, value) VALUES ('big', randomblob(", 3 << 20, "))")), SQLITE_OK);
  auto backup = DatabaseBackup::Start(store_.get(), dir_);
  ASSERT_TRUE(backup.ok()) << backup.status();
  ASSERT_TRUE((*backup)->Snapshot().ok());
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
  EXPECT_GE(chunks, 3);
  ASSERT_TRUE(last.done());
  EXPECT_EQ(last.size_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(last.sha256(), Sha256Hex(bytes));
  EXPECT_EQ(last.schema_version(), Store::LatestSchemaVersion());
  EXPECT_GT(last.snapshot_time().seconds(), 0);
}

// Review finding 1: a det.db deleted (or replaced) on disk while the master
// runs. The backup is of the database the master serves, through its open
// connection: the only copy left of a deleted one.
TEST_F(DatabaseBackupTest, BacksUpTheServedDatabaseAfterDetDbWasDeleted) {
  ASSERT_TRUE(ExecServed("INSERT INTO kv(key, value) VALUES ('served', 'yes')").ok());
  ASSERT_EQ(unlink(path_.c_str()), 0);
  auto backup = DatabaseBackup::Start(store_.get(), dir_);
  ASSERT_TRUE(backup.ok()) << backup.status();
  ASSERT_TRUE((*backup)->Snapshot().ok());
  const std::string restored = dir_ + "/restored.db";
  std::ofstream(restored, std::ios::binary) << ReadAll(**backup);
  EXPECT_EQ(QueryInt(restored, "SELECT COUNT(*) FROM kv WHERE key = 'served'"), 1);
  ExpectRollbackJournalAndIntact(restored);
}

TEST_F(DatabaseBackupTest, BacksUpTheServedDatabaseNotAFileRenamedOverDetDb) {
  ASSERT_TRUE(ExecServed("INSERT INTO kv(key, value) VALUES ('served', 'yes')").ok());
  // Everything in det.db itself, the -wal empty: reopening the path would
  // read the other file alone.
  ASSERT_TRUE(ExecServed("PRAGMA wal_checkpoint(TRUNCATE)").ok());
  const std::string other = dir_ + "/other.db";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(other.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE kv(key TEXT, value TEXT); INSERT INTO kv VALUES ('impostor', 'x')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close_v2(db);
  ASSERT_EQ(rename(other.c_str(), path_.c_str()), 0);
  auto backup = DatabaseBackup::Start(store_.get(), dir_);
  ASSERT_TRUE(backup.ok()) << backup.status();
  ASSERT_TRUE((*backup)->Snapshot().ok());
  const std::string restored = dir_ + "/restored.db";
  std::ofstream(restored, std::ios::binary) << ReadAll(**backup);
  EXPECT_EQ(QueryInt(restored, "SELECT COUNT(*) FROM kv WHERE key = 'served'"), 1);
  EXPECT_EQ(QueryInt(restored, "SELECT COUNT(*) FROM kv WHERE key = 'impostor'"), 0);
}

TEST_F(DatabaseBackupTest, AnotherProcessWritingOnAndOnIsRefusedNamingIt) {
  ASSERT_EQ(Exec(absl::StrCat("INSERT INTO kv(key, value) VALUES ('big', randomblob(", 1 << 20, "))")), SQLITE_OK);
  BackupOptions options;
  options.pages_per_step = 16;
  int writes = 0;
  options.during_snapshot = [&](int) {
    ASSERT_EQ(Exec(absl::StrCat("INSERT INTO kv(key, value) VALUES ('w", writes++, "', 'x')")), SQLITE_OK);
  };
  auto backup = DatabaseBackup::Start(store_.get(), dir_, options);
  ASSERT_TRUE(backup.ok()) << backup.status();
  absl::Status st = (*backup)->Snapshot();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("another process keeps writing to " + path_), std::string::npos) << st;
  EXPECT_EQ(writes, kMaxBackupRestarts + 1);
  backup->reset();
  EXPECT_TRUE(BackupTemps().empty());
}

TEST_F(DatabaseBackupTest, OneBackupAtATime) {
  auto first = DatabaseBackup::Start(store_.get(), dir_);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = DatabaseBackup::Start(store_.get(), dir_);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("already running"), std::string::npos) << second.status();
  first->reset();
  auto third = DatabaseBackup::Start(store_.get(), dir_);
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST_F(DatabaseBackupTest, RequiredFreeSpaceIsTheDatabaseItsWalAndHeadroom) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  EXPECT_EQ(BackupRequiredFreeBytes(100 * kMiB, 0), 356 * kMiB);
  EXPECT_EQ(BackupRequiredFreeBytes(10240 * kMiB, 1024 * kMiB), (10240 + 1024 + 1024) * kMiB);
}

// Review finding 7: free space equal to the database's size leaves the
// master nothing for its own writes: refused; the required amount passes.
TEST_F(DatabaseBackupTest, RefusesWhenTheDataDirHasNoHeadroomBeyondTheSnapshot) {
  ASSERT_EQ(Exec(absl::StrCat("INSERT INTO kv(key, value) VALUES ('big', randomblob(", 1 << 20, "))")), SQLITE_OK);
  const int64_t db_bytes = QueryInt(path_, "PRAGMA page_count") * QueryInt(path_, "PRAGMA page_size");
  struct stat wal;
  const int64_t wal_bytes = stat((path_ + "-wal").c_str(), &wal) == 0 ? wal.st_size : 0;
  const int64_t required = BackupRequiredFreeBytes(db_bytes, wal_bytes);
  for (int64_t free : {db_bytes, required - 1}) {
    BackupOptions options;
    options.free_bytes = [free](const std::string&) -> absl::StatusOr<int64_t> { return free; };
    auto backup = DatabaseBackup::Start(store_.get(), dir_, options);
    ASSERT_FALSE(backup.ok()) << "accepted with " << free << " bytes free";
    EXPECT_EQ(backup.status().code(), absl::StatusCode::kResourceExhausted);
    const std::string message(backup.status().message());
    EXPECT_NE(message.find(dir_), std::string::npos) << message;
    EXPECT_NE(message.find(absl::StrCat(free, " bytes free, less than the ", required, " bytes")), std::string::npos)
        << message;
    EXPECT_NE(message.find(absl::StrCat("its -wal's ", wal_bytes, " bytes")), std::string::npos) << message;
    EXPECT_NE(message.find("max(10 %, 256 MiB)"), std::string::npos) << message;
    EXPECT_NE(message.find("free space"), std::string::npos) << message;
    EXPECT_TRUE(BackupTemps().empty());
  }
  BackupOptions options;
  options.free_bytes = [required](const std::string&) -> absl::StatusOr<int64_t> { return required; };
  // The slot was given back each time.
  EXPECT_TRUE(DatabaseBackup::Start(store_.get(), dir_, options).ok());
}

TEST_F(DatabaseBackupTest, ACancelledSnapshotRemovesItsFile) {
  ASSERT_EQ(Exec("INSERT INTO kv(key, value) VALUES ('a', printf('%.50000c', 'x'))"), SQLITE_OK);
  DatabaseBackup* running = nullptr;
  BackupOptions options;
  options.pages_per_step = 1;
  options.during_snapshot = [&](int) { running->Cancel(); };
  auto backup = DatabaseBackup::Start(store_.get(), dir_, options);
  ASSERT_TRUE(backup.ok()) << backup.status();
  running = backup->get();
  absl::Status st = (*backup)->Snapshot();
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_EQ(BackupTemps().size(), 1u);
  backup->reset();
  EXPECT_TRUE(BackupTemps().empty());
  // The Store's connection is free of the copy: it writes on.
  EXPECT_TRUE(ExecServed("INSERT INTO kv(key, value) VALUES ('after', 'x')").ok());
}

// Review finding 8: a write pending for the timeout cancels the call; none
// is cancelled while nothing is pending, and a stopped watch returns.
TEST(BackupWriteWatchTest, APendingWriteIsCancelledAfterTheTimeout) {
  auto watch = std::make_shared<BackupWriteWatch>();
  watch->pending = true;
  watch->since = std::chrono::steady_clock::now();
  std::promise<void> cancelled;
  int cancels = 0;
  std::thread watcher([&] {
    WatchBackupWrites(watch, std::chrono::milliseconds(100), [&] {
      if (++cancels == 1) cancelled.set_value();
    });
  });
  const bool in_time = cancelled.get_future().wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  {
    std::lock_guard<std::mutex> lock(watch->mu);
    watch->stopped = true;  // ends the watch if it never cancelled
  }
  watch->cv.notify_all();
  watcher.join();
  EXPECT_TRUE(in_time) << "a write pending for 10 s was never cancelled (timeout 100 ms)";
  EXPECT_EQ(cancels, 1);
  EXPECT_TRUE(watch->timed_out);
  EXPECT_GE(std::chrono::steady_clock::now() - watch->since, std::chrono::milliseconds(100));
}

TEST(BackupWriteWatchTest, NothingPendingIsNeverCancelledAndStopEndsTheWatch) {
  auto watch = std::make_shared<BackupWriteWatch>();
  int cancels = 0;
  std::thread watcher([&] { WatchBackupWrites(watch, std::chrono::milliseconds(1), [&] { ++cancels; }); });
  {
    std::lock_guard<std::mutex> lock(watch->mu);
    watch->stopped = true;
  }
  watch->cv.notify_all();
  watcher.join();
  EXPECT_EQ(cancels, 0);
  EXPECT_FALSE(watch->timed_out);
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
