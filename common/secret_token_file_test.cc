#include "common/secret_token_file.h"

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
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
  // The same for a daemon running as euid/egid.
  static std::string ErrorAs(const std::string& path, uid_t euid, gid_t egid) {
    absl::StatusOr<std::string> token = ReadSecretTokenFileAs(path, "--token-file", euid, egid);
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

// A Kubernetes Secret volume: each key is a link to ..data/KEY, ..data a
// link to a timestamped directory holding root-owned files (defaultMode
// 0400, or 0440 with the pod's fsGroup). The link is followed and the
// target checked.
TEST_F(SecretTokenFileTest, AKubernetesSecretVolumeLinkIsFollowed) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root to make root-owned files for another daemon: run the tests as root";
  ASSERT_EQ(::mkdir((dir_ / "..2026_11_28_11_50_36.1234").c_str(), 0755), 0);
  Write("..2026_11_28_11_50_36.1234/metrics-token", "k8s-token\n", 0400);
  ASSERT_EQ(::symlink("..2026_11_28_11_50_36.1234", (dir_ / "..data").c_str()), 0);
  const std::string key = dir_ / "metrics-token";
  ASSERT_EQ(::symlink("..data/metrics-token", key.c_str()), 0);
  EXPECT_EQ(Error(key), "ok");
  EXPECT_EQ(ReadSecretTokenFileAs(key, "f", 1000, 1000).value_or(""), "k8s-token");  // a non-root daemon
  // fsGroup 2000: group 2000, mode 0440.
  ASSERT_EQ(::chown((dir_ / "..data/metrics-token").c_str(), 0, 2000), 0);
  ASSERT_EQ(::chmod((dir_ / "..data/metrics-token").c_str(), 0440), 0);
  EXPECT_EQ(ReadSecretTokenFileAs(key, "f", 1000, 2000).value_or(""), "k8s-token");
  // The checks are on the target: a link to a file others can read is refused, naming the link.
  ASSERT_EQ(::chmod((dir_ / "..data/metrics-token").c_str(), 0444), 0);
  EXPECT_EQ(ErrorAs(key, 1000, 2000), "--token-file " + key + ": group or others may access it (mode 444); it holds "
                                      "a secret: chmod 600 " + key + " (0400, or 0440 with group root or the daemon's "
                                      "group, also do)");
}

// systemd LoadCredential= for User=det: a root-owned file whose ACL grants
// det read, which shows as root:root 0440.
TEST_F(SecretTokenFileTest, ARootOwnedRootGroupCredentialIsReadByANonRootDaemon) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root to make root-owned files for another daemon: run the tests as root";
  const std::string cred = Write("metrics-token", "cred-token", 0440);
  ASSERT_EQ(::chown(cred.c_str(), 0, 0), 0);
  EXPECT_EQ(ReadSecretTokenFileAs(cred, "f", 999, 999).value_or(""), "cred-token");
  // The real identity: a child that is uid/gid 65534 (nobody) with root as a
  // supplementary group (standing in for the ACL, so that open() works)
  // reads it through ReadSecretTokenFile.
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0711), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const gid_t root_group = 0;
    if (::setgroups(1, &root_group) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    absl::StatusOr<std::string> token = ReadSecretTokenFile(cred, "f");
    if (!token.ok()) std::fprintf(stderr, "as nobody: %s\n", std::string(token.status().message()).c_str());
    ::_exit(token.ok() && *token == "cred-token" ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "a daemon running as nobody refused root:root 0440 (3: setuid failed)";
}

TEST_F(SecretTokenFileTest, GroupOrOtherBitsAreRefused) {
  const std::string open = Write("open", "tok", 0644);
  EXPECT_EQ(Error(open), "--token-file " + open + ": group or others may access it (mode 644); it holds a secret: "
                         "chmod 600 " + open + " (0400, or 0440 with group root or the daemon's group, also do)");
  EXPECT_THAT(Error(Write("x", "tok", 0601)), HasSubstr("(mode 601); it holds a secret: chmod 600"));
  EXPECT_THAT(Error(Write("all", "tok", 0444)), HasSubstr("group or others may access it (mode 444)"));
  EXPECT_EQ(Error(Write("owner-only", "tok", 0400)), "ok");
}

// Group read is allowed for group root or the daemon's group; group write
// never; another group's read never.
TEST_F(SecretTokenFileTest, GroupReadOnlyForRootOrTheDaemonsGroup) {
  ASSERT_EQ(::geteuid(), 0u) << "needs root to chown a file to another group: run the tests as root";
  const std::string mine = Write("mine", "tok", 0440);
  ASSERT_EQ(::chown(mine.c_str(), 1000, 1000), 0);
  EXPECT_EQ(ReadSecretTokenFileAs(mine, "f", 1000, 1000).value_or(""), "tok");
  EXPECT_EQ(ErrorAs(mine, 1000, 2000), "--token-file " + mine + ": group gid 1000 may access it (mode 440), neither "
                                       "root nor this daemon's gid 2000; it holds a secret: chmod 600 " + mine +
                                       " (0400, or 0440 with group root or the daemon's group, also do), or chgrp it "
                                       "to the daemon's group");
  const std::string writable = Write("writable", "tok", 0460);
  ASSERT_EQ(::chown(writable.c_str(), 1000, 1000), 0);
  EXPECT_THAT(ErrorAs(writable, 1000, 1000), HasSubstr(": its group may write it (mode 460)"));
  ASSERT_EQ(::chown(writable.c_str(), 0, 0), 0);
  EXPECT_THAT(ErrorAs(writable, 1000, 1000), HasSubstr(": its group may write it (mode 460)"));
}

TEST_F(SecretTokenFileTest, AnotherOwnerIsRefused) {
  // Root is a required capability of the test command (CI runs tests as root).
  ASSERT_EQ(::geteuid(), 0u) << "needs root to chown a file to another user: run the tests as root";
  const std::string other = Write("other", "tok");
  ASSERT_EQ(::chown(other.c_str(), 65534, 65534), 0);
  EXPECT_EQ(Error(other), "--token-file " + other + " is owned by uid 65534, neither this daemon's uid 0 nor root: it "
                          "holds a secret; chown it to the daemon's user");
  EXPECT_THAT(ErrorAs(other, 1000, 1000), HasSubstr("is owned by uid 65534, neither this daemon's uid 1000 nor root"));
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
