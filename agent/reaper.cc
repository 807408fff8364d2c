// The reaper (see reaper.h). Async-signal-safe code only: raw system calls,
// stack buffers, no allocation, no locks, no stdio.
#include "agent/reaper.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include "common/fd_io.h"

namespace det::agent::reaper {
namespace {

// The fd numbers inside the reaper.
constexpr int kReportFd = 3;
// How long the reaper keeps killing descendants that will not go (e.g. in
// uninterruptible sleep) before it gives up; the cgroup, if any, is next.
constexpr int kCleanupRounds = 3000;  // x 10 ms

struct LinuxDirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[1];
};

void WriteAll(int fd, const void* data, size_t n) { (void)WriteFull(fd, data, n); }
bool ReadAll(int fd, void* data, size_t n) { return ReadFull(fd, data, n); }

void SleepMs(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// The parent pid in /proc/<pid>/stat ("pid (comm) S ppid ..."), -1 if
// unreadable. comm may hold spaces and parentheses: parse after the last ')'.
long ParentOf(const char* pid_name) {
  char path[64] = "/proc/";
  char* p = path + 6;
  for (const char* s = pid_name; *s != '\0' && p < path + 40; ++s) *p++ = *s;
  const char kStat[] = "/stat";
  for (const char* s = kStat; *s != '\0'; ++s) *p++ = *s;
  *p = '\0';
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* close_paren = nullptr;
  for (ssize_t i = 0; i < n; ++i) {
    if (buf[i] == ')') close_paren = buf + i;
  }
  if (close_paren == nullptr) return -1;
  const char* s = close_paren + 1;
  while (*s == ' ') ++s;
  if (*s == '\0') return -1;
  ++s;  // the state letter
  while (*s == ' ') ++s;
  long ppid = 0;
  bool digits = false;
  while (*s >= '0' && *s <= '9') {
    ppid = ppid * 10 + (*s++ - '0');
    digits = true;
  }
  return digits ? ppid : -1;
}

// SIGKILLs every process whose parent is `self` (orphans reparented to this
// subreaper, and its own children).
void KillChildrenOf(pid_t self) {
  int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  alignas(8) char buf[8192];
  while (true) {
    long n = syscall(SYS_getdents64, dir, buf, sizeof(buf));
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      auto* d = reinterpret_cast<LinuxDirent64*>(buf + off);
      off += d->d_reclen;
      long pid = 0;
      bool numeric = d->d_name[0] != '\0';
      for (const char* c = d->d_name; *c != '\0'; ++c) {
        if (*c < '0' || *c > '9') {
          numeric = false;
          break;
        }
        pid = pid * 10 + (*c - '0');
      }
      if (!numeric || pid == self) continue;
      if (ParentOf(d->d_name) == self) kill(static_cast<pid_t>(pid), SIGKILL);
    }
  }
  close(dir);
}

// Moves the standard streams and the report pipe to 0..3 and closes every
// other descriptor the agent had open (gRPC sockets, other trials' pipes).
void SetUpDescriptors(const Plan& plan) {
  int out = fcntl(plan.out_fd, F_DUPFD, 10);
  int err = fcntl(plan.err_fd, F_DUPFD, 10);
  int report = fcntl(plan.report_fd, F_DUPFD, 10);
  int secret = plan.secret_fd >= 0 ? fcntl(plan.secret_fd, F_DUPFD, 10) : -1;
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != 0) {
    dup2(devnull, 0);
    close(devnull);
  }
  dup2(out, 1);
  dup2(err, 2);
  dup2(report, kReportFd);
  // Not close-on-exec (dup2 clears it): the process inherits it.
  if (secret >= 0) dup2(secret, kSecretFd);
  const int first_closed = secret >= 0 ? kSecretFd + 1 : kReportFd + 1;
  if (syscall(SYS_close_range, first_closed, ~0U, 0) != 0) {
    for (int fd = first_closed; fd < 65536; ++fd) close(fd);
  }
  fcntl(kReportFd, F_SETFD, FD_CLOEXEC);
}

// The process: its own group, default signals, the user, the directory,
// then exec. On failure writes {phase, errno} to `error_fd` and exits.
[[noreturn]] void StartProcess(const Plan& plan, pid_t reaper, int error_fd) {
  auto fail = [error_fd](int32_t phase) {
    int32_t report[2] = {phase, errno};
    WriteAll(error_fd, report, sizeof(report));
    _exit(127);
  };
  setpgid(0, 0);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (plan.cwd != nullptr && chdir(plan.cwd) != 0) fail(kChdir);
  if (plan.umask >= 0) umask(static_cast<mode_t>(plan.umask));
  if (plan.set_user) {
    if (setgroups(plan.num_groups, plan.groups) != 0) fail(kSetgroups);
    if (setgid(plan.gid) != 0) fail(kSetgid);
    if (setuid(plan.uid) != 0) fail(kSetuid);
  }
  // Changing credentials clears it: set it last. Should the reaper die (it
  // cannot be signalled by another uid; by the same uid it can), so does
  // the process.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != reaper) _exit(127);
  execve(plan.argv[0], plan.argv, plan.envp);
  fail(kExec);
  _exit(127);  // not reached
}

// Waits until `child` exits (reaping orphans meanwhile); returns its status.
int WaitForProcess(pid_t child) {
  while (true) {
    siginfo_t info{};
    if (waitid(P_ALL, 0, &info, WEXITED | WNOWAIT) != 0) {
      if (errno == EINTR) continue;
      return 0;  // ECHILD: cannot happen while child is unreaped
    }
    if (info.si_pid == child) {
      // Its zombie still holds the group id: kill the group, then reap it.
      kill(-child, SIGKILL);
      int status = 0;
      while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      return status;
    }
    waitpid(info.si_pid, nullptr, 0);  // an orphan that ended on its own
  }
}

// Kills and reaps every descendant: the group, then whatever was
// reparented here, until no child is left.
void KillDescendants(pid_t self, pid_t child) {
  for (int round = 0; round < kCleanupRounds; ++round) {
    kill(-child, SIGKILL);
    KillChildrenOf(self);
    pid_t p;
    while ((p = waitpid(-1, nullptr, WNOHANG)) > 0) {
    }
    if (p < 0 && errno == ECHILD) return;
    SleepMs(10);
  }
}

}  // namespace

const char* PhaseName(int32_t phase) {
  switch (phase) {
    case kFork: return "fork";
    case kChdir: return "chdir";
    case kSetgroups: return "setgroups";
    case kSetgid: return "setgid";
    case kSetuid: return "setuid";
    case kExec: return "exec";
    default: return "start";
  }
}

void Run(const Plan& plan) {
  setpgid(0, 0);  // out of the agent's group: its signals are not ours
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);  // the reaper only waits
  SetUpDescriptors(plan);
  if (plan.cgroup_procs != nullptr) {
    int fd = open(plan.cgroup_procs, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      WriteAll(fd, "0", 1);  // "0": the writing process
      close(fd);
    }
  }
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  const pid_t self = getpid();
  int error_pipe[2];
  StartReport start;
  if (pipe2(error_pipe, O_CLOEXEC) != 0) {
    start.phase = kFork;
    start.error = errno;
    WriteAll(kReportFd, &start, sizeof(start));
    _exit(127);
  }
  const pid_t child = fork();
  if (child < 0) {
    start.phase = kFork;
    start.error = errno;
    WriteAll(kReportFd, &start, sizeof(start));
    _exit(127);
  }
  if (child == 0) {
    close(error_pipe[0]);
    close(kReportFd);
    StartProcess(plan, self, error_pipe[1]);
  }
  close(error_pipe[1]);
  // The process has it; the reaper keeps no copy. (Without one, fd 4 may be
  // the error pipe.)
  if (plan.secret_fd >= 0) close(kSecretFd);
  setpgid(child, child);  // also here: no signal may find it in ours
  int32_t failure[2];
  start.pid = child;
  if (ReadAll(error_pipe[0], failure, sizeof(failure))) {
    start.phase = failure[0];
    start.error = failure[1];
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
    WriteAll(kReportFd, &start, sizeof(start));
    _exit(127);
  }
  close(error_pipe[0]);
  WriteAll(kReportFd, &start, sizeof(start));

  ExitReport exit_report;
  exit_report.wait_status = WaitForProcess(child);
  KillDescendants(self, child);
  WriteAll(kReportFd, &exit_report, sizeof(exit_report));
  _exit(0);
}

}  // namespace det::agent::reaper

