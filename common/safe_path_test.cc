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

TEST(SafePathTest, Uuid) {
  EXPECT_TRUE(ValidateUuid("0f3c9a1e-5b2d-4c6e-8f10-112233445566", "uuid").ok());
  for (std::string bad : {std::string(""), std::string("../../det.db"), std::string("0F3C9A1E-5B2D-4C6E-8F10-112233445566"),
                          std::string("0f3c9a1e5b2d4c6e8f10112233445566"), std::string("0f3c9a1e-5b2d-4c6e-8f10-11223344556"),
                          std::string("0f3c9a1e-5b2d-4c6e-8f10-1122334455667"), std::string("0f3c9a1e-5b2d-4c6e-8f10/112233445566"),
                          std::string("g f3c9a1e-5b2d-4c6e-8f10-112233445566")}) {
    absl::Status st = ValidateUuid(bad, "uuid");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("uuid"), absl::string_view::npos);
  }
}

TEST(SafePathTest, PathWithinRoots) {
  EXPECT_EQ(LexicalPath("/a/b/../c/"), "/a/c");
  EXPECT_TRUE(PathWithin(LexicalPath("/srv/ck/x"), LexicalPath("/srv/ck/")));
  EXPECT_TRUE(PathWithin("/srv/ck", "/srv/ck"));
  EXPECT_FALSE(PathWithin(LexicalPath("/srv/ck/../db"), "/srv/ck"));
  EXPECT_FALSE(PathWithin("/srv/ck2", "/srv/ck"));
  EXPECT_TRUE(PathWithin("/anything", "/"));
  const fs::path dir = fs::temp_directory_path() / ("det_within_" + std::to_string(getpid()));
  fs::create_directories(dir / "root");
  fs::create_directories(dir / "data");
  fs::create_directory_symlink(dir / "data", dir / "root" / "to_data");
  const std::string root = ResolvedPath((dir / "root").string());
  EXPECT_TRUE(PathWithin(ResolvedPath((dir / "root" / "new" / "deeper").string()), root));
  // Lexically inside, but the existing prefix leads out through a symlink.
  EXPECT_TRUE(PathWithin(LexicalPath((dir / "root" / "to_data" / "x").string()), LexicalPath((dir / "root").string())));
  EXPECT_FALSE(PathWithin(ResolvedPath((dir / "root" / "to_data" / "x").string()), root));
  fs::remove_all(dir);
}

// A tree with files, subdirectories and symlinks out of it: removed, and
// nothing the symlinks point at is touched.
TEST(SafePathTest, RemoveTreeNoFollowNeverLeavesTheTree) {
  const fs::path dir = fs::temp_directory_path() / ("det_rmtree_" + std::to_string(getpid()));
  fs::create_directories(dir / "root" / "ck" / "sub" / "subsub");
  fs::create_directories(dir / "precious");
  std::ofstream(dir / "precious" / "det.db") << "db";
  std::ofstream(dir / "root" / "ck" / "model.pt") << "w";
  std::ofstream(dir / "root" / "ck" / "sub" / "subsub" / "x") << "x";
  fs::create_directory_symlink(dir / "precious", dir / "root" / "ck" / "sub" / "to_precious");
  fs::create_symlink(dir / "precious" / "det.db", dir / "root" / "ck" / "db_link");
  fs::create_directory_symlink(dir / "precious", dir / "root" / "link_ck");

  auto fd = OpenDirNoFollow((dir / "root").string(), "");
  ASSERT_TRUE(fd.ok()) << fd.status();
  // The checkpoint name itself a symlink: refused, its target untouched.
  EXPECT_EQ(RemoveTreeNoFollow(*fd, "link_ck").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::exists(dir / "precious" / "det.db"));
  EXPECT_TRUE(fs::is_symlink(dir / "root" / "link_ck"));
  // A real tree with links inside: the links go, their targets stay.
  EXPECT_TRUE(RemoveTreeNoFollow(*fd, "ck").ok());
  EXPECT_FALSE(fs::exists(dir / "root" / "ck"));
  EXPECT_TRUE(fs::exists(dir / "precious" / "det.db"));
  EXPECT_TRUE(RemoveTreeNoFollow(*fd, "ck").ok());  // already gone: OK
  EXPECT_FALSE(RemoveTreeNoFollow(*fd, "../precious").ok());
  close(*fd);

  // A symlinked component below the trusted root is not followed.
  EXPECT_EQ(OpenDirNoFollow((dir / "root").string(), "link_ck").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(OpenDirNoFollow((dir / "root").string(), "../precious").ok());
  EXPECT_EQ(OpenDirNoFollow((dir / "root").string(), "missing").status().code(), absl::StatusCode::kNotFound);

  // Nesting deeper than max_depth is refused rather than recursing on.
  fs::path deep = dir / "root" / "deep";
  for (int i = 0; i < 5; ++i) deep /= "d";
  fs::create_directories(deep);
  fd = OpenDirNoFollow((dir / "root").string(), ".");
  ASSERT_TRUE(fd.ok());
  EXPECT_EQ(RemoveTreeNoFollow(*fd, "deep", /*max_depth=*/3).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(RemoveTreeNoFollow(*fd, "deep").ok());
  close(*fd);
  EXPECT_TRUE(fs::exists(dir / "precious" / "det.db"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace det
