#include "agent/prestart_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/cgroup.h"
#include "common/prestart_assignment.h"
#include "spdlog/spdlog.h"

namespace det::agent {
namespace {

// Lines an assigned process prints before the agent routes its output to the
// allocation (its "prestarted pid ... assigned" line) are held, at most this
// many.
constexpr size_t kMaxHeldLines = 64;

int RemainingMs(absl::Time deadline) {
  return static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()))) + 1;
}

// Writes all of `data` to non-blocking `fd` by `deadline`.
absl::Status WriteBy(int fd, const std::string& data, absl::Time deadline) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t w = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (w > 0) {
      done += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return absl::UnavailableError(absl::StrCat("send: ", std::strerror(errno)));
    }
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("the process reads nothing");
    pollfd p{fd, POLLOUT, 0};
    poll(&p, 1, RemainingMs(deadline));
  }
  return absl::OkStatus();
}

// The process's answer: OK for 'A'; its message for 'E...'; Unavailable when
// it closed the channel (died) first, DeadlineExceeded when it said nothing.
absl::Status ReadAck(int fd, absl::Time deadline) {
  std::string got;
  char buf[512];
  while (got.size() < 4096) {
    ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r > 0) {
      got.append(buf, static_cast<size_t>(r));
      if (got[0] == 'A') return absl::OkStatus();
      continue;
    }
    if (r == 0) break;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) break;
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("no acknowledgement in time");
    pollfd p{fd, POLLIN, 0};
    poll(&p, 1, RemainingMs(deadline));
  }
  if (!got.empty() && got[0] == 'E') return absl::FailedPreconditionError(got.substr(1));
  return absl::UnavailableError("it exited before acknowledging");
}

// Moves process `pid` (all its threads) into cgroup `dir`.
absl::Status MoveToCgroup(const std::string& dir, pid_t pid) {
  const std::string procs = dir + "/cgroup.procs";
  int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", procs, ": ", std::strerror(errno)));
  const std::string s = std::to_string(pid);
  const bool ok = write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size());
  const int err = errno;
  close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("moving pid ", pid, " into ", procs, ": ", std::strerror(err)));
  return absl::OkStatus();
}

// What names a det-trial binary's version: device, inode, size and mtime
// ("" when it cannot be read). An upgrade replaces the file (a new inode)
// or rewrites it (a new mtime).
std::string BinaryIdentity(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
}

}  // namespace

// Where a pooled process's output and exit go: the pool while idle, the
// allocation once assigned.
struct PrestartPool::Router {
  absl::Mutex mu;
  pid_t pid ABSL_GUARDED_BY(mu) = 0;
  bool exited ABSL_GUARDED_BY(mu) = false;
  bool taken ABSL_GUARDED_BY(mu) = false;  // being assigned: hold its lines
  std::vector<std::pair<OutputStream, std::string>> held ABSL_GUARDED_BY(mu);
  std::function<void(OutputStream, std::string)> on_line ABSL_GUARDED_BY(mu);
  std::function<void(const ExitStatus&)> on_exit ABSL_GUARDED_BY(mu);
  std::function<void()> on_idle_exit;  // set before the process starts

  void Line(OutputStream s, std::string line) {
    absl::MutexLock lock(&mu);
    if (on_line) {
      on_line(s, std::move(line));  // under mu: after the held lines
    } else if (taken && held.size() < kMaxHeldLines) {
      held.emplace_back(s, std::move(line));
    } else {
      spdlog::debug("prestarted pid {}: {}", pid, line);
    }
  }
  void Exit(const ExitStatus& status) {
    std::function<void(const ExitStatus&)> f;
    {
      absl::MutexLock lock(&mu);
      exited = true;
      f = on_exit;
    }
    if (f) {
      f(status);
    } else if (on_idle_exit) {
      on_idle_exit();
    }
  }
  // False when the process already exited (nothing bound).
  bool Bind(std::function<void(OutputStream, std::string)> line_cb, std::function<void(const ExitStatus&)> exit_cb) {
    absl::MutexLock lock(&mu);
    if (exited) return false;
    on_line = std::move(line_cb);
    on_exit = std::move(exit_cb);
    for (auto& [s, l] : held) {
      if (on_line) on_line(s, std::move(l));
    }
    held.clear();
    return true;
  }
  bool Exited() {
    absl::MutexLock lock(&mu);
    return exited;
  }
};

struct PrestartPool::Idle {
  std::unique_ptr<Process> process;
  int fd = -1;  // the agent's end of the channel
  std::shared_ptr<Router> router;
  std::string binary;  // BinaryIdentity of det-trial when it was started
  ~Idle() {
    if (fd >= 0) close(fd);  // an unassigned process exits on EOF
    process.reset();         // and is killed if it does not
  }
};

PrestartPool::PrestartPool(PrestartPoolOptions options) : options_(std::move(options)) {
  refill_ = std::thread([this] { RefillLoop(); });
}

PrestartPool::~PrestartPool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  refill_.join();
  std::deque<std::unique_ptr<Idle>> idle;
  {
    absl::MutexLock lock(&mu_);
    idle.swap(idle_);
  }
  idle.clear();  // outside mu_: their exits notify the pool
}

int PrestartPool::IdleCount() {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& i : idle_) n += i->router->Exited() ? 0 : 1;
  return n;
}

std::vector<pid_t> PrestartPool::IdlePids() {
  absl::MutexLock lock(&mu_);
  std::vector<pid_t> pids;
  for (const auto& i : idle_) {
    if (!i->router->Exited()) pids.push_back(i->process->pid());
  }
  return pids;
}

absl::StatusOr<std::unique_ptr<PrestartPool::Idle>> PrestartPool::StartOne() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", std::strerror(errno)));
  }
  auto idle = std::make_unique<Idle>();
  idle->fd = sv[0];
  idle->binary = BinaryIdentity(options_.det_trial_path);
  idle->router = std::make_shared<Router>();
  idle->router->on_idle_exit = [this] {
    absl::MutexLock lock(&mu_);
    dirty_ = true;
  };
  LaunchOptions lo;
  lo.argv = {options_.det_trial_path, kPrestartFlag};
  lo.env = options_.env;
  lo.cwd = "/";
  lo.channel_fd = sv[1];
  std::shared_ptr<Router> router = idle->router;
  lo.on_line = [router](OutputStream s, std::string line) { router->Line(s, std::move(line)); };
  lo.on_exit = [router](const ExitStatus& st) { router->Exit(st); };
  absl::StatusOr<std::unique_ptr<Process>> p = Process::Start(std::move(lo));
  close(sv[1]);
  if (!p.ok()) return p.status();  // ~Idle closes sv[0]
  idle->process = *std::move(p);
  {
    absl::MutexLock lock(&router->mu);
    router->pid = idle->process->pid();
  }
  fcntl(idle->fd, F_SETFL, fcntl(idle->fd, F_GETFL) | O_NONBLOCK);
  return idle;
}

void PrestartPool::RefillLoop() {
  int failures = 0;  // idle processes lost or not started in a row
  while (true) {
    std::vector<std::unique_ptr<Idle>> dead;
    int missing = 0;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || dirty_ || static_cast<int>(idle_.size()) < options_.size;
      };
      mu_.Await(absl::Condition(&work));
      if (stop_) return;
      dirty_ = false;
      for (auto it = idle_.begin(); it != idle_.end();) {
        if ((*it)->router->Exited()) {
          dead.push_back(std::move(*it));
          it = idle_.erase(it);
        } else {
          ++it;
        }
      }
      missing = options_.size - static_cast<int>(idle_.size());
    }
    const bool lost = !dead.empty();
    if (lost) {
      spdlog::warn("prestart pool: {} idle det-trial process(es) exited unassigned; starting others", dead.size());
      ++failures;
    }
    dead.clear();  // outside mu_ (their exits notify the pool)
    if (failures > 0) {
      // A det-trial that cannot start or keeps dying: retry, not spin.
      const absl::Duration pause = std::min(absl::Milliseconds(100) * (1 << std::min(failures, 9)), absl::Seconds(30));
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), pause)) return;
    }
    bool started_all = true;
    for (int i = 0; i < missing && started_all; ++i) {
      absl::StatusOr<std::unique_ptr<Idle>> idle = StartOne();
      if (!idle.ok()) {
        spdlog::error("prestart pool: cannot start {} {}: {}", options_.det_trial_path, kPrestartFlag,
                      idle.status().ToString());
        ++failures;
        started_all = false;
        continue;
      }
      absl::MutexLock lock(&mu_);
      idle_.push_back(*std::move(idle));  // at stop, ~PrestartPool ends it
    }
    if (started_all && !lost) failures = 0;
  }
}

absl::StatusOr<std::unique_ptr<Process>> PrestartPool::Launch(LaunchOptions options, bool* prestarted) {
  if (prestarted != nullptr) *prestarted = false;
  std::unique_ptr<Idle> idle;
  std::vector<std::unique_ptr<Idle>> dead;
  const std::string binary = BinaryIdentity(options_.det_trial_path);
  int stale = 0;
  {
    absl::MutexLock lock(&mu_);
    while (!idle_.empty() && idle == nullptr) {
      std::unique_ptr<Idle> next = std::move(idle_.front());
      idle_.pop_front();
      // Started from a det-trial since replaced (an upgrade): discarded,
      // never assigned; the refill starts the new binary.
      const bool old = next->binary.empty() || next->binary != binary;
      stale += old ? 1 : 0;
      if (old || next->router->Exited()) {
        dead.push_back(std::move(next));
      } else {
        idle = std::move(next);
      }
    }
    dirty_ = true;  // refill
  }
  if (stale > 0) {
    spdlog::warn("prestart pool: {} changed since {} idle process(es) started; discarding them", options_.det_trial_path,
                 stale);
  }
  dead.clear();
  if (idle != nullptr) {
    const pid_t pid = idle->process->pid();
    absl::Status st = Assign(*idle, options);
    if (st.ok()) {
      if (prestarted != nullptr) *prestarted = true;
      return std::move(idle->process);  // ~Idle closes the agent's end
    }
    spdlog::warn("prestarted det-trial pid {} did not take its assignment ({}); launching a fresh process",
                 pid, st.ToString());
    idle.reset();  // killed, and its reaper gone, before the fresh launch
  }
  return Process::Start(std::move(options));
}

absl::Status PrestartPool::Assign(Idle& idle, LaunchOptions& options) {
  if (options.argv.size() != 3 || options.argv[0] != options_.det_trial_path || options.argv[1] != "--managed" ||
      options.cwd.empty() || options.channel_fd >= 0) {
    return absl::FailedPreconditionError("not a det-trial --managed launch the pool can take");
  }
  if (options.secret.size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a secret of ", options.secret.size(), " bytes"));
  }
  PrestartAssignment a;
  a.trial_path = options.argv[2];
  a.env = options.env;
  a.cwd = options.cwd;
  a.umask = options.umask;
  if (options.run_as) {
    a.set_user = true;
    a.uid = options.run_as->uid;
    a.gid = options.run_as->gid;
    a.groups.assign(options.run_as->groups.begin(), options.run_as->groups.end());
  }
  const std::string payload = EncodePrestartAssignment(a);
  if (payload.size() > kMaxPrestartAssignmentBytes) {
    return absl::InvalidArgumentError(absl::StrCat("an assignment of ", payload.size(), " bytes"));
  }
  {
    absl::MutexLock lock(&idle.router->mu);
    idle.router->taken = true;
  }
  // The allocation's cgroup, as the reaper of a fresh launch joins it: the
  // reaper and the process move in before the process may read the token.
  std::string cgroup = options.cgroup_dir;
  if (!cgroup.empty()) {
    if (absl::Status made = CreateCgroup(cgroup); !made.ok()) {
      spdlog::warn("{}; {} runs contained by its reaper only", made.ToString(), a.trial_path);
      cgroup.clear();
    } else {
      // Its exit from here on removes the cgroup, as a fresh launch's does
      // (and a failed assignment's kill removes it before the fresh launch
      // creates it again).
      idle.process->SetCgroupDir(cgroup);
      if (absl::Status st = MoveToCgroup(cgroup, idle.process->reaper_pid()); !st.ok()) return st;
      if (absl::Status st = MoveToCgroup(cgroup, idle.process->pid()); !st.ok()) return st;
    }
  }
  const absl::Time deadline = absl::Now() + options_.ack_timeout;
  const uint32_t length = static_cast<uint32_t>(payload.size());
  std::string message(reinterpret_cast<const char*>(&length), sizeof(length));
  message += payload;
  if (absl::Status st = WriteBy(idle.fd, message, deadline); !st.ok()) return st;
  if (absl::Status st = ReadAck(idle.fd, deadline); !st.ok()) return st;
  // Dropped to the user, in the cgroup: from here on the process is the
  // rank's (its exit is the rank's), and it gets the token.
  if (!idle.router->Bind(options.on_line, options.on_exit)) {
    return absl::UnavailableError("it exited after acknowledging, before its token");
  }
  absl::Status sent = options.secret.empty() ? absl::OkStatus() : WriteBy(idle.fd, options.secret, deadline);
  std::fill(options.secret.begin(), options.secret.end(), '\0');
  if (!sent.ok()) spdlog::warn("prestarted pid {}: sending the token: {}", idle.process->pid(), sent.ToString());
  shutdown(idle.fd, SHUT_WR);
  return absl::OkStatus();
}

}  // namespace det::agent
