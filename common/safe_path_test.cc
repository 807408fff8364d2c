#include "common/safe_path.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace det {
namespace {

namespace fs = std::filesystem;

TEST(SafePathTest, PathComponent) {
  EXPECT_TRUE(ValidatePathComponent("0f3c9a1e-uuid", "uuid").ok());
  for (std::string bad : {std::string(""), std::string("."), std::string(".."), std::string("a/b"),
                          std::string("../x"), std::string("/etc"), std::string("a\\b"), std::string("a\0b", 3),
                          std::string(256, 'a')}) {
    absl::Status st = ValidatePathComponent(bad, "checkpoint uuid");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("checkpoint uuid"), absl::string_view::npos);
  }
}

TEST(SafePathTest, RelativePath) {
  EXPECT_TRUE(ValidateRelativePath("a/b/c", "p").ok());
  EXPECT_TRUE(ValidateRelativePath("./a//b", "p").ok());
  EXPECT_TRUE(ValidateRelativePath("a..b/..c", "p").ok());
  for (std::string bad : {std::string("/abs"), std::string(".."), std::string("../x"), std::string("a/../../x"),
                          std::string("a/.."), std::string("a\0", 2)}) {
    EXPECT_EQ(ValidateRelativePath(bad, "storage_path").code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SafePathTest, JoinUnderRejectsSymlinkEscapes) {
  fs::path dir = fs::temp_directory_path() / ("safe_path_test_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "base" / "inside");
  fs::create_directories(dir / "outside");
  fs::create_directory_symlink(dir / "outside", dir / "base" / "link_out");
  fs::create_directory_symlink(dir / "base" / "inside", dir / "base" / "link_in");
  const std::string base = (dir / "base").string();

  auto ok = JoinUnder(base, "inside/ckpt", "p");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, (dir / "base" / "inside" / "ckpt").string());
  EXPECT_TRUE(JoinUnder(base, "link_in/new", "p").ok());
  EXPECT_TRUE(JoinUnder(base, "not/yet/created", "p").ok());
  EXPECT_EQ(JoinUnder(base, "link_out/x", "p").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(JoinUnder(base, "../outside", "p").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(JoinUnder(base, "/etc/passwd", "p").status().code(), absl::StatusCode::kInvalidArgument);
  // A sibling whose name starts with the base's name is outside.
  fs::create_directories(dir / "base2");
  fs::create_directory_symlink(dir / "base2", dir / "base" / "sib");
  EXPECT_EQ(JoinUnder(base, "sib", "p").status().code(), absl::StatusCode::kInvalidArgument);
  fs::remove_all(dir);
}

TEST(SafePathTest, Sha256) {
  EXPECT_TRUE(ValidateSha256(std::string(64, 'a'), "sha256").ok());
  EXPECT_FALSE(ValidateSha256(std::string(63, 'a'), "sha256").ok());
  EXPECT_FALSE(ValidateSha256(std::string(64, 'A'), "sha256").ok());
  EXPECT_FALSE(ValidateSha256("../../../../etc/passwd" + std::string(42, 'a'), "sha256").ok());
}

}  // namespace
}  // namespace det
