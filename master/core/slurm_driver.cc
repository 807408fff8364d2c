#include "master/core/slurm_driver.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace det::master {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxOut = 4 << 20;
constexpr size_t kMaxErr = 64 << 10;
constexpr int kCommandTimeoutMs = 60000;

class ProcessRunner final : public CommandRunner {
 public:
  absl::StatusOr<CommandResult> Run(const std::vector<std::string>& argv) override {
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
      close(out_pipe[0]);
      close(out_pipe[1]);
      return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(out_pipe[1], 1);
      dup2(err_pipe[1], 2);
      int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, 0);
      execvp(args[0], args.data());
      _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (pid < 0) {
      close(out_pipe[0]);
      close(err_pipe[0]);
      return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
    }
    CommandResult r;
    const bool timed_out = Drain(out_pipe[0], err_pipe[0], &r);
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out) return absl::InternalError(absl::StrCat(argv[0], " ran longer than 60 s; killed"));
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r.exit_code == 127 && r.out.empty() && r.err.empty()) {
      return absl::InternalError(absl::StrCat("cannot run ", argv[0], " (not installed or not on PATH?)"));
    }
    return r;
  }

 private:
  // Reads both pipes to their end (closing them); true when it timed out.
  static bool Drain(int out_fd, int err_fd, CommandResult* r) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kCommandTimeoutMs);
    pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    int open_fds = 2;
    char buf[65536];
    while (open_fds > 0) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) break;
      if (poll(fds, 2, static_cast<int>(left)) < 0 && errno != EINTR) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        ssize_t n = read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          close(fds[i].fd);
          fds[i].fd = -1;
          --open_fds;
          continue;
        }
        std::string& dst = i == 0 ? r->out : r->err;
        const size_t cap = i == 0 ? kMaxOut : kMaxErr;
        dst.append(buf, std::min(static_cast<size_t>(n), cap - std::min(cap, dst.size())));
      }
    }
    for (auto& f : fds) {
      if (f.fd >= 0) close(f.fd);
    }
    return open_fds > 0;
  }
};

// Writes `text` to `path` created with `mode` (replacing any file there).
absl::Status WriteFile(const fs::path& path, const std::string& text, mode_t mode) {
  ::unlink(path.c_str());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", path.string(), ": ", std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0 && errno != EINTR) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot write ", path.string(), ": ", std::strerror(errno)));
    }
    if (n > 0) done += static_cast<size_t>(n);
  }
  ::fchmod(fd, mode);
  ::close(fd);
  return absl::OkStatus();
}

// The exit status rank files hold ("0\n"), or nullopt.
std::optional<int> ReadExit(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  int code = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &code) || code < 0 || code > 255) return std::nullopt;
  return code;
}

}  // namespace

std::shared_ptr<CommandRunner> MakeProcessRunner() { return std::make_shared<ProcessRunner>(); }

SlurmDriver::SlurmDriver(SlurmConfig config, std::shared_ptr<CommandRunner> runner)
    : config_(std::move(config)), runner_(runner ? std::move(runner) : MakeProcessRunner()) {}

std::string SlurmDriver::Bin(const char* name) const {
  return config_.slurm_bin_dir.empty() ? name : (fs::path(config_.slurm_bin_dir) / name).string();
}

absl::StatusOr<std::string> SlurmDriver::Submit(const SlurmSubmission& s) {
  // The job directory is the job user's alone: job.json holds the
  // allocation token.
  // A fresh directory of its own (allocation ids are unique and random): one
  // that exists already, or a symlink planted there, is refused rather than
  // written through.
  std::error_code ec;
  fs::create_directories(fs::path(s.job_dir).parent_path(), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", s.job_dir, ": ", ec.message()));
  if (::mkdir(s.job_dir.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("cannot create job directory ", s.job_dir, ": ", std::strerror(errno),
                                            errno == EEXIST ? " (it must not exist yet)" : ""));
  }
  const fs::path dir(s.job_dir);
  absl::Status st = WriteFile(dir / "job.json", s.job_json, 0600);
  if (st.ok()) st = WriteFile(dir / "job.sh", s.script, 0700);
  if (!st.ok()) return st;
  ::unlink((dir / "trial.so").c_str());
  fs::copy_file(s.trial_so_path, dir / "trial.so", fs::copy_options::overwrite_existing, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot copy the trial library to ", s.job_dir, ": ", ec.message()));
  absl::StatusOr<CommandResult> r = runner_->Run({Bin("sbatch"), "--parsable", (dir / "job.sh").string()});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return absl::InternalError(absl::StrCat("sbatch exited with ", r->exit_code, ": ",
                                            absl::StripAsciiWhitespace(r->err.substr(0, 2000))));
  }
  return ParseSbatchOutput(r->out);
}

SlurmResults SlurmDriver::Run(const SlurmWork& work) {
  SlurmResults res;
  for (const SlurmSubmission& s : work.submit) {
    absl::StatusOr<std::string> id = Submit(s);
    if (id.ok()) {
      res.submitted[s.allocation_id] = *id;
    } else {
      spdlog::warn("slurm: submitting allocation {}: {}", s.allocation_id, id.status().ToString());
      res.submit_errors[s.allocation_id] = std::string(id.status().message());
    }
  }
  for (const std::string& name : work.cancel_job_names) {
    absl::StatusOr<CommandResult> r = runner_->Run({Bin("scancel"), "--name", name});
    if (!r.ok() || r->exit_code != 0) {
      spdlog::warn("slurm: scancel --name {}: {}", name, r.ok() ? r->err : r.status().ToString());
    }
  }
  if (work.poll.empty() && res.submitted.empty()) return res;
  std::vector<std::string> names;
  for (const auto& [id, poll] : work.poll) names.push_back(SlurmJobName(id));
  for (const auto& [id, job] : res.submitted) names.push_back(SlurmJobName(id));
  absl::StatusOr<CommandResult> q = runner_->Run(
      {Bin("squeue"), "-h", "-t", "all", "-o", "%i|%j|%T|%r", "--name", absl::StrJoin(names, ",")});
  if (!q.ok() || q->exit_code != 0) {
    res.squeue_error = q.ok() ? absl::StrCat("squeue exited with ", q->exit_code, ": ", q->err.substr(0, 2000))
                              : std::string(q.status().message());
    spdlog::warn("slurm: {}", res.squeue_error);
    return res;
  }
  res.squeue_ok = true;
  const std::map<std::string, SqueueJob> jobs = ParseSqueue(q->out);
  for (const auto& [id, poll] : work.poll) {
    auto it = jobs.find(SlurmJobName(id));
    if (it != jobs.end()) res.listed[id] = it->second;
    if (it != jobs.end() && PhaseOfState(it->second.state) != SlurmPhase::kEnded) continue;
    std::vector<std::optional<int>> codes;
    for (int rank = 0; rank < poll.ntasks; ++rank) {
      codes.push_back(ReadExit(fs::path(poll.job_dir) / absl::StrCat("exit.", rank)));
    }
    res.exit_codes[id] = std::move(codes);
    // The job is over (the core ends the allocation with these codes): its
    // copy of trial.so and its token go; job.sh, Slurm's output and the exit
    // files stay for a post-mortem.
    if (!poll.job_dir.empty()) {
      ::unlink((fs::path(poll.job_dir) / "trial.so").c_str());
      ::unlink((fs::path(poll.job_dir) / "job.json").c_str());
    }
  }
  for (const auto& [id, job_id] : res.submitted) {
    auto it = jobs.find(SlurmJobName(id));
    if (it != jobs.end()) res.listed[id] = it->second;
  }
  return res;
}

}  // namespace det::master
