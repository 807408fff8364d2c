// PrestartPool against a fake det-trial (a shell script): the assignment
// handed over, the token only after the acknowledgement and the output
// routed to the rank; a process dying before it acknowledges falls back to
// a fresh launch; a killed idle process is replaced. The real det-trial
// --prestart, as root with two tenants: tests/prestart_pool_test.cc.
#include "agent/prestart_pool.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace det::agent {
namespace {

using det::testing::TempDir;
using det::testing::WriteFile;

// `--prestart`: `prestart_body` with the channel on fd 4; `--managed X`:
// prints "fresh X".
std::string FakeDetTrial(const TempDir& dir, const std::string& prestart_body) {
  const std::string path = dir / "fake-det-trial";
  WriteFile(path, absl::StrCat("#!/bin/sh\nif [ \"$1\" = --prestart ]; then\n", prestart_body,
                               "\nfi\necho \"fresh $2\"\n"));
  chmod(path.c_str(), 0755);
  return path;
}

struct Rank {
  absl::Mutex mu;
  std::vector<std::string> lines ABSL_GUARDED_BY(mu);
  bool exited ABSL_GUARDED_BY(mu) = false;

  LaunchOptions Options(const std::string& det_trial) {
    LaunchOptions lo;
    lo.argv = {det_trial, "--managed", "/trials/t.so"};
    lo.env = {"PATH=/usr/bin:/bin", "DET_ALLOCATION_TOKEN_FD=4"};
    lo.cwd = "/";
    lo.secret = "the-token";
    lo.on_line = [this](OutputStream, std::string line) {
      absl::MutexLock lock(&mu);
      lines.push_back(std::move(line));
    };
    lo.on_exit = [this](const ExitStatus&) {
      absl::MutexLock lock(&mu);
      exited = true;
    };
    return lo;
  }
  std::string Wait() {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(mu.AwaitWithTimeout(absl::Condition(&exited), absl::Seconds(20)));
    return absl::StrJoin(lines, "\n");
  }
};

bool PollFor(const std::function<bool()>& pred) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

TEST(PrestartPoolTest, AnIdleProcessTakesTheRankAndGetsTheTokenAfterItsAcknowledgement) {
  TempDir dir;
  // Reads the assignment, acknowledges, then prints what else arrives (the
  // token, up to EOF) and where it is.
  const std::string fake = FakeDetTrial(dir, R"SH(dd bs=1M count=1 <&4 2>/dev/null | grep -a -o '"trial_path":"[^"]*"'
printf A >&4
echo "token $(cat <&4) cwd $(pwd)"
exit 0)SH");
  PrestartPoolOptions po;
  po.size = 1;
  po.det_trial_path = fake;
  po.env = {"PATH=/usr/bin:/bin"};
  PrestartPool pool(po);
  ASSERT_TRUE(PollFor([&] { return pool.IdleCount() == 1; }));
  Rank rank;
  bool prestarted = false;
  auto p = pool.Launch(rank.Options(fake), &prestarted);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(prestarted);
  const std::string out = rank.Wait();
  EXPECT_NE(out.find("\"trial_path\":\"/trials/t.so\""), std::string::npos) << out;
  EXPECT_NE(out.find("token the-token cwd /"), std::string::npos) << out;
  // The pool refills.
  EXPECT_TRUE(PollFor([&] { return pool.IdleCount() == 1; }));
}

TEST(PrestartPoolTest, AProcessDyingBeforeItAcknowledgesFallsBackToAFreshLaunch) {
  TempDir dir;
  const std::string fake = FakeDetTrial(dir, "head -c 1 <&4 >/dev/null; exit 3");
  PrestartPoolOptions po;
  po.size = 1;
  po.det_trial_path = fake;
  po.env = {"PATH=/usr/bin:/bin"};
  PrestartPool pool(po);
  ASSERT_TRUE(PollFor([&] { return pool.IdleCount() == 1; }));
  Rank rank;
  bool prestarted = true;
  LaunchOptions lo = rank.Options(fake);
  lo.secret.clear();  // a fresh launch of the fake reads no token
  auto p = pool.Launch(std::move(lo), &prestarted);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(prestarted);
  EXPECT_EQ(rank.Wait(), "fresh /trials/t.so");
}

TEST(PrestartPoolTest, AKilledIdleProcessIsReplaced) {
  TempDir dir;
  const std::string fake = FakeDetTrial(dir, "exec cat <&4 >/dev/null");
  PrestartPoolOptions po;
  po.size = 2;
  po.det_trial_path = fake;
  po.env = {"PATH=/usr/bin:/bin"};
  PrestartPool pool(po);
  std::vector<pid_t> before;
  ASSERT_TRUE(PollFor([&] { return (before = pool.IdlePids()).size() == 2; }));
  ASSERT_EQ(kill(before[0], SIGKILL), 0);
  std::vector<pid_t> after;
  EXPECT_TRUE(PollFor([&] {
    after = pool.IdlePids();
    return after.size() == 2 && after[0] != before[0] && after[1] != before[0];
  }));
}

// An upgrade replaces det-trial: the idle processes started from the old
// binary are discarded, never assigned; the rank starts fresh and the pool
// refills from the new binary.
TEST(PrestartPoolTest, IdleProcessesOfAReplacedBinaryAreNotAssigned) {
  TempDir dir;
  const std::string fake = FakeDetTrial(dir, "head -c 1 <&4 >/dev/null; printf A >&4; echo old; exit 0");
  PrestartPoolOptions po;
  po.size = 1;
  po.det_trial_path = fake;
  po.env = {"PATH=/usr/bin:/bin"};
  PrestartPool pool(po);
  std::vector<pid_t> old;
  ASSERT_TRUE(PollFor([&] { return (old = pool.IdlePids()).size() == 1; }));
  // Installed as package managers do: a new file renamed over the old one.
  TempDir next;
  const std::string replaced = FakeDetTrial(next, "exec cat <&4 >/dev/null");
  ASSERT_EQ(rename(replaced.c_str(), fake.c_str()), 0);
  Rank rank;
  bool prestarted = true;
  LaunchOptions lo = rank.Options(fake);
  lo.secret.clear();  // a fresh launch of the fake reads no token
  auto p = pool.Launch(std::move(lo), &prestarted);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(prestarted);
  EXPECT_EQ(rank.Wait(), "fresh /trials/t.so");
  std::vector<pid_t> refilled;
  EXPECT_TRUE(PollFor([&] { return (refilled = pool.IdlePids()).size() == 1 && refilled[0] != old[0]; }));
}

}  // namespace
}  // namespace det::agent
