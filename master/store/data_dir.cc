#include "master/store/data_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

// The first `max` bytes of `path` (a small file), or "" when unreadable.
std::string ReadHead(const std::string& path, size_t max) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "";
  std::string out(max, '\0');
  const ssize_t n = read(fd, out.data(), max);
  close(fd);
  out.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

bool NonEmptyDir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return false;
  fs::directory_iterator it(dir, ec);
  return !ec && it != fs::directory_iterator();
}

// What in `data_dir` shows that a cluster's state lies there (see
// CheckDatabaseNotLost), one phrase each.
std::vector<std::string> ClusterStateIn(const fs::path& data_dir, const std::string& db_path) {
  std::vector<std::string> found;
  std::error_code ec;
  const fs::path id_file = data_dir / kClusterIdFile;
  if (fs::exists(fs::symlink_status(id_file, ec))) {
    std::string id = ReadHead(id_file, 64);
    if (id.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) id = "?";
    found.push_back(absl::StrCat(id_file.string(), " (cluster ", id, ")"));
  }
  for (const char* sub : {"artifacts", "checkpoints"}) {
    if (NonEmptyDir(data_dir / sub)) found.push_back(absl::StrCat((data_dir / sub).string(), "/ (not empty)"));
  }
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    if (fs::exists(fs::symlink_status(db_path + suffix, ec))) found.push_back(db_path + suffix);
  }
  fs::directory_iterator it(data_dir, ec);
  for (int seen = 0; !ec && it != fs::directory_iterator() && seen < 100000; it.increment(ec), ++seen) {
    if (absl::StartsWith(it->path().filename().string(), ".det-backup-")) {
      found.push_back(it->path().string());
      break;
    }
  }
  return found;
}

}  // namespace

absl::Status CheckDatabaseNotLost(const std::string& data_dir, const std::string& db_path, bool init_empty_db) {
  struct stat st {};
  if (stat(db_path.c_str(), &st) == 0 && st.st_size > 0) return absl::OkStatus();
  const std::vector<std::string> found = ClusterStateIn(data_dir, db_path);
  if (found.empty()) return absl::OkStatus();
  const std::string what =
      absl::StrCat("the database ", db_path, " is missing or empty, but the data dir ", data_dir,
                   " holds a cluster's state (", absl::StrJoin(found, ", "),
                   "): starting would create an empty database over it (no experiments, users or tokens)");
  if (init_empty_db) {
    spdlog::warn("{}; {} given: starting an empty cluster", what, kInitEmptyDbFlag);
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, ". Restore the database from a backup (docs/operations/backup.md, Restore), or to start an empty "
      "cluster on purpose, start once with ", kInitEmptyDbFlag));
}

absl::Status RecordClusterId(const std::string& data_dir, const std::string& cluster_id) {
  const std::string path = (fs::path(data_dir) / kClusterIdFile).string();
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  const std::string text = cluster_id + "\n";
  const bool written = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) close(fd);
  if (!written || rename(tmp.c_str(), path.c_str()) != 0) {
    const int why = written ? errno : err;
    unlink(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(why)));
  }
  return absl::OkStatus();
}

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
