#include "trial_runtime/runtime/allocation_token.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace det::runtime {
namespace {

// Sets DET_ALLOCATION_TOKEN_FD / DET_ALLOCATION_TOKEN for one test.
class AllocationTokenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("DET_ALLOCATION_TOKEN_FD");
    unsetenv("DET_ALLOCATION_TOKEN");
  }
  void TearDown() override { SetUp(); }
  // The read end of a pipe holding `content` (write end closed).
  int PipeWith(const std::string& content) {
    int p[2];
    EXPECT_EQ(pipe(p), 0);
    EXPECT_EQ(write(p[1], content.data(), content.size()), static_cast<ssize_t>(content.size()));
    close(p[1]);
    return p[0];
  }
};

TEST_F(AllocationTokenTest, ReadsTheTokenFromTheFdAndClosesIt) {
  const int fd = PipeWith("abc123\n");
  setenv("DET_ALLOCATION_TOKEN_FD", std::to_string(fd).c_str(), 1);
  setenv("DET_ALLOCATION_TOKEN", "from-the-environment", 1);
  auto token = ReadAllocationToken();
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc123");  // the fd wins over the environment
  EXPECT_EQ(fcntl(fd, F_GETFD), -1) << "fd " << fd << " left open";
}

TEST_F(AllocationTokenTest, FallsBackToTheEnvironment) {
  setenv("DET_ALLOCATION_TOKEN", "manual", 1);
  EXPECT_EQ(*ReadAllocationToken(), "manual");
  unsetenv("DET_ALLOCATION_TOKEN");
  EXPECT_EQ(*ReadAllocationToken(), "");
}

TEST_F(AllocationTokenTest, RefusesABadFdNamingTheVariable) {
  for (const char* bad : {"x", "1", "-4", "70000", "4x"}) {
    setenv("DET_ALLOCATION_TOKEN_FD", bad, 1);
    auto token = ReadAllocationToken();
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(token.status().message().find("DET_ALLOCATION_TOKEN_FD"), absl::string_view::npos);
  }
  setenv("DET_ALLOCATION_TOKEN_FD", "1000", 1);  // not open
  EXPECT_EQ(ReadAllocationToken().status().code(), absl::StatusCode::kInvalidArgument);
  setenv("DET_ALLOCATION_TOKEN_FD", std::to_string(PipeWith(" \n")).c_str(), 1);
  EXPECT_NE(ReadAllocationToken().status().message().find("no allocation token"), absl::string_view::npos);
  // Bounded: a pipe with more than the limit is refused, not read on.
  setenv("DET_ALLOCATION_TOKEN_FD", std::to_string(PipeWith(std::string(kMaxAllocationTokenBytes + 1, 'a'))).c_str(),
         1);
  EXPECT_NE(ReadAllocationToken().status().message().find("more than"), absl::string_view::npos);
}

TEST_F(AllocationTokenTest, MakeNonDumpable) {
  // In a child: the test process itself stays dumpable.
  pid_t pid = fork();
  if (pid == 0) _exit(MakeNonDumpable() && prctl(PR_GET_DUMPABLE) == 0 ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace det::runtime
