#include "common/bounded_file.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace det {
namespace {

using ::testing::HasSubstr;

class BoundedFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    det::testing::WriteFile(dir_ / name, text);
    return dir_ / name;
  }
  det::testing::TempDir dir_;
};

TEST_F(BoundedFileTest, ReadsAFileOfAtMostTheBoundWhole) {
  const std::string path = Write("ok.yaml", std::string("a\0b\n", 4));
  auto text = ReadBoundedFile(path, 4, "config 'ok.yaml'");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, std::string("a\0b\n", 4));
  auto empty = ReadBoundedFile(Write("empty", ""), 0, "empty");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(*empty, "");
}

TEST_F(BoundedFileTest, OneByteOverTheBoundIsRefusedNamingTheFile) {
  const std::string path = Write("big.yaml", std::string(1025, 'x'));
  auto text = ReadBoundedFile(path, 1024, "resource pools file 'big.yaml'");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(), "resource pools file 'big.yaml' is larger than 1024 bytes");
}

TEST_F(BoundedFileTest, MissingFileAndDirectoryCannotBeRead) {
  auto missing = ReadBoundedFile(dir_ / "none.json", 100, "--slurm-job-file none.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "--slurm-job-file none.json: cannot read it");
  auto directory = ReadBoundedFile(dir_.path(), 100, "overrides");
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.status().message(), HasSubstr("overrides: cannot read it"));
}

}  // namespace
}  // namespace det
