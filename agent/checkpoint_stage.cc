#include "agent/checkpoint_stage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"

namespace det::agent {
namespace {

struct Budget {
  int64_t entries = 0;
  int64_t bytes = 0;
};

absl::Status Io(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat("staging checkpoint: ", what, " ", path, ": ", std::strerror(errno)));
}

// Copies the regular file open as `in` to new file `dst`.
absl::Status CopyFile(int in, const std::string& dst, uid_t uid, gid_t gid, const StageLimits& limits,
                      Budget* budget) {
  const int out = open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (out < 0) return Io("create", dst);
  absl::Status st;
  char buf[1 << 16];
  while (st.ok()) {
    ssize_t n = read(in, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) st = Io("read for", dst);
    if (n <= 0) break;
    budget->bytes += n;
    if (budget->bytes > limits.max_bytes) {
      st = absl::ResourceExhaustedError(absl::StrCat("staging checkpoint: more than ", limits.max_bytes, " bytes"));
      break;
    }
    for (ssize_t done = 0; done < n && st.ok();) {
      ssize_t w = write(out, buf + done, static_cast<size_t>(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) st = Io("write", dst);
      done += w > 0 ? w : 0;
    }
  }
  if (st.ok() && fchown(out, uid, gid) != 0) st = Io("chown", dst);
  close(out);
  return st;
}

// Copies directory `src` (open as `dir_fd`, which this closes) into the
// existing directory `dst`.
absl::Status CopyDir(int dir_fd, const std::string& src, const std::string& dst, uid_t uid, gid_t gid, int depth,
                     const StageLimits& limits, Budget* budget) {
  DIR* dir = fdopendir(dir_fd);
  if (dir == nullptr) {
    close(dir_fd);
    return Io("list", src);
  }
  absl::Status st;
  while (dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (++budget->entries > limits.max_entries) {
      st = absl::ResourceExhaustedError(
          absl::StrCat("staging checkpoint ", src, ": more than ", limits.max_entries, " files"));
      break;
    }
    const int fd = openat(dirfd(dir), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      if (errno == ELOOP) continue;  // a symlink: skipped
      st = Io("open", src + "/" + name);
      break;
    }
    struct stat s {};
    if (fstat(fd, &s) != 0) {
      close(fd);
      st = Io("stat", src + "/" + name);
      break;
    }
    const std::string to = dst + "/" + name;
    if (S_ISREG(s.st_mode)) {
      st = CopyFile(fd, to, uid, gid, limits, budget);
      close(fd);
    } else if (S_ISDIR(s.st_mode)) {
      if (depth + 1 > limits.max_depth) {
        close(fd);
        st = absl::ResourceExhaustedError(absl::StrCat("staging checkpoint ", src, ": deeper than ", limits.max_depth));
      } else if (mkdir(to.c_str(), 0700) != 0 || lchown(to.c_str(), uid, gid) != 0) {
        close(fd);
        st = Io("create", to);
      } else {
        st = CopyDir(fd, src + "/" + name, to, uid, gid, depth + 1, limits, budget);
      }
    } else {
      close(fd);  // a fifo, socket or device: skipped
    }
    if (!st.ok()) break;
  }
  closedir(dir);
  return st;
}

}  // namespace

absl::Status StageCheckpoint(const std::string& src, const std::string& dst, uid_t uid, gid_t gid,
                             const std::string& field, const StageLimits& limits) {
  if (src.empty() || src[0] != '/' || src.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, " '", src.substr(0, 256), "' is not an absolute path"));
  }
  const int fd = open(src.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", src.substr(0, 256), ": not a readable directory: ", std::strerror(errno)));
  }
  if (mkdir(dst.c_str(), 0700) != 0 || lchown(dst.c_str(), uid, gid) != 0) {
    close(fd);
    return Io("create", dst);
  }
  Budget budget;
  absl::Status st = CopyDir(fd, src, dst, uid, gid, 0, limits, &budget);
  if (!st.ok()) {
    std::error_code ec;
    std::filesystem::remove_all(dst, ec);
  }
  return st;
}

}  // namespace det::agent
