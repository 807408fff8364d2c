#include "agent/checkpoint_stage.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace det::agent {
namespace {

namespace fs = std::filesystem;

class CheckpointStageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/det_stage_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    fs::create_directories(dir_ + "/src/sub");
    std::ofstream(dir_ + "/src/metadata.json") << "{}";
    std::ofstream(dir_ + "/src/sub/model_0.pt") << "weights";
    std::ofstream(dir_ + "/secret") << "only root";
    fs::create_symlink(dir_ + "/secret", dir_ + "/src/leak.pt");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  std::string dir_;
};

// Regular files and directories are copied, owned by the uid, 0600/0700;
// a symlink (to a file the trial may not read) is skipped, not followed.
TEST_F(CheckpointStageTest, CopiesFilesOwnedByTheUidAndSkipsSymlinks) {
  const uid_t uid = geteuid() == 0 ? 200123 : geteuid();
  const gid_t gid = geteuid() == 0 ? 200123 : getegid();
  ASSERT_TRUE(StageCheckpoint(dir_ + "/src", dir_ + "/dst", uid, gid, "warm start").ok());
  EXPECT_EQ(Read(dir_ + "/dst/metadata.json"), "{}");
  EXPECT_EQ(Read(dir_ + "/dst/sub/model_0.pt"), "weights");
  EXPECT_FALSE(fs::exists(fs::symlink_status(dir_ + "/dst/leak.pt")));
  for (const char* p : {"/dst", "/dst/sub", "/dst/metadata.json", "/dst/sub/model_0.pt"}) {
    struct stat st {};
    ASSERT_EQ(lstat((dir_ + p).c_str(), &st), 0) << p;
    EXPECT_EQ(st.st_uid, uid) << p;
    EXPECT_EQ(st.st_gid, gid) << p;
    EXPECT_EQ(st.st_mode & 0777, S_ISDIR(st.st_mode) ? 0700u : 0600u) << p;
  }
}

TEST_F(CheckpointStageTest, RefusesBadSourcesAndBounds) {
  EXPECT_EQ(StageCheckpoint("relative", dir_ + "/d1", getuid(), getgid(), "f").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StageCheckpoint(dir_ + "/src/leak.pt", dir_ + "/d2", getuid(), getgid(), "f").code(),
            absl::StatusCode::kInvalidArgument);
  StageLimits few;
  few.max_entries = 2;
  EXPECT_EQ(StageCheckpoint(dir_ + "/src", dir_ + "/d3", getuid(), getgid(), "f", few).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_FALSE(fs::exists(dir_ + "/d3")) << "a failed stage leaves nothing";
  StageLimits small;
  small.max_bytes = 3;
  EXPECT_EQ(StageCheckpoint(dir_ + "/src", dir_ + "/d4", getuid(), getgid(), "f", small).code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace det::agent
