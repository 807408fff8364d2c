#include "common/proc_stats.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace det {
namespace {

using ::testing::HasSubstr;

TEST(ProcStatsTest, ReadsThisProcess) {
  auto stats = ReadProcStats(::getpid());
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_GT(stats->rss_bytes, 0u);
  EXPECT_GT(stats->open_fds, 0);  // stdin, stdout, stderr at least
  EXPECT_GE(stats->max_fds, stats->open_fds);
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_GT(stats->start_time_seconds, now - 24 * 3600.0);
  EXPECT_LE(stats->start_time_seconds, now + 2);
}

TEST(ProcStatsTest, CpuSecondsGrowAfterABusyLoop) {
  auto before = ReadProcStats(::getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  // Busy until the process's own CPU clock has advanced by 0.2 s (bounded
  // by 30 s of wall time so a starved test fails rather than hangs).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  volatile uint64_t sink = 0;
  while (static_cast<double>(std::clock()) / CLOCKS_PER_SEC < before->cpu_seconds + 0.25 &&
         std::chrono::steady_clock::now() < deadline) {
    for (int i = 0; i < 100000; ++i) sink = sink + static_cast<uint64_t>(i);
  }
  auto after = ReadProcStats(::getpid());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_GE(after->cpu_seconds, before->cpu_seconds + 0.1);
}

TEST(ProcStatsTest, OpenFdsCountsADescriptorOpenedSince) {
  auto before = ReadProcStats(::getpid());
  ASSERT_TRUE(before.ok()) << before.status();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  auto after = ReadProcStats(::getpid());
  ::close(fds[0]);
  ::close(fds[1]);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->open_fds, before->open_fds + 2);
}

TEST(ProcStatsTest, AnExitedProcessIsNotFoundNamingThePid) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // reaped: the pid no longer exists
  auto stats = ReadProcStats(child);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kNotFound) << stats.status();
  EXPECT_THAT(stats.status().message(), HasSubstr(std::to_string(child)));
}

TEST(ProcStatsTest, ANonPositivePidIsInvalid) {
  EXPECT_EQ(ReadProcStats(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadProcStats(-5).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace det
