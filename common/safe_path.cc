#include "common/safe_path.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace det {
namespace {

namespace fs = std::filesystem;

// `path` is `base` or below it (both already resolved), by components.
bool IsWithin(const fs::path& path, const fs::path& base) {
  auto p = path.begin();
  for (auto b = base.begin(); b != base.end(); ++b, ++p) {
    if (b->empty() && std::next(b) == base.end()) break;  // trailing '/'
    if (p == path.end() || *p != *b) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidatePathComponent(absl::string_view name, absl::string_view field) {
  if (name.empty() || name.size() > 255 || name == "." || name == ".." ||
      name.find_first_of(absl::string_view("/\\\0", 3)) != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", name, "' must be a single file name (no '/', '..' or NUL)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRelativePath(absl::string_view path, absl::string_view field) {
  if (path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not contain NUL"));
  }
  if (!path.empty() && path.front() == '/') {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' must be a relative path"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' must not contain '..'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JoinUnder(const std::string& base, absl::string_view relative, absl::string_view field) {
  if (absl::Status st = ValidateRelativePath(relative, field); !st.ok()) return st;
  fs::path joined = fs::path(base) / std::string(relative);
  std::error_code ec1, ec2;
  fs::path real_base = fs::weakly_canonical(fs::absolute(base), ec1);
  fs::path real = fs::weakly_canonical(fs::absolute(joined), ec2);
  if (ec1 || ec2 || !IsWithin(real, real_base)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", relative, "' leads outside ", base));
  }
  return joined.string();
}

absl::Status ValidateSha256(absl::string_view sha256, absl::string_view field) {
  if (!IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", sha256, "' is not a lower-case hex SHA-256"));
  }
  return absl::OkStatus();
}

absl::Status ValidateUuid(absl::string_view id, absl::string_view field) {
  bool ok = id.size() == 36;
  for (size_t i = 0; ok && i < id.size(); ++i) {
    const char c = id[i];
    ok = (i == 8 || i == 13 || i == 18 || i == 23) ? c == '-' : ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": '", id.substr(0, 80), "' is not a canonical lower-case UUID (8-4-4-4-12 hex digits)"));
  }
  return absl::OkStatus();
}

namespace {

std::string WithoutTrailingSlash(fs::path p) {
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::string Errno(int err) { return std::strerror(err); }

}  // namespace

std::string LexicalPath(const std::string& path) {
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  return WithoutTrailingSlash(ec ? fs::path(path) : abs);
}

std::string ResolvedPath(const std::string& path) {
  std::error_code ec;
  fs::path real = fs::weakly_canonical(fs::path(LexicalPath(path)), ec);
  return ec ? LexicalPath(path) : WithoutTrailingSlash(real);
}

bool PathWithin(const std::string& path, const std::string& root) { return IsWithin(fs::path(path), fs::path(root)); }

absl::StatusOr<int> OpenDirNoFollow(const std::string& root, const std::string& relative) {
  int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open directory ", root, ": ", Errno(errno)));
  std::string at = root;
  for (absl::string_view part : absl::StrSplit(relative, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat("'", relative, "' must not contain '..'"));
    }
    const std::string name(part);
    at = absl::StrCat(at, "/", name);
    int next = openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    close(fd);
    if (next < 0) {
      if (err == ENOENT) return absl::NotFoundError(absl::StrCat(at, " does not exist"));
      if (err == ELOOP || err == ENOTDIR) {
        return absl::FailedPreconditionError(absl::StrCat(at, " is a symlink or not a directory; not followed"));
      }
      return absl::InternalError(absl::StrCat("cannot open ", at, ": ", Errno(err)));
    }
    fd = next;
  }
  return fd;
}

namespace {

// Removes everything in directory `fd` (not `fd` itself), depth-first.
absl::Status RemoveChildrenNoFollow(int fd, int depth_left) {
  // fdopendir owns its descriptor: give it a duplicate.
  int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return absl::InternalError(absl::StrCat("dup: ", Errno(errno)));
  DIR* dir = fdopendir(dup_fd);
  if (dir == nullptr) {
    close(dup_fd);
    return absl::InternalError(absl::StrCat("fdopendir: ", Errno(errno)));
  }
  absl::Status st;
  while (st.ok()) {
    errno = 0;
    struct dirent* e = readdir(dir);
    if (e == nullptr) break;
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat info;
    if (fstatat(fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT) st = absl::InternalError(absl::StrCat("stat ", name, ": ", Errno(errno)));
      continue;
    }
    if (!S_ISDIR(info.st_mode)) {
      // Files and symlinks alike: unlinking a symlink never touches its target.
      if (unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT) {
        st = absl::InternalError(absl::StrCat("unlink ", name, ": ", Errno(errno)));
      }
      continue;
    }
    st = RemoveTreeNoFollow(fd, name, depth_left - 1);
  }
  closedir(dir);
  return st;
}

}  // namespace

absl::Status RemoveTreeNoFollow(int dirfd, const std::string& name, int max_depth) {
  DET_RETURN_IF_ERROR(ValidatePathComponent(name, "name"));
  struct stat info;
  if (fstatat(dirfd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("stat ", name, ": ", Errno(errno)));
  }
  if (S_ISLNK(info.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(name, " is a symlink; not followed, not removed"));
  }
  if (!S_ISDIR(info.st_mode)) {
    if (unlinkat(dirfd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat("unlink ", name, ": ", Errno(errno)));
    }
    return absl::OkStatus();
  }
  if (max_depth <= 0) return absl::FailedPreconditionError(absl::StrCat(name, ": directories nested too deeply"));
  // O_NOFOLLOW: if `name` was swapped for a symlink since the fstatat, this
  // fails instead of entering the link's target.
  int fd = openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat("cannot open ", name, " without following: ", Errno(errno)));
  absl::Status st = RemoveChildrenNoFollow(fd, max_depth);
  close(fd);
  if (!st.ok()) return absl::Status(st.code(), absl::StrCat(name, "/", st.message()));
  if (unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return absl::InternalError(absl::StrCat("rmdir ", name, ": ", Errno(errno)));
  }
  return absl::OkStatus();
}

}  // namespace det
