#include "common/secret_token_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace det {
namespace {

using ::testing::HasSubstr;

class SecretTokenFileTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    det::testing::WriteFile(dir_ / name, text);
    EXPECT_EQ(::chmod((dir_ / name).c_str(), mode), 0);
    return dir_ / name;
  }
  // The error of reading `path` as --token-file ("ok" when it is accepted).
  static std::string Error(const std::string& path) {
    absl::StatusOr<std::string> token = ReadSecretTokenFile(path, "--token-file");
    return token.ok() ? std::string("ok") : std::string(token.status().message());
  }
  det::testing::TempDir dir_;
};

TEST_F(SecretTokenFileTest, ReadsAnOwnerOnlyTokenTrimmed) {
  absl::StatusOr<std::string> token = ReadSecretTokenFile(Write("token", "  s3cret-Token_1\n"), "--token-file");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "s3cret-Token_1");
  const std::string max(kMaxSecretTokenBytes, 'a');
  EXPECT_EQ(ReadSecretTokenFile(Write("max", max), "f").value_or(""), max);
}

// A FIFO would block a plain open() or read() until a writer comes: it is
// refused at once (O_NONBLOCK, then fstat), naming the flag.
TEST_F(SecretTokenFileTest, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(Error(fifo), "--token-file " + fifo + " is not a regular file (it is a FIFO): name a file holding the token");
  EXPECT_THAT(Error(dir_.path()), HasSubstr("is not a regular file (it is a directory)"));
}

TEST_F(SecretTokenFileTest, ASymlinkIsNotFollowed) {
  const std::string target = Write("target", "tok");
  const std::string link = dir_ / "link";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(Error(link), "--token-file " + link + " is a symbolic link: name the token file itself (links are not "
                         "followed)");
}

TEST_F(SecretTokenFileTest, GroupOrOtherBitsAreRefused) {
  const std::string open = Write("open", "tok", 0644);
  EXPECT_EQ(Error(open), "--token-file " + open + ": group or others may access it (mode 644); it holds a secret: "
                         "chmod 600 " + open);
  EXPECT_THAT(Error(Write("group", "tok", 0640)), HasSubstr("(mode 640)"));
  EXPECT_THAT(Error(Write("x", "tok", 0601)), HasSubstr("chmod 600"));
}

TEST_F(SecretTokenFileTest, AnotherOwnerIsRefused) {
  // Root is a required capability of the test command (CI runs tests as root).
  ASSERT_EQ(::geteuid(), 0u) << "needs root to chown a file to another user: run the tests as root";
  const std::string other = Write("other", "tok");
  ASSERT_EQ(::chown(other.c_str(), 65534, 65534), 0);
  EXPECT_EQ(Error(other), "--token-file " + other + " is owned by uid 65534, not by this daemon's uid 0: it holds a "
                          "secret; chown it to the daemon's user");
}

TEST_F(SecretTokenFileTest, EmptyLargeMissingOrNonAsciiTokensAreRefused) {
  EXPECT_THAT(Error(Write("empty", " \n")), HasSubstr("--token-file " + (dir_ / "empty") + ": empty; write the token"));
  EXPECT_THAT(Error(Write("large", std::string(kMaxSecretTokenBytes + 1, 'a'))), HasSubstr("larger than 4096 bytes"));
  EXPECT_THAT(Error(dir_ / "missing"),
              HasSubstr("--token-file " + (dir_ / "missing") + ": cannot read it: No such file or directory"));
  for (const std::string& bad : std::vector<std::string>{"two words", "tab\there", "caf\xc3\xa9", std::string("nul\0x", 5), "del\x7f"}) {
    EXPECT_THAT(Error(Write("bad", bad)), HasSubstr("space, control or non-ASCII character")) << bad;
  }
}

}  // namespace
}  // namespace det
