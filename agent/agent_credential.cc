#include "agent/agent_credential.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace det::agent {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxCredentialBytes = 1024;

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

}  // namespace

std::string AgentCredentialPath(const std::string& work_dir) {
  return (fs::path(work_dir) / "agent-credential").string();
}

absl::StatusOr<std::string> ReadAgentCredential(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return Errno(absl::StrCat("open ", path));
  }
  std::string data(kMaxCredentialBytes + 1, '\0');
  size_t total = 0;
  while (total < data.size()) {
    ssize_t n = read(fd, data.data() + total, data.size() - total);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return Errno(absl::StrCat("read ", path));
    }
    if (n == 0) break;
    total += static_cast<size_t>(n);
  }
  close(fd);
  if (total > kMaxCredentialBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is larger than ", kMaxCredentialBytes, " bytes"));
  }
  data.resize(total);
  const char* ws = " \t\r\n";
  data.erase(data.find_last_not_of(ws) + 1);
  data.erase(0, data.find_first_not_of(ws));
  return data;
}

absl::Status WriteAgentCredential(const std::string& path, const std::string& credential) {
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("mkdir ", dir.string(), ": ", ec.message()));
    chmod(dir.c_str(), 0700);
  }
  const std::string tmp = path + ".tmp";
  unlink(tmp.c_str());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno(absl::StrCat("create ", tmp));
  const std::string data = credential + "\n";
  const bool ok = fchmod(fd, 0600) == 0 &&
                  write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size()) && fsync(fd) == 0;
  const int write_errno = errno;
  close(fd);
  if (!ok) {
    unlink(tmp.c_str());
    errno = write_errno;
    return Errno(absl::StrCat("write ", tmp));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return Errno(absl::StrCat("rename ", tmp));
  int dfd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace det::agent
