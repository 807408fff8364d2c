#include "agent/artifact_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/safe_path.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace det::agent {

namespace fs = std::filesystem;

ArtifactCache::ArtifactCache(std::string dir) : dir_(std::move(dir)) {}

std::string ArtifactCache::PathFor(const std::string& sha256) const {
  return (fs::path(dir_) / (sha256 + ".so")).string();
}

absl::StatusOr<std::string> ArtifactCache::Get(const std::string& sha256, const Fetcher& fetch) {
  // The hash names a file: never let it name one outside dir_.
  DET_RETURN_IF_ERROR(ValidateSha256(sha256, "sha256"));
  // A cached file replaced by a symlink (or anything but a file) is not
  // followed: it goes, and the artifact is fetched again.
  struct stat st;
  const std::string candidate = PathFor(sha256);  // 64 hex digits: one file name
  if (lstat(candidate.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    spdlog::warn("cached artifact {} was tampered with (not a regular file); deleting it", candidate);
    if (unlink(candidate.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot delete ", candidate, ": ", std::strerror(errno)));
    }
  }
  DET_ASSIGN_OR_RETURN(const std::string path, JoinUnder(dir_, sha256 + ".so", "sha256"));
  {
    absl::MutexLock lock(&mu_);
    // Wait for another download (or check) of the same hash to finish.
    auto not_in_flight = [this, &sha256]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return in_flight_.count(sha256) == 0;
    };
    mu_.Await(absl::Condition(&not_in_flight));
    in_flight_[sha256] = true;
  }
  absl::StatusOr<std::string> result = UseOrDownload(sha256, path, fetch);
  absl::MutexLock lock(&mu_);
  in_flight_.erase(sha256);
  return result;
}

absl::StatusOr<std::string> ArtifactCache::UseOrDownload(const std::string& sha256, const std::string& path,
                                                         const Fetcher& fetch) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    // Anything with write access to the cache (a trial of the agent's uid)
    // could have changed the file since it was cached: check it every time.
    absl::StatusOr<std::string> got = absl::DataLossError("not a regular file");
    if (S_ISREG(st.st_mode)) got = Sha256File(path);
    if (got.ok() && *got == sha256) return path;
    spdlog::warn("cached artifact {} was tampered with ({}); deleting it and fetching it again", path,
                 got.ok() ? absl::StrCat("it hashes to ", *got) : got.status().ToString());
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot delete tampered artifact ", path, ": ", std::strerror(errno)));
    }
  }
  return Download(sha256, fetch);
}

absl::StatusOr<std::string> ArtifactCache::Download(const std::string& sha256,
                                                    const Fetcher& fetch) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir ", dir_, ": ", ec.message()));
  // Trial users may read a trial.so they know the name of; they may not
  // list the cache (other users' trial.so files); only the agent writes.
  chmod(dir_.c_str(), 0711);
  const std::string path = PathFor(sha256);
  const std::string tmp = path + ".tmp";
  unlink(tmp.c_str());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  Sha256 hash;
  int64_t written = 0;
  ChunkSink sink = [&](int64_t offset, absl::string_view data) -> absl::Status {
    if (offset != written) {
      return absl::DataLossError(absl::StrCat("artifact chunk at offset ", offset, ", expected ", written));
    }
    for (size_t done = 0; done < data.size();) {
      ssize_t n = write(fd, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return absl::InternalError(absl::StrCat("write error on ", tmp, ": ", std::strerror(errno)));
      done += static_cast<size_t>(n);
    }
    hash.Update(data);
    written += static_cast<int64_t>(data.size());
    return absl::OkStatus();
  };
  absl::Status st = fetch(sha256, sink);
  // Durable before it gets its name: a crash never leaves a partial file
  // under the final name. Read-only for everyone.
  if (st.ok() && (fchmod(fd, 0444) != 0 || fsync(fd) != 0)) {
    st = absl::InternalError(absl::StrCat("fsync ", tmp, ": ", std::strerror(errno)));
  }
  close(fd);
  if (!st.ok()) {
    unlink(tmp.c_str());
    return st;
  }
  const std::string got = hash.HexDigest();
  if (got != sha256) {
    unlink(tmp.c_str());
    return absl::DataLossError(absl::StrCat("artifact ", sha256, " hashes to ", got, " (",
                                            written, " bytes); discarded"));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("rename ", tmp, ": ", std::strerror(errno)));
  }
  int dfd = open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  spdlog::info("cached artifact {} ({} bytes)", sha256, written);
  return path;
}

}  // namespace det::agent
