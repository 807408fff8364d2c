// BackupFileWriter (master_backup_command.h): FILE is written atomically
// (0600) only from a complete stream whose SHA-256 matches, never replaces
// an existing file without --force, and leaves no temporary file behind;
// WriteBackupStream's exit status 2 when FILE appears mid-stream.
#include "cli/master_backup_command.h"

#include <sys/stat.h>

#include <filesystem>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;
namespace fs = std::filesystem;
using det::testing::ReadFile;
using det::testing::TempDir;
using det::testing::WriteFile;

v1::BackupDatabaseResponse Chunk(const std::string& data, int64_t offset, int64_t size, bool done,
                                 const std::string& sha = "") {
  v1::BackupDatabaseResponse c;
  c.set_data(data);
  c.set_offset(offset);
  c.set_size_bytes(size);
  c.set_done(done);
  c.set_sha256(sha);
  c.set_schema_version(7);
  return c;
}

// Entries of `dir` other than the test's own.
size_t Entries(const TempDir& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) n += e.path().filename() != "keep" ? 1 : 0;
  return n;
}

TEST(BackupFileWriterTest, WritesFileAtomicallyWhenTheHashMatches) {
  TempDir dir;
  const std::string file = dir / "b.db";
  auto w = BackupFileWriter::Create(file, false);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->Add(Chunk("hello ", 0, 11, false)).ok());
  EXPECT_FALSE(fs::exists(file)) << "FILE must appear only when complete";
  ASSERT_TRUE((*w)->Add(Chunk("world", 6, 11, true, Sha256Hex("hello world"))).ok());
  ASSERT_TRUE((*w)->Commit().ok());
  EXPECT_EQ((*w)->last().schema_version(), 7);
  w->reset();
  EXPECT_EQ(ReadFile(file), "hello world");
  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(Entries(dir), 1u) << "a temporary file was left";
}

TEST(BackupFileWriterTest, AnExistingFileNeedsForce) {
  TempDir dir;
  const std::string file = dir / "b.db";
  WriteFile(file, "old");
  auto w = BackupFileWriter::Create(file, false);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(w.status().message().find(file + " exists"), std::string::npos) << w.status();
  EXPECT_NE(w.status().message().find("--force"), std::string::npos) << w.status();
  auto forced = BackupFileWriter::Create(file, true);
  ASSERT_TRUE(forced.ok()) << forced.status();
  ASSERT_TRUE((*forced)->Add(Chunk("new", 0, 3, true, Sha256Hex("new"))).ok());
  ASSERT_TRUE((*forced)->Commit().ok());
  EXPECT_EQ(ReadFile(file), "new");
}

TEST(BackupFileWriterTest, AFileCreatedMeanwhileIsKept) {
  TempDir dir;
  const std::string file = dir / "b.db";
  auto w = BackupFileWriter::Create(file, false);
  ASSERT_TRUE(w.ok()) << w.status();
  WriteFile(file, "someone else's");
  ASSERT_TRUE((*w)->Add(Chunk("x", 0, 1, true, Sha256Hex("x"))).ok());
  absl::Status st = (*w)->Commit();
  EXPECT_EQ(st.code(), absl::StatusCode::kAlreadyExists) << st;
  w->reset();
  EXPECT_EQ(ReadFile(file), "someone else's");
  EXPECT_EQ(Entries(dir), 1u);
}

// det-cli master backup's exit status when FILE appears while the stream
// is read (docs/operations/backup.md): 2, as when it existed before, and
// FILE is kept.
TEST(BackupFileWriterTest, AFileCreatedDuringTheStreamExitsWith2) {
  TempDir dir;
  const std::string file = dir / "b.db";
  const std::string data = "snapshot bytes";
  int reads = 0;
  bool cancelled = false;
  BackupStream stream;
  stream.read = [&](v1::BackupDatabaseResponse* chunk) {
    if (reads++ > 0) return false;
    WriteFile(file, "someone else's");  // appears mid-backup
    *chunk = Chunk(data, 0, static_cast<int64_t>(data.size()), true, Sha256Hex(data));
    return true;
  };
  stream.cancel = [&] { cancelled = true; };
  stream.finish = [] { return 0; };
  std::ostringstream out, err;
  CommandIo io{out, err};
  EXPECT_EQ(WriteBackupStream(stream, file, false, io), 2) << err.str();
  EXPECT_NE(err.str().find(file + " appeared while the backup ran"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("--force"), std::string::npos) << err.str();
  EXPECT_EQ(ReadFile(file), "someone else's");
  EXPECT_EQ(Entries(dir), 1u) << "a temporary file was left";
  EXPECT_FALSE(cancelled);
  // An existing FILE before the first read: 2, and the master is not asked.
  reads = 0;
  EXPECT_EQ(WriteBackupStream(stream, file, false, io), 2);
  EXPECT_EQ(reads, 0);
  EXPECT_EQ(BackupExitCode(absl::DataLossError("x")), 1);
  EXPECT_EQ(BackupExitCode(absl::OkStatus()), 0);
}

TEST(BackupFileWriterTest, ABadStreamLeavesNothing) {
  TempDir dir;
  const std::string file = dir / "b.db";
  {
    auto w = BackupFileWriter::Create(file, false);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add(Chunk("abc", 0, 3, true, Sha256Hex("abd"))).ok());
    absl::Status st = (*w)->Commit();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_NE(st.message().find("SHA-256"), std::string::npos) << st;
  }
  {
    auto w = BackupFileWriter::Create(file, false);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ((*w)->Add(Chunk("abc", 1, 3, false)).code(), absl::StatusCode::kDataLoss);  // out of order
  }
  {
    auto w = BackupFileWriter::Create(file, false);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Add(Chunk("ab", 0, 3, false)).ok());
    EXPECT_EQ((*w)->Add(Chunk("c", 2, 4, true)).code(), absl::StatusCode::kDataLoss);  // size changed
    EXPECT_EQ((*w)->Commit().code(), absl::StatusCode::kDataLoss);                     // never ended
  }
  {
    auto w = BackupFileWriter::Create(file, false);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ((*w)->Add(Chunk(std::string((1 << 20) + 1, 'x'), 0, 1 << 21, false)).code(),
              absl::StatusCode::kDataLoss);  // a chunk over 1 MiB
  }
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(Entries(dir), 0u) << "a temporary file was left";
}

}  // namespace
}  // namespace det::cli
