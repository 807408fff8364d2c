#include "trial_runtime/runtime/prestart_mode.h"

#include <dirent.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/exit_codes.h"
#include "common/fd_io.h"
#include "common/prestart_assignment.h"
#include "trial_runtime/runtime/allocation_token.h"
#include "trial_runtime/runtime/managed_mode.h"

extern char** environ;

namespace det::runtime {
namespace {

constexpr int kFd = det::kPrestartChannelFd;

bool ReadAll(int fd, void* data, size_t n) { return ReadFull(fd, data, n); }
void WriteAll(int fd, const std::string& s) { (void)WriteFull(fd, s.data(), s.size()); }

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, " failed: ", std::strerror(errno)));
}

// Every fd but the standard streams and the channel: whatever the idle
// process (LibTorch's initialisation) opened is not the trial's.
void CloseOtherFds() {
  close(3);
  if (syscall(SYS_close_range, kFd + 1, ~0U, 0) != 0) {
    for (int fd = kFd + 1; fd < 65536; ++fd) close(fd);
  }
}

// The steps of a fresh launch (agent/reaper.cc StartProcess), in its order.
absl::Status BecomeAssigned(const PrestartAssignment& a, pid_t reaper) {
  CloseOtherFds();
  if (chdir(a.cwd.c_str()) != 0) return Errno(absl::StrCat("chdir ", a.cwd));
  if (a.umask >= 0) umask(static_cast<mode_t>(a.umask));
  if (a.set_user) {
    std::vector<gid_t> groups(a.groups.begin(), a.groups.end());
    if (setgroups(groups.size(), groups.data()) != 0) return Errno("setgroups");
    if (setgid(a.gid) != 0) return Errno(absl::StrCat("setgid(", a.gid, ")"));
    if (setuid(a.uid) != 0) return Errno(absl::StrCat("setuid(", a.uid, ")"));
    if (setuid(0) == 0) return absl::InternalError("setuid(0) still works after dropping to the user");
    // No exec follows, so nothing recomputes the capabilities as a fresh
    // launch's exec does: none may be left.
    std::ifstream in("/proc/self/status");
    std::stringstream status;
    status << in.rdbuf();
    if (absl::Status st = CheckNoCapabilitiesLeft(status.str()); !st.ok()) return st;
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);  // no ptrace by the user's other processes
  }
  // Changing credentials cleared it; the reaper must still be the parent.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != reaper) return absl::InternalError("the reaper is gone");
  if (clearenv() != 0) return absl::InternalError("clearenv failed");
  for (const std::string& e : a.env) {
    const size_t eq = e.find('=');
    if (setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1) != 0) return Errno("setenv");
  }
  return absl::OkStatus();
}

// The fds this process holds, "0 1 2 4": after CloseOtherFds only the
// standard streams and the channel.
std::string OpenFds() {
  std::vector<int> fds;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return "unknown";
  while (dirent* e = readdir(d)) {
    int fd = 0;
    if (absl::SimpleAtoi(e->d_name, &fd) && fd != dirfd(d)) fds.push_back(fd);
  }
  closedir(d);
  std::sort(fds.begin(), fds.end());
  return absl::StrJoin(fds, " ");
}

std::string FirstLineWith(const char* path, const char* prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      std::replace(line.begin(), line.end(), '\t', ' ');
      return line;
    }
  }
  return "";
}

// OpenMP read OMP_NUM_THREADS when LibTorch was loaded, from the idle
// process's environment: the assignment's value is applied as a fresh
// process would have had it (torch::set_num_threads); 0 when unset or not
// a number in 1..4096.
int ThreadsFromEnv() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  int n = 0;
  if (v == nullptr || !absl::SimpleAtoi(v, &n) || n < 1 || n > 4096) return 0;
  return n;
}

}  // namespace

int RunPrestarted() {
  // Started by the agent's reaper: the reaper is the parent, now and after
  // the drop (BecomeAssigned checks).
  const pid_t reaper = getppid();
  uint32_t length = 0;
  if (!ReadAll(kFd, &length, sizeof(length))) return 0;  // closed unassigned
  if (length > kMaxPrestartAssignmentBytes) {
    WriteAll(kFd, absl::StrCat("Eassignment of ", length, " bytes; at most ", kMaxPrestartAssignmentBytes));
    return kExitConfigError;
  }
  std::string bytes(length, '\0');
  if (!ReadAll(kFd, bytes.data(), bytes.size())) return 0;
  absl::StatusOr<PrestartAssignment> a = DecodePrestartAssignment(bytes);
  absl::Status st = a.ok() ? BecomeAssigned(*a, reaper) : a.status();
  if (!st.ok()) {
    std::fprintf(stderr, "det-trial: error: prestarted process: %s\n", std::string(st.message()).c_str());
    WriteAll(kFd, absl::StrCat("E", st.message()));
    return kExitConfigError;
  }
  // Who and where this process is before it may read the token (checked by
  // tests/prestart_pool_test.cc).
  std::printf("[det-trial] prestarted pid %d assigned: %s; cgroup %s; fds %s\n", static_cast<int>(getpid()),
              FirstLineWith("/proc/self/status", "Uid:").c_str(), FirstLineWith("/proc/self/cgroup", "0::").c_str(),
              OpenFds().c_str());
  std::fflush(stdout);
  WriteAll(kFd, "A");
  // The agent sends the token after the acknowledgement, then EOF:
  // DET_ALLOCATION_TOKEN_FD (in the assignment's environment) names kFd.
  std::string token;
  if (std::getenv("DET_ALLOCATION_TOKEN_FD") != nullptr) {
    absl::StatusOr<std::string> read = ReadAllocationToken();
    if (!read.ok()) {
      std::fprintf(stderr, "det-trial: error: %s\n", std::string(read.status().message()).c_str());
      return kExitConfigError;
    }
    token = *read;
  } else {
    close(kFd);
    const char* t = std::getenv("DET_ALLOCATION_TOKEN");
    token = t != nullptr ? t : "";
  }
  return RunManagedWithToken(a->trial_path, ThreadsFromEnv(), token);
}

}  // namespace det::runtime
