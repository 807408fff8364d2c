// CheckpointRoots: where checkpoint storage may lie, and how GC deletes.
#include "master/core/checkpoint_roots.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace det::master {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CheckpointRootsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("det_roots_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "ck");
    fs::create_directories(dir_ / "data");
    std::ofstream(dir_ / "data" / "det.db") << "db";
    auto roots = CheckpointRoots::Create({(dir_ / "ck").string()}, {(dir_ / "data").string()});
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_ = *roots;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string P(const std::string& rel) const { return (dir_ / rel).string(); }

  fs::path dir_;
  CheckpointRoots roots_;
};

TEST_F(CheckpointRootsTest, RootsMustNotHoldTheMastersData) {
  auto bad = CheckpointRoots::Create({P("ck"), dir_.string()}, {P("data"), P("data/det.db")});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("contains the master's own"));
  // Through a symlink too.
  fs::create_directory_symlink(dir_, dir_ / "ck" / "up");
  EXPECT_FALSE(CheckpointRoots::Create({P("ck/up")}, {P("data/det.db")}).ok());
  EXPECT_FALSE(CheckpointRoots::Create({}, {}).ok());
}

TEST_F(CheckpointRootsTest, StorageMustLieUnderARoot) {
  EXPECT_TRUE(roots_.Check(P("ck"), "checkpoint_storage.host_path").ok());
  EXPECT_TRUE(roots_.Check(P("ck/exp/new"), "checkpoint_storage.host_path").ok());
  fs::create_directory_symlink(dir_ / "data", dir_ / "ck" / "to-data");
  fs::create_directory_symlink(dir_ / "ck" / "exp", dir_ / "ck" / "to-exp");
  EXPECT_TRUE(roots_.Check(P("ck/to-exp"), "f").ok());
  for (const std::string& bad : {P("data"), P("ck/../data"), P("ck/to-data"), P("ck/to-data/x"), P("ck2"),
                                 std::string("relative/ck"), std::string("/")}) {
    absl::Status st = roots_.Check(bad, "checkpoint_storage.host_path");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(st.message(), HasSubstr("checkpoint_storage.host_path")) << bad;
    EXPECT_THAT(st.message(), HasSubstr(P("ck"))) << "names the allowed roots";
  }
}

TEST_F(CheckpointRootsTest, RemoveDeletesOnlyARecordedUuidDirectoryWithoutFollowing) {
  const std::string u = "0f3c9a1e-5b2d-4c6e-8f10-112233445566";
  fs::create_directories(dir_ / "ck" / "exp" / u / "sub");
  std::ofstream(dir_ / "ck" / "exp" / u / "sub" / "w") << "w";
  fs::create_directory_symlink(dir_ / "data", dir_ / "ck" / "exp" / u / "data-link");
  EXPECT_TRUE(roots_.RemoveCheckpoint(P("ck/exp/" + u), u).ok());
  EXPECT_FALSE(fs::exists(dir_ / "ck" / "exp" / u));
  EXPECT_TRUE(fs::exists(dir_ / "data" / "det.db"));
  EXPECT_TRUE(roots_.RemoveCheckpoint(P("ck/exp/" + u), u).ok()) << "already gone";

  // Not a UUID, not the recorded uuid, outside every root.
  EXPECT_EQ(roots_.RemoveCheckpoint(P("ck/exp/det.db"), "det.db").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(roots_.RemoveCheckpoint(P("data"), u).code(), absl::StatusCode::kFailedPrecondition);
  fs::create_directories(dir_ / "data" / u);
  EXPECT_EQ(roots_.RemoveCheckpoint(P("data/" + u), u).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(roots_.RemoveCheckpoint(P("ck/../data/" + u), u).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(dir_ / "data" / u));

  // The checkpoint directory swapped for a symlink: left alone.
  fs::create_directory_symlink(dir_ / "data", dir_ / "ck" / "exp" / u);
  EXPECT_EQ(roots_.RemoveCheckpoint(P("ck/exp/" + u), u).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(dir_ / "data" / "det.db"));
  // A directory above it swapped for a symlink to where a same-named
  // directory lives: not followed either.
  fs::remove(dir_ / "ck" / "exp" / u);
  fs::rename(dir_ / "ck" / "exp", dir_ / "ck" / "exp-moved");
  fs::create_directory_symlink(dir_ / "data", dir_ / "ck" / "exp");
  EXPECT_EQ(roots_.RemoveCheckpoint(P("ck/exp/" + u), u).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(dir_ / "data" / u));
  EXPECT_TRUE(fs::exists(dir_ / "data" / "det.db"));
}

}  // namespace
}  // namespace det::master
