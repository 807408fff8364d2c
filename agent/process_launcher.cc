#include "agent/process_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/cgroup.h"
#include "agent/reaper.h"
#include "spdlog/spdlog.h"

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

// A pipe holding `secret` with its write end closed: the read end, or -1
// with errno set.
int SecretPipe(const std::string& secret) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  // At most kMaxSecretBytes (< the pipe's 64 KiB): the write cannot block.
  ssize_t n;
  while ((n = write(p[1], secret.data(), secret.size())) < 0 && errno == EINTR) {
  }
  const int err = errno;
  close(p[1]);
  if (n != static_cast<ssize_t>(secret.size())) {
    close(p[0]);
    errno = n < 0 ? err : EIO;
    return -1;
  }
  return p[0];
}

}  // namespace

absl::StatusOr<std::unique_ptr<Process>> Process::Start(LaunchOptions options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("empty argv");
  static_assert(kSecretFd == reaper::kSecretFd, "one fd number");
  if (options.secret.size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a secret of ", options.secret.size(), " bytes; at most ", kMaxSecretBytes));
  }
  if (options.channel_fd >= 0 && !options.secret.empty()) {
    return absl::InvalidArgumentError("a channel_fd and a secret: the process inherits only one as fd 4");
  }
  int secret_fd = -1;
  if (!options.secret.empty() && (secret_fd = SecretPipe(options.secret)) < 0) return ErrnoStatus(errno, "pipe");
  // Closed on every return: the process has its own copy.
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) close(fd);
    }
  } secret_closer{secret_fd};
  std::fill(options.secret.begin(), options.secret.end(), '\0');  // the pipe holds it now
  options.secret.clear();
  int out_pipe[2], err_pipe[2], report_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    for (int fd : out_pipe) close(fd);
    return ErrnoStatus(e, "pipe");
  }
  if (pipe2(report_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) close(fd);
    return ErrnoStatus(e, "pipe");
  }
  if (!options.cgroup_dir.empty()) {
    absl::Status made = CreateCgroup(options.cgroup_dir);
    if (!made.ok()) {
      spdlog::warn("{}; {} runs contained by its reaper only", made.ToString(), options.argv[0]);
      options.cgroup_dir.clear();
    }
  }
  // Everything the forked reaper reads is built now: it may not allocate.
  std::vector<char*> argv;
  for (auto& a : options.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : options.env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string cgroup_procs = options.cgroup_dir.empty() ? "" : options.cgroup_dir + "/cgroup.procs";
  reaper::Plan plan;
  plan.argv = argv.data();
  plan.envp = envp.data();
  plan.cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  plan.out_fd = out_pipe[1];
  plan.err_fd = err_pipe[1];
  plan.report_fd = report_pipe[1];
  plan.cgroup_procs = cgroup_procs.empty() ? nullptr : cgroup_procs.c_str();
  plan.secret_fd = options.channel_fd >= 0 ? options.channel_fd : secret_fd;
  plan.umask = options.umask;
  if (options.run_as) {
    plan.set_user = true;
    plan.uid = options.run_as->uid;
    plan.gid = options.run_as->gid;
    plan.groups = options.run_as->groups.data();
    plan.num_groups = options.run_as->groups.size();
  }

  const pid_t reaper_pid = fork();
  if (reaper_pid == 0) reaper::Run(plan);
  const int fork_errno = errno;
  for (int fd : {out_pipe[1], err_pipe[1], report_pipe[1]}) close(fd);
  auto fail = [&](absl::Status st) {
    for (int fd : {out_pipe[0], err_pipe[0], report_pipe[0]}) close(fd);
    if (!options.cgroup_dir.empty()) (void)KillAndRemoveCgroup(options.cgroup_dir, absl::Seconds(5));
    return st;
  };
  if (reaper_pid < 0) return fail(ErrnoStatus(fork_errno, "fork"));
  reaper::StartReport start;
  ssize_t got;
  while ((got = read(report_pipe[0], &start, sizeof(start))) < 0 && errno == EINTR) {
  }
  if (got != static_cast<ssize_t>(sizeof(start)) || start.phase != reaper::kStarted) {
    while (waitpid(reaper_pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    if (got != static_cast<ssize_t>(sizeof(start))) {
      return fail(absl::InternalError(absl::StrCat("the reaper of ", options.argv[0], " died before starting it")));
    }
    std::string what = absl::StrCat(reaper::PhaseName(start.phase), " ", options.argv[0]);
    if (start.phase == reaper::kSetuid && options.run_as) what = absl::StrCat("setuid(", options.run_as->uid, ")");
    return fail(ErrnoStatus(start.error, absl::StrCat(what, " failed")));
  }
  fcntl(out_pipe[0], F_SETFL, fcntl(out_pipe[0], F_GETFL) | O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, fcntl(err_pipe[0], F_GETFL) | O_NONBLOCK);
  fcntl(report_pipe[0], F_SETFL, fcntl(report_pipe[0], F_GETFL) | O_NONBLOCK);
  std::unique_ptr<Process> p(
      new Process(start.pid, reaper_pid, out_pipe[0], err_pipe[0], report_pipe[0], std::move(options)));
  p->reader_ = std::thread([raw = p.get()] { raw->ReaderLoop(); });
  return p;
}

Process::Process(pid_t pid, pid_t reaper_pid, int out_fd, int err_fd, int report_fd, LaunchOptions options)
    : pid_(pid),
      reaper_pid_(reaper_pid),
      out_fd_(out_fd),
      err_fd_(err_fd),
      report_fd_(report_fd),
      options_(std::move(options)),
      cgroup_dir_(options_.cgroup_dir) {}

void Process::SetCgroupDir(std::string dir) {
  absl::MutexLock lock(&mu_);
  cgroup_dir_ = std::move(dir);
}

ExitStatus Process::ReadExitStatus(int reaper_wait_status) {
  reaper::ExitReport report;
  int wstatus = reaper_wait_status;
  if (read(report_fd_, &report, sizeof(report)) == static_cast<ssize_t>(sizeof(report))) {
    wstatus = report.wait_status;
  } else {
    // The reaper was killed (by the trial?): its process may live on.
    ::kill(-pid_, SIGKILL);
  }
  ExitStatus status;
  if (WIFEXITED(wstatus)) {
    status.exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    status.signal_number = WTERMSIG(wstatus);
  }
  return status;
}

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
  const int pidfd = OpenPidfd(reaper_pid_);
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
      // The reaper exits once the process and all it started are gone.
      int wstatus = 0;
      if (waitpid(reaper_pid_, &wstatus, WNOHANG) == reaper_pid_) {
        ExitStatus status = ReadExitStatus(wstatus);
        absl::MutexLock lock(&mu_);
        status_ = status;
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
  close(report_fd_);
  report_fd_ = -1;
  std::string cgroup_dir;
  {
    absl::MutexLock lock(&mu_);
    cgroup_dir = cgroup_dir_;
  }
  if (!cgroup_dir.empty()) {
    // Whatever escaped the reaper (it was killed) is still in the cgroup.
    absl::Status st = KillAndRemoveCgroup(cgroup_dir, absl::Seconds(10));
    if (!st.ok()) spdlog::error("{}", st.ToString());
  }

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
