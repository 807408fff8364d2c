#include "trial_runtime/runtime/local_launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace det::runtime {
namespace {

// Variables the launcher sets for each rank (inherited values are dropped).
const std::set<std::string>& RankVariables() {
  static const std::set<std::string> kVars = {"DET_RANK",      "DET_LOCAL_RANK", "DET_WORLD_SIZE",
                                              "DET_LOCAL_SIZE", "DET_NODE_RANK",  "DET_NUM_NODES",
                                              "DET_CHIEF_ADDR", "DET_CHIEF_PORT"};
  return kVars;
}

std::string Describe(int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("exited with code ", WEXITSTATUS(status));
}

}  // namespace

absl::StatusOr<int> PickFreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    close(fd);
    return absl::InternalError(absl::StrCat("cannot pick a free port on 127.0.0.1: ", std::strerror(err)));
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

int LaunchLocalRanks(const std::string& exe, const std::vector<std::string>& args, int nproc) {
  auto port = PickFreeLoopbackPort();
  if (!port.ok()) {
    std::fprintf(stderr, "det-trial: error: %s\n", std::string(port.status().message()).c_str());
    return 1;
  }

  // Everything the children need is built before fork(): between fork and
  // exec only async-signal-safe calls are allowed.
  std::vector<std::string> argv_storage = {exe};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> base_env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv(*e);
    if (RankVariables().count(kv.substr(0, kv.find('='))) == 0) base_env.push_back(kv);
  }
  std::vector<std::vector<std::string>> env_storage(static_cast<size_t>(nproc), base_env);
  std::vector<std::vector<char*>> envs(static_cast<size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    auto& env = env_storage[static_cast<size_t>(r)];
    env.push_back(absl::StrCat("DET_RANK=", r));
    env.push_back(absl::StrCat("DET_LOCAL_RANK=", r));
    env.push_back(absl::StrCat("DET_WORLD_SIZE=", nproc));
    env.push_back(absl::StrCat("DET_LOCAL_SIZE=", nproc));
    env.push_back("DET_NODE_RANK=0");
    env.push_back("DET_NUM_NODES=1");
    env.push_back("DET_CHIEF_ADDR=127.0.0.1");
    env.push_back(absl::StrCat("DET_CHIEF_PORT=", *port));
    for (auto& kv : env) envs[static_cast<size_t>(r)].push_back(kv.data());
    envs[static_cast<size_t>(r)].push_back(nullptr);
  }

  // The launcher waits for its signals synchronously (sigtimedwait): block
  // them first; the children get the original mask back before exec.
  sigset_t wait_set, old_set;
  sigemptyset(&wait_set);
  sigaddset(&wait_set, SIGCHLD);
  sigaddset(&wait_set, SIGTERM);
  sigaddset(&wait_set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &wait_set, &old_set);
  const pid_t launcher = getpid();

  std::vector<pid_t> pids(static_cast<size_t>(nproc), -1);
  std::vector<bool> done(static_cast<size_t>(nproc), false);
  int alive = 0;
  int failed_rank = -1;
  int failed_status = 0;
  auto kill_alive = [&](int sig) {
    for (int r = 0; r < nproc; ++r) {
      if (pids[static_cast<size_t>(r)] > 0 && !done[static_cast<size_t>(r)]) kill(pids[static_cast<size_t>(r)], sig);
    }
  };

  for (int r = 0; r < nproc; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(127);  // the launcher died before prctl
      pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
      execve(argv[0], argv.data(), envs[static_cast<size_t>(r)].data());
      _exit(127);
    }
    if (pid < 0) {
      std::fprintf(stderr, "det-trial: error: cannot start rank %d: %s\n", r, std::strerror(errno));
      kill_alive(SIGKILL);
      failed_rank = r;
      failed_status = 1 << 8;
      break;
    }
    pids[static_cast<size_t>(r)] = pid;
    ++alive;
  }

  while (alive > 0) {
    siginfo_t info;
    timespec tick{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&wait_set, &info, &tick);
    if (sig == SIGTERM || sig == SIGINT) kill_alive(sig);
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (int r = 0; r < nproc; ++r) {
        if (pids[static_cast<size_t>(r)] != pid || done[static_cast<size_t>(r)]) continue;
        done[static_cast<size_t>(r)] = true;
        --alive;
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0) {
          failed_rank = r;
          failed_status = status;
          kill_alive(SIGKILL);  // the group cannot go on without this rank
        }
      }
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);

  if (failed_rank < 0) return 0;
  std::fprintf(stderr, "det-trial: error: rank %d of %d %s; stopped the other ranks\n", failed_rank, nproc,
               Describe(failed_status).c_str());
  std::fflush(stderr);
  if (WIFEXITED(failed_status) && WEXITSTATUS(failed_status) != 0) return WEXITSTATUS(failed_status);
  return 1;
}

}  // namespace det::runtime
