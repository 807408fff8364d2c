// The master's data dir and SQLite files are private (data_dir.h): created
// 0700 / 0600 whatever the umask, loose modes of existing database files
// fixed, a group- or world-accessible data dir, or one owned by another uid,
// refused unless allowed.
#include "master/store/data_dir.h"

#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "master/store/store.h"

namespace det::master {
namespace {

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class DataDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/det_data_dir_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    old_umask_ = umask(022);  // the usual default, under which files were 0644
  }
  void TearDown() override {
    umask(old_umask_);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
  mode_t old_umask_ = 0;
};

TEST_F(DataDirTest, MissingDirIsCreated0700) {
  const std::string data = dir_ + "/a/b/data";
  ASSERT_TRUE(PreparePrivateDataDir(data, false).ok());
  EXPECT_EQ(ModeOf(data), 0700u);
  EXPECT_TRUE(PreparePrivateDataDir(data, false).ok());  // again: it exists, private
}

TEST_F(DataDirTest, AccessibleDirIsRefusedNamingModeAndFix) {
  for (mode_t mode : {0755, 0750, 0701, 0710, 0707}) {
    ASSERT_EQ(chmod(dir_.c_str(), mode), 0);
    absl::Status st = PreparePrivateDataDir(dir_, false);
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << mode;
    EXPECT_TRUE(absl::StrContains(st.message(), "chmod 700 " + dir_)) << st;
    EXPECT_TRUE(absl::StrContains(st.message(), "--allow-insecure-data-dir")) << st;
    EXPECT_EQ(ModeOf(dir_), mode);  // refused, not changed behind the operator's back
  }
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  EXPECT_TRUE(absl::StrContains(PreparePrivateDataDir(dir_, false).message(), "has mode 0755"));
  EXPECT_TRUE(PreparePrivateDataDir(dir_, true).ok());
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
}

// As PostgreSQL: a data dir owned by another uid (e.g. pre-created 0700 under
// /tmp by an attacker) is refused naming the owner and `chown`, unless
// --allow-insecure-data-dir. Simulated with another master uid; as root, also
// a real directory chowned away.
TEST_F(DataDirTest, DirOwnedByAnotherUidIsRefusedNamingOwnerAndFix) {
  ASSERT_EQ(chmod(dir_.c_str(), 0700), 0);
  const uid_t owner = geteuid();
  const uid_t master = owner + 4242;
  absl::Status st = PreparePrivateDataDirOf(dir_, false, master);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), absl::StrCat("owned by uid ", owner))) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), absl::StrCat("chown ", master, " ", dir_))) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "--allow-insecure-data-dir")) << st;
  EXPECT_TRUE(PreparePrivateDataDirOf(dir_, true, master).ok());
  EXPECT_TRUE(PreparePrivateDataDirOf(dir_, false, owner).ok());
  if (geteuid() == 0) {
    ASSERT_EQ(chown(dir_.c_str(), 65534, 65534), 0);
    absl::Status real = PreparePrivateDataDir(dir_, false);
    EXPECT_EQ(real.code(), absl::StatusCode::kFailedPrecondition) << real;
    EXPECT_TRUE(absl::StrContains(real.message(), "owned by uid 65534")) << real;
    ASSERT_EQ(chown(dir_.c_str(), 0, 0), 0);
  }
}

TEST_F(DataDirTest, NotADirectoryOrEmptyIsInvalid) {
  const std::string file = dir_ + "/file";
  std::ofstream(file) << "x";
  EXPECT_EQ(PreparePrivateDataDir(file, false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PreparePrivateDataDir(file + "/sub", false).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PreparePrivateDataDir("", false).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DataDirTest, StoreOpenCreatesTheDatabaseAndItsWalAndShm0600) {
  const std::string db = dir_ + "/det.db";
  auto store = Store::Open(db);
  ASSERT_TRUE(store.ok()) << store.status();
  for (const std::string& f : {db, db + "-wal", db + "-shm"}) {
    ASSERT_TRUE(std::filesystem::exists(f)) << f;
    EXPECT_EQ(ModeOf(f), 0600u) << f;
  }
}

TEST_F(DataDirTest, LooseModesOfExistingDatabaseFilesAreFixed) {
  const std::string db = dir_ + "/det.db";
  { ASSERT_TRUE(Store::Open(db).ok()); }
  for (const std::string& f : {db, db + "-wal", db + "-shm"}) {
    std::ofstream(f, std::ios::app).flush();
    ASSERT_EQ(chmod(f.c_str(), 0644), 0);
  }
  ASSERT_TRUE(MakeDatabaseFilesPrivate(db).ok());
  for (const std::string& f : {db, db + "-wal", db + "-shm"}) EXPECT_EQ(ModeOf(f), 0600u) << f;
  auto reopened = Store::Open(db);
  EXPECT_TRUE(reopened.ok()) << reopened.status();
}

TEST_F(DataDirTest, UncreatableDatabaseNamesTheFile) {
  const std::string db = dir_ + "/no/such/dir/det.db";
  absl::Status st = MakeDatabaseFilesPrivate(db);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(st.message(), db)) << st;
}

// A fresh data dir (nothing, or only what a new volume holds) and a data dir
// whose database is there start as before.
TEST_F(DataDirTest, AFreshDataDirOrAPresentDatabaseIsNotALostDatabase) {
  const std::string db = dir_ + "/det.db";
  EXPECT_TRUE(CheckDatabaseNotLost(dir_, db, false).ok());
  std::filesystem::create_directories(dir_ + "/lost+found");
  std::filesystem::create_directories(dir_ + "/artifacts");  // empty
  EXPECT_TRUE(CheckDatabaseNotLost(dir_, db, false).ok());
  ASSERT_TRUE(RecordClusterId(dir_, "0123abcd").ok());
  EXPECT_EQ(ModeOf(dir_ + "/cluster-id"), 0600u);
  { ASSERT_TRUE(Store::Open(db).ok()); }
  EXPECT_TRUE(CheckDatabaseNotLost(dir_, db, false).ok()) << "the database is there";
}

// Each trace of a cluster's state, with det.db missing or 0 bytes: refused
// naming it, the database and both fixes; --init-empty-db lets it start.
TEST_F(DataDirTest, AMissingDatabaseBesideAClustersStateIsRefusedNamingTheFix) {
  const std::string db = dir_ + "/det.db";
  struct Trace {
    std::string what;
    std::function<void()> make;
  };
  const std::vector<Trace> traces = {
      {"cluster-id (cluster 0123abcd)", [&] { ASSERT_TRUE(RecordClusterId(dir_, "0123abcd").ok()); }},
      {"artifacts/ (not empty)", [&] {
         std::filesystem::create_directories(dir_ + "/artifacts");
         std::ofstream(dir_ + "/artifacts/abc.so") << "x";
       }},
      {"checkpoints/ (not empty)", [&] { std::filesystem::create_directories(dir_ + "/checkpoints/uuid"); }},
      {"det.db-wal", [&] { std::ofstream(db + "-wal") << "x"; }},
      {"det.db-shm", [&] { std::ofstream(db + "-shm") << "x"; }},
      {".det-backup-0a.tmp", [&] { std::ofstream(dir_ + "/.det-backup-0a.tmp") << "x"; }},
  };
  for (const Trace& trace : traces) {
    for (bool empty_file : {false, true}) {
      SCOPED_TRACE(trace.what + (empty_file ? ", det.db 0 bytes" : ", det.db missing"));
      for (const auto& e : std::filesystem::directory_iterator(dir_)) std::filesystem::remove_all(e.path());
      trace.make();
      if (empty_file) std::ofstream(db).flush();
      absl::Status st = CheckDatabaseNotLost(dir_, db, false);
      EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
      EXPECT_TRUE(absl::StrContains(st.message(), "the database " + db + " is missing or empty")) << st;
      EXPECT_TRUE(absl::StrContains(st.message(), trace.what)) << st;
      EXPECT_TRUE(absl::StrContains(st.message(), "Restore the database from a backup")) << st;
      EXPECT_TRUE(absl::StrContains(st.message(), "start once with --init-empty-db")) << st;
      EXPECT_TRUE(CheckDatabaseNotLost(dir_, db, true).ok());
    }
  }
}

TEST_F(DataDirTest, RecordClusterIdReplacesTheFileAndNamesItWhenItCannot) {
  ASSERT_TRUE(RecordClusterId(dir_, "aa").ok());
  ASSERT_TRUE(RecordClusterId(dir_, "bb").ok());
  std::ifstream in(dir_ + "/cluster-id");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "bb\n");
  absl::Status st = RecordClusterId(dir_ + "/missing", "aa");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(st.message(), dir_ + "/missing/cluster-id")) << st;
}

}  // namespace
}  // namespace det::master
