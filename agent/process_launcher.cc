#include "agent/process_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace det::agent {
namespace {

absl::Status ErrnoStatus(int err, absl::string_view what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case EINVAL:
    case ENOEXEC:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// A pidfd becomes readable when the process exits (Linux >= 5.3); -1 when
// unsupported, in which case the reader loop polls on a short timer.
int OpenPidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  long fd = syscall(SYS_pidfd_open, pid, 0);
  if (fd >= 0) {
    fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return static_cast<int>(fd);
  }
#endif
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Process>> Process::Start(LaunchOptions options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv");
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return ErrnoStatus(e, "pipe");
  }
  auto close_all = [&] {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
  };

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  if (!options.cwd.empty()) {
    posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t empty_mask;
  sigemptyset(&empty_mask);
  sigset_t default_signals;
  sigfillset(&default_signals);
  sigdelset(&default_signals, SIGKILL);
  sigdelset(&default_signals, SIGSTOP);
  posix_spawnattr_setsigmask(&attr, &empty_mask);
  posix_spawnattr_setsigdefault(&attr, &default_signals);
  posix_spawnattr_setpgroup(&attr, 0);  // new group led by the child
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);

  std::vector<char*> argv;
  for (auto& a : options.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : options.env) envp.push_back(e.data());
  envp.push_back(nullptr);

  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    close_all();
    return ErrnoStatus(rc, absl::StrCat("exec ", options.argv[0], " failed"));
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  fcntl(out_pipe[0], F_SETFL, fcntl(out_pipe[0], F_GETFL) | O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, fcntl(err_pipe[0], F_GETFL) | O_NONBLOCK);
  std::unique_ptr<Process> p(new Process(pid, out_pipe[0], err_pipe[0], std::move(options)));
  p->reader_ = std::thread([raw = p.get()] { raw->ReaderLoop(); });
  return p;
}

Process::Process(pid_t pid, int out_fd, int err_fd, LaunchOptions options)
    : pid_(pid), out_fd_(out_fd), err_fd_(err_fd), options_(std::move(options)) {}

Process::~Process() {
  {
    absl::MutexLock lock(&mu_);
    if (!reaped_) {
      kill_requested_ = true;
      ::kill(-pid_, SIGKILL);
    }
  }
  if (reader_.joinable()) reader_.join();
}

absl::Status Process::Signal(int signal_number) {
  absl::MutexLock lock(&mu_);
  if (reaped_) return absl::OkStatus();
  // The leader is not reaped yet, so its pid still names our group.
  if (::kill(-pid_, signal_number) != 0 && errno != ESRCH) {
    return ErrnoStatus(errno, absl::StrCat("kill(", signal_number, ")"));
  }
  return absl::OkStatus();
}

void Process::Kill(absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  kill_requested_ = true;
  if (reaped_ || sigkill_sent_) return;
  if (grace <= absl::ZeroDuration()) {
    ::kill(-pid_, SIGKILL);
    sigkill_sent_ = true;
    return;
  }
  absl::Time deadline = absl::Now() + grace;
  if (!kill_deadline_.has_value()) {
    ::kill(-pid_, SIGTERM);
    kill_deadline_ = deadline;
  } else if (deadline < *kill_deadline_) {
    kill_deadline_ = deadline;
  }
}

std::optional<ExitStatus> Process::TryWait() {
  absl::MutexLock lock(&mu_);
  if (!exited_) return std::nullopt;
  return status_;
}

std::optional<ExitStatus> Process::WaitFor(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithTimeout(absl::Condition(&exited_), timeout)) return std::nullopt;
  return status_;
}

void Process::Emit(OutputStream stream, std::string* buffer, bool flush_partial) {
  size_t start = 0;
  while (true) {
    size_t nl = buffer->find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = buffer->substr(start, nl - start);
    start = nl + 1;
    // Long lines go out in pieces.
    for (size_t i = 0; i < line.size() || i == 0; i += options_.max_line_bytes) {
      if (options_.on_line) options_.on_line(stream, line.substr(i, options_.max_line_bytes));
      if (line.empty()) break;
    }
  }
  buffer->erase(0, start);
  while (buffer->size() >= options_.max_line_bytes ||
         (flush_partial && !buffer->empty())) {
    size_t n = std::min(buffer->size(), options_.max_line_bytes);
    if (options_.on_line) options_.on_line(stream, buffer->substr(0, n));
    buffer->erase(0, n);
  }
}

void Process::ReaderLoop() {
  const int pidfd = OpenPidfd(pid_);
  std::optional<absl::Time> leader_exit_time;
  // After the leader exits, wait this long for descendants holding the pipes.
  const absl::Duration kDrainGrace = absl::Milliseconds(200);
  char buf[65536];

  auto read_fd = [&](int* fd, OutputStream stream, std::string* sbuf) {
    while (*fd >= 0) {
      ssize_t n = ::read(*fd, buf, sizeof(buf));
      if (n > 0) {
        sbuf->append(buf, static_cast<size_t>(n));
        Emit(stream, sbuf, /*flush_partial=*/false);
      } else if (n == 0) {
        close(*fd);
        *fd = -1;
      } else if (errno == EINTR) {
        continue;
      } else {
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          close(*fd);
          *fd = -1;
        }
        return;
      }
    }
  };

  while (true) {
    absl::Time now = absl::Now();
    absl::Duration timeout = pidfd >= 0 ? absl::Milliseconds(500) : absl::Milliseconds(20);
    {
      absl::MutexLock lock(&mu_);
      if (kill_deadline_.has_value() && !sigkill_sent_ && !leader_exit_time) {
        if (now >= *kill_deadline_) {
          ::kill(-pid_, SIGKILL);
          sigkill_sent_ = true;
        } else {
          timeout = std::min(timeout, *kill_deadline_ - now);
        }
      }
    }
    if (leader_exit_time) {
      timeout = std::min(timeout, std::max(absl::ZeroDuration(), *leader_exit_time + kDrainGrace - now));
    }

    pollfd fds[3];
    int nfds = 0;
    if (out_fd_ >= 0) fds[nfds++] = {out_fd_, POLLIN, 0};
    if (err_fd_ >= 0) fds[nfds++] = {err_fd_, POLLIN, 0};
    if (pidfd >= 0 && !leader_exit_time) fds[nfds++] = {pidfd, POLLIN, 0};
    int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(timeout)) + 1;
    if (nfds > 0) {
      ::poll(fds, nfds, timeout_ms);
    } else {
      ::usleep(static_cast<useconds_t>(timeout_ms) * 1000);
    }
    read_fd(&out_fd_, OutputStream::kStdout, &out_buf_);
    read_fd(&err_fd_, OutputStream::kStderr, &err_buf_);

    if (!leader_exit_time) {
      siginfo_t info;
      std::memset(&info, 0, sizeof(info));
      // WNOWAIT: the zombie keeps the pgid reserved while we clean up.
      if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == pid_) {
        absl::MutexLock lock(&mu_);
        if (kill_requested_) ::kill(-pid_, SIGKILL);  // stragglers of a killed group
        int wstatus = 0;
        while (waitpid(pid_, &wstatus, 0) < 0 && errno == EINTR) {
        }
        if (WIFEXITED(wstatus)) {
          status_.exit_code = WEXITSTATUS(wstatus);
        } else if (WIFSIGNALED(wstatus)) {
          status_.signal_number = WTERMSIG(wstatus);
        }
        reaped_ = true;
        leader_exit_time = absl::Now();
      }
    }
    if (leader_exit_time &&
        ((out_fd_ < 0 && err_fd_ < 0) || absl::Now() >= *leader_exit_time + kDrainGrace)) {
      break;
    }
  }
  read_fd(&out_fd_, OutputStream::kStdout, &out_buf_);
  read_fd(&err_fd_, OutputStream::kStderr, &err_buf_);
  Emit(OutputStream::kStdout, &out_buf_, /*flush_partial=*/true);
  Emit(OutputStream::kStderr, &err_buf_, /*flush_partial=*/true);
  if (out_fd_ >= 0) close(out_fd_);
  if (err_fd_ >= 0) close(err_fd_);
  out_fd_ = err_fd_ = -1;
  if (pidfd >= 0) close(pidfd);

  ExitStatus status;
  {
    absl::MutexLock lock(&mu_);
    status = status_;
  }
  if (options_.on_exit) options_.on_exit(status);
  absl::MutexLock lock(&mu_);
  exited_ = true;
}

}  // namespace det::agent
