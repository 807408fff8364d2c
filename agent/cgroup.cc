#include "agent/cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace det::agent {
namespace {

std::vector<pid_t> Members(const std::string& dir) {
  std::ifstream in(dir + "/cgroup.procs");
  std::vector<pid_t> pids;
  long pid = 0;
  while (in >> pid) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

}  // namespace

absl::StatusOr<std::string> OwnCgroupDir() {
  // mountinfo: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ... - FSTYPE SOURCE SUPER"
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line, mount_point;
  while (std::getline(mounts, line)) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::vector<std::string> fields = absl::StrSplit(line.substr(0, dash), ' ');
    if (fields.size() >= 5 && fields[3] == "/") {
      mount_point = fields[4];
      break;
    }
  }
  if (mount_point.empty()) return absl::NotFoundError("no cgroup v2 hierarchy is mounted");
  std::ifstream cgroup("/proc/self/cgroup");
  while (std::getline(cgroup, line)) {
    if (line.rfind("0::", 0) == 0) {
      std::string path = line.substr(3);
      if (path.find("/..") != std::string::npos) break;  // outside our namespace
      return path == "/" ? mount_point : mount_point + path;
    }
  }
  return absl::NotFoundError("this process is in no cgroup v2 group");
}

absl::Status CreateCgroup(const std::string& dir) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(absl::StrCat("mkdir ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status KillAndRemoveCgroup(const std::string& dir, absl::Duration timeout) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + timeout;
  const bool has_kill = access((dir + "/cgroup.kill").c_str(), W_OK) == 0;
  while (true) {
    std::vector<pid_t> pids = Members(dir);
    if (pids.empty() && rmdir(dir.c_str()) == 0) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("cgroup ", dir, " still holds ", pids.size(), " process(es) after ",
                       absl::FormatDuration(timeout)));
    }
    if (has_kill) {
      std::ofstream(dir + "/cgroup.kill") << "1";
    } else {
      for (pid_t pid : pids) kill(pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

Containment PrepareContainment(bool use_cgroups, const absl::StatusOr<std::string>& own_cgroup, pid_t pid) {
  constexpr char kReaperOnly[] = "trial containment: process group and reaper only";
  if (!use_cgroups) return {"", absl::StrCat(kReaperOnly, " (--no-cgroups)")};
  absl::Status made = own_cgroup.status();
  const std::string parent = own_cgroup.ok() ? absl::StrCat(*own_cgroup, "/det-agent-", pid) : "";
  if (own_cgroup.ok()) made = CreateCgroup(parent);
  if (!made.ok()) {
    return {"", absl::StrCat(kReaperOnly, ", no cgroups: ", made.message(),
                             " (cgroups need a writable cgroup v2 tree: det-agent as root, or systemd's Delegate=yes)")};
  }
  return {parent, absl::StrCat("trial containment: cgroup v2 under ", parent)};
}

int RemoveStaleAgentCgroups(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename();
    if (name.rfind("det-agent-", 0) != 0 || !entry.is_directory(ec)) continue;
    const std::string digits = name.substr(10);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == getpid() || kill(pid, 0) == 0 || errno != ESRCH) continue;
    for (const auto& child : std::filesystem::directory_iterator(entry.path(), ec)) {
      if (child.is_directory(ec)) (void)KillAndRemoveCgroup(child.path().string(), absl::Seconds(5));
    }
    if (rmdir(entry.path().c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace det::agent
