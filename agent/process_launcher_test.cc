#include "agent/process_launcher.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/cgroup.h"

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::Contains;

// Starts `o` and waits up to `timeout` for it to end: a fatal failure if it
// does not start or end, a failure unless it exits 0.
void RunToExit(LaunchOptions o, absl::Duration timeout = absl::Seconds(10)) {
  auto p = Process::Start(std::move(o));
  ASSERT_TRUE(p.ok()) << p.status();
  auto st = (*p)->WaitFor(timeout);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code.value_or(-1), 0);
}

// Collects a process's lines; tests wait on it with a deadline.
struct Lines {
  absl::Mutex mu;
  std::vector<std::string> out ABSL_GUARDED_BY(mu);
  std::vector<std::string> err ABSL_GUARDED_BY(mu);
  bool exited ABSL_GUARDED_BY(mu) = false;

  LaunchOptions Options(std::vector<std::string> argv) {
    LaunchOptions o;
    o.argv = std::move(argv);
    o.env = {"PATH=/usr/bin:/bin"};
    o.on_line = [this](OutputStream s, std::string line) {
      absl::MutexLock lock(&mu);
      (s == OutputStream::kStdout ? out : err).push_back(std::move(line));
    };
    o.on_exit = [this](const ExitStatus&) {
      absl::MutexLock lock(&mu);
      exited = true;
    };
    return o;
  }
  // Waits up to 10 s for a stdout line equal to `want`.
  bool WaitForLine(const std::string& want) {
    absl::MutexLock lock(&mu);
    auto has = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      for (const auto& l : out) {
        if (l == want) return true;
      }
      return false;
    };
    return mu.AwaitWithTimeout(absl::Condition(&has), absl::Seconds(10));
  }
};

TEST(ProcessTest, CapturesLinesAndExitCode) {
  Lines lines;
  auto p = Process::Start(lines.Options(
      {"/bin/sh", "-c", "echo out1; echo err1 >&2; echo; echo out2; printf partial; exit 7"}));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_GT((*p)->pid(), 0);
  auto st = (*p)->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(st.has_value());
  ASSERT_TRUE(st->exit_code.has_value());
  EXPECT_EQ(*st->exit_code, 7);
  EXPECT_FALSE(st->signal_number.has_value());
  absl::MutexLock lock(&lines.mu);
  EXPECT_TRUE(lines.exited);  // on_exit ran before WaitFor returned
  EXPECT_THAT(lines.out, ElementsAre("out1", "", "out2", "partial"));
  EXPECT_THAT(lines.err, ElementsAre("err1"));
}

TEST(ProcessTest, EnvironmentAndWorkingDirectory) {
  Lines lines;
  auto o = lines.Options({"/bin/sh", "-c", "echo \"$FOO\"; pwd"});
  o.env.push_back("FOO=bar baz");
  o.cwd = "/";
  ASSERT_NO_FATAL_FAILURE(RunToExit(std::move(o)));
  absl::MutexLock lock(&lines.mu);
  EXPECT_THAT(lines.out, ElementsAre("bar baz", "/"));
}

TEST(ProcessTest, LongLinesAreSplit) {
  Lines lines;
  auto o = lines.Options({"/bin/sh", "-c", "printf '%0100d\\n' 0"});
  o.max_line_bytes = 40;
  auto p = Process::Start(std::move(o));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->WaitFor(absl::Seconds(10)).has_value());
  absl::MutexLock lock(&lines.mu);
  ASSERT_EQ(lines.out.size(), 3u);
  EXPECT_EQ(lines.out[0].size(), 40u);
  EXPECT_EQ(lines.out[2].size(), 20u);
}

TEST(ProcessTest, ExecFailureIsAnError) {
  Lines lines;
  auto p = Process::Start(lines.Options({"/nonexistent/det-trial"}));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound) << p.status();
}

TEST(ProcessTest, KillEscalatesFromTermToKill) {
  Lines lines;
  auto p = Process::Start(lines.Options(
      {"/bin/sh", "-c", "trap 'echo got-term' TERM; echo ready; while :; do sleep 0.05; done"}));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(lines.WaitForLine("ready"));
  absl::Time t0 = absl::Now();
  (*p)->Kill(absl::Milliseconds(300));
  auto st = (*p)->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(st.has_value());
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(250));
  ASSERT_TRUE(st->signal_number.has_value());
  EXPECT_EQ(*st->signal_number, SIGKILL);
  absl::MutexLock lock(&lines.mu);
  EXPECT_THAT(lines.out, Contains("got-term"));
}

TEST(ProcessTest, KillWithoutGraceIsImmediate) {
  Lines lines;
  auto p = Process::Start(lines.Options({"/bin/sh", "-c", "trap '' TERM; echo ready; sleep 30"}));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(lines.WaitForLine("ready"));
  (*p)->Kill(absl::ZeroDuration());
  auto st = (*p)->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->signal_number.value_or(0), SIGKILL);
}

TEST(ProcessTest, SignalReachesTheGroup) {
  Lines lines;
  auto p = Process::Start(lines.Options({"/bin/sh", "-c", "echo ready; exec sleep 30"}));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(lines.WaitForLine("ready"));
  ASSERT_TRUE((*p)->Signal(SIGTERM).ok());
  auto st = (*p)->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->signal_number.value_or(0), SIGTERM);
  // Signalling an exited process is a no-op.
  EXPECT_TRUE((*p)->Signal(SIGTERM).ok());
}

// Pids of live processes (not zombies) whose command line holds `marker`.
std::vector<pid_t> ProcessesWith(const std::string& marker) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmd(e.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
    std::ifstream stat(e.path() / "stat");
    std::string st((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = st.rfind(')');
    const bool zombie = paren != std::string::npos && paren + 2 < st.size() && st[paren + 2] == 'Z';
    if (!zombie && cmdline.find(marker) != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

// A process that leaves the group (setsid) and outlives its parent is still
// killed when the process ends, before the exit is reported.
void ExpectEscapedDaemonIsKilled(const std::string& cgroup_dir) {
  Lines lines;
  const std::string marker = absl::StrCat("3141.", getpid(), cgroup_dir.empty() ? "1" : "2");
  auto o = lines.Options({"/bin/sh", "-c",
                          "setsid sleep " + marker + " </dev/null >/dev/null 2>&1 & "
                          "sh -c 'sleep " + marker + "1 & echo spawned' ; echo ready"});
  o.cgroup_dir = cgroup_dir;
  ASSERT_NO_FATAL_FAILURE(RunToExit(std::move(o), absl::Seconds(20)));
  // on_exit ran: nothing of the tree may be left (no polling needed).
  EXPECT_TRUE(ProcessesWith("sleep " + marker).empty()) << "an escaped process outlived its trial";
  if (!cgroup_dir.empty()) {
    EXPECT_FALSE(std::filesystem::exists(cgroup_dir));
  }
  absl::MutexLock lock(&lines.mu);
  EXPECT_THAT(lines.out, Contains("ready"));
}

TEST(ProcessTest, EscapedDaemonIsKilledWithTheProcess) { ExpectEscapedDaemonIsKilled(""); }

TEST(ProcessTest, EscapedDaemonIsKilledWithTheProcessInACgroup) {
  auto own = OwnCgroupDir();
  if (!own.ok()) GTEST_SKIP() << "no cgroup v2: " << own.status();
  const std::string dir = absl::StrCat(*own, "/det-launcher-test-", getpid());
  if (!CreateCgroup(dir).ok()) GTEST_SKIP() << "cannot create a cgroup under " << *own;
  ExpectEscapedDaemonIsKilled(dir + "/p");
  std::filesystem::remove(dir);
}

// A killed reaper does not let the process live on unnoticed.
TEST(ProcessTest, KillAfterTheMainProcessExitedIsHarmless) {
  Lines lines;
  auto p = Process::Start(lines.Options({"/bin/sh", "-c", "exit 3"}));
  ASSERT_TRUE(p.ok()) << p.status();
  auto st = (*p)->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code.value_or(-1), 3);
  (*p)->Kill(absl::ZeroDuration());
  EXPECT_TRUE((*p)->Signal(SIGTERM).ok());
}

TEST(ProcessTest, RunsAsAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (setuid), running as uid " << geteuid();
  Lines lines;
  auto o = lines.Options({"/bin/sh", "-c", "id -u; id -g; id -G"});
  o.run_as = RunAs{65534, 65534, {65534}};
  o.cwd = "/";
  ASSERT_NO_FATAL_FAILURE(RunToExit(std::move(o)));
  absl::MutexLock lock(&lines.mu);
  EXPECT_THAT(lines.out, ElementsAre("65534", "65534", "65534"));
}

// The secret reaches the process on fd 4 (a pipe at EOF after it), never
// its environment; the process has no other fd above 2 (the report pipe is
// close-on-exec); its umask is the one asked for. Without a secret fd 4 is
// closed.
TEST(ProcessTest, SecretComesOnFd4NotTheEnvironment) {
  Lines lines;
  // A simple command, not a pipeline: while a pipeline runs, the shell
  // itself holds its pipes' ends, which ls would list (a flaky "0 1 2 3 4 5
  // 6"). ls sorts the single-digit names.
  auto o = lines.Options({"/bin/sh", "-c", "cat <&4; echo; umask; ls /proc/$$/fd; echo END; env"});
  o.env = {"PATH=/usr/bin:/bin"};
  o.secret = "s3cr3t-token";
  o.umask = 007;
  ASSERT_NO_FATAL_FAILURE(RunToExit(std::move(o)));
  {
    absl::MutexLock lock(&lines.mu);
    ASSERT_GE(lines.out.size(), 3u);
    EXPECT_EQ(lines.out[0], "s3cr3t-token");
    EXPECT_EQ(lines.out[1], "0007");
    // The shell's fds: 0-2 and 4 (the secret).
    std::string fds;
    for (size_t i = 2; i < lines.out.size() && lines.out[i] != "END"; ++i) fds += lines.out[i] + " ";
    EXPECT_EQ(fds, "0 1 2 4 ");
    for (size_t i = 1; i < lines.out.size(); ++i) EXPECT_FALSE(absl::StrContains(lines.out[i], "s3cr3t")) << lines.out[i];
  }

  Lines none;
  auto without = Process::Start(none.Options({"/bin/sh", "-c", "cat <&4 && echo open || echo closed"}));
  ASSERT_TRUE(without.ok()) << without.status();
  ASSERT_TRUE((*without)->WaitFor(absl::Seconds(10)).has_value());
  absl::MutexLock lock(&none.mu);
  EXPECT_THAT(none.out, ElementsAre("closed"));
}

TEST(ProcessTest, OversizedSecretIsRefused) {
  Lines lines;
  auto o = lines.Options({"/bin/true"});
  o.secret = std::string(kMaxSecretBytes + 1, 'x');
  auto p = Process::Start(std::move(o));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
}

TEST(ProcessTest, UnreachableWorkingDirectoryIsAnError) {
  Lines lines;
  auto o = lines.Options({"/bin/true"});
  o.cwd = "/nonexistent-dir";
  auto p = Process::Start(std::move(o));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound) << p.status();
  EXPECT_TRUE(absl::StrContains(p.status().message(), "chdir")) << p.status();
}

}  // namespace
}  // namespace det::agent
