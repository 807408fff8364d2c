#include "agent/process_launcher.h"

#include <signal.h>

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::Contains;

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
  auto p = Process::Start(std::move(o));
  ASSERT_TRUE(p.ok()) << p.status();
  auto st = (*p)->WaitFor(absl::Seconds(10));
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->exit_code.value_or(-1), 0);
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

}  // namespace
}  // namespace det::agent
