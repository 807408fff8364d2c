#include "master/store/data_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"

namespace det::master {
namespace {

namespace fs = std::filesystem;

std::string Octal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

// A data dir owned by another uid (as PostgreSQL refuses): e.g. one an
// attacker pre-created 0700 under /tmp can be swapped or read by its owner.
absl::Status OwnerRefusal(const std::string& dir, uid_t owner, uid_t master_euid, bool allow_insecure) {
  const std::string what = absl::StrCat("data dir ", dir, " is owned by uid ", owner, ", not by the master's uid ",
                                        master_euid, ": its owner can read or replace the database");
  if (allow_insecure) {
    spdlog::warn("{} ({} given; not recommended)", what, kAllowInsecureDataDirFlag);
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(what, "; run `chown ", master_euid, " ", dir,
                                                    "` as root (or start with ", kAllowInsecureDataDirFlag,
                                                    ", not recommended)"));
}

}  // namespace

absl::Status PreparePrivateDataDir(const std::string& dir, bool allow_insecure) {
  return PreparePrivateDataDirOf(dir, allow_insecure, geteuid());
}

absl::Status PreparePrivateDataDirOf(const std::string& dir, bool allow_insecure, uid_t master_euid) {
  if (dir.empty()) return absl::InvalidArgumentError("--data-dir is empty; name a directory, e.g. /var/lib/det");
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    std::error_code ec;
    const fs::path parent = fs::path(dir).lexically_normal().parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (ec || (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)) {
      const std::string why = ec ? ec.message() : std::strerror(errno);
      return absl::InvalidArgumentError(absl::StrCat("--data-dir ", dir, ": cannot create it: ", why));
    }
  }
  if (stat(dir.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--data-dir ", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat("--data-dir ", dir, " is not a directory"));
  if (st.st_uid != master_euid) return OwnerRefusal(dir, st.st_uid, master_euid, allow_insecure);
  if ((st.st_mode & 077) == 0) return absl::OkStatus();
  const std::string what =
      absl::StrCat("data dir ", dir, " has mode ", Octal(st.st_mode),
                   ": group or others can read, write or enter it, and it holds the database (password and token "
                   "hashes, every config)");
  if (allow_insecure) {
    spdlog::warn("{} ({} given; not recommended)", what, kAllowInsecureDataDirFlag);
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(what, "; run `chmod 700 ", dir, "` (or start with ",
                                                    kAllowInsecureDataDirFlag, ", not recommended)"));
}

absl::Status MakeDatabaseFilesPrivate(const std::string& db_path) {
  int fd = open(db_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    close(fd);
    return absl::OkStatus();
  }
  if (errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot create SQLite database ", db_path, ": ", std::strerror(errno)));
  }
  for (const std::string& path : {db_path, db_path + "-wal", db_path + "-shm"}) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || (st.st_mode & 077) == 0) continue;
    if (chmod(path.c_str(), 0600) != 0) {
      return absl::UnavailableError(absl::StrCat("SQLite file ", path, " has mode ", Octal(st.st_mode),
                                                 " and cannot be made 0600: ", std::strerror(errno),
                                                 "; run `chmod 600 ", path, "`"));
    }
    spdlog::info("SQLite file {} had mode {}: now 0600 (only the master's user may read it)", path,
                 Octal(st.st_mode));
  }
  return absl::OkStatus();
}

}  // namespace det::master
