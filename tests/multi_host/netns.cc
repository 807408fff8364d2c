#include "tests/multi_host/netns.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/test_util.h"

namespace det::testing {

std::string IpBinary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

bool InNetns(const std::string& netns, const std::function<void()>& fn) {
  if (netns.empty()) {
    fn();
    return true;
  }
  bool entered = false;
  std::thread t([&] {
    int fd = open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    entered = setns(fd, CLONE_NEWNET) == 0;
    close(fd);
    if (entered) fn();
  });
  t.join();
  return entered;
}

namespace {

std::vector<pid_t> NetnsPids(const std::string& ip, const std::string& netns) {
  std::string out, err;
  std::vector<pid_t> pids;
  if (RunProcess({ip, "netns", "pids", netns}, &out, &err, std::chrono::seconds(10)) != 0) return pids;
  for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 1 && pid != getpid()) pids.push_back(pid);
  }
  return pids;
}

}  // namespace

void KillNetnsProcesses(const std::string& ip, const std::string& netns) {
  if (ip.empty()) return;
  for (pid_t pid : NetnsPids(ip, netns)) kill(pid, SIGKILL);
  PollUntil([&] {
    for (pid_t pid : NetnsPids(ip, netns)) {
      if (ProcessAlive(pid)) return false;
    }
    return true;
  },
            std::chrono::seconds(10));
}

bool TcpConnects(const std::string& netns, const std::string& address, int port) {
  bool ok = false;
  InNetns(netns, [&] {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, address.c_str(), &addr.sin_addr);
    int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    if (rc == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof(err);
      ok = poll(&p, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    close(fd);
  });
  return ok;
}

}  // namespace det::testing
