#include "common/proc_stats.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

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

// A child that exited and is not reaped is a zombie: /proc still has it, with
// state Z and no resident memory; exited() says so (the agent leaves it out).
TEST(ProcStatsTest, AnUnreapedChildIsAZombieThatHasExited) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  absl::StatusOr<ProcStats> stats = ReadProcStats(child);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (stats.ok() && stats->state != 'Z' && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    stats = ReadProcStats(child);
  }
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->state, 'Z');
  EXPECT_TRUE(stats->exited());
  EXPECT_EQ(stats->rss_bytes, 0u);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  auto self = ReadProcStats(::getpid());
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_EQ(self->state, 'R');  // reading its own stat, this thread runs
  EXPECT_FALSE(self->exited());
}

// btime comes after the per-CPU and interrupt lines, which pass 16 KiB on a
// large host; it is found after them, in a line longer than any buffer.
TEST(ProcStatsTest, BootTimeIsFoundAfterMoreThan16KiBOfLines) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                    ("proc_stat_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "stat").string();
  {
    std::ofstream out(path);
    out << "cpu  1 2 3 4 5 6 7 8 9 10\n";
    for (int cpu = 0; cpu < 256; ++cpu) out << "cpu" << cpu << " 123456 0 654321 99999999 12345 0 777 0 0 0\n";
    out << "intr 123456789";
    for (int irq = 0; irq < 8000; ++irq) out << " " << irq;
    out << "\nctxt 42\nbtime 1700000000\nprocesses 7\n";
  }
  ASSERT_GT(std::filesystem::file_size(path), 32u * 1024);
  absl::StatusOr<double> btime = ReadBootTimeSeconds(path);
  ASSERT_TRUE(btime.ok()) << btime.status();
  EXPECT_EQ(*btime, 1700000000.0);

  {
    std::ofstream out(path);
    out << "intr 1 btime 5\nctxt 42\n";  // no btime line (only inside another)
  }
  btime = ReadBootTimeSeconds(path);
  EXPECT_EQ(btime.status().code(), absl::StatusCode::kNotFound) << btime.status();
  EXPECT_THAT(btime.status().message(), HasSubstr(path));
  std::filesystem::remove_all(dir);
}

TEST(ProcStatsTest, ANonPositivePidIsInvalid) {
  EXPECT_EQ(ReadProcStats(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadProcStats(-5).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace det
