#include "master/core/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/safe_path.h"
#include "common/status_macros.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;

constexpr char kMetadataFile[] = "metadata.json";

// Opens `relative` below directory `dir_fd`, every component with
// O_NOFOLLOW; the last one read-only and non-blocking (a FIFO must not hang
// the master). Returns -1 with errno set on failure.
int OpenNoFollowAt(int dir_fd, const std::string& relative) {
  std::vector<std::string> parts;
  for (absl::string_view p : absl::StrSplit(relative, '/', absl::SkipEmpty())) {
    if (p != ".") parts.emplace_back(p);
  }
  if (parts.empty()) {
    errno = EINVAL;
    return -1;
  }
  int fd = dir_fd;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    int next = openat(fd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    if (fd != dir_fd) close(fd);
    if (next < 0) {
      errno = err;
      return -1;
    }
    fd = next;
  }
  int file = openat(fd, parts.back().c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  const int err = errno;
  if (fd != dir_fd) close(fd);
  errno = err;
  return file;
}

}  // namespace

absl::StatusOr<int64_t> CheckpointMetadataSize(const CheckpointRoots& roots, const std::string& storage_path,
                                               const std::string& uuid) {
  DET_ASSIGN_OR_RETURN(int fd, roots.OpenCheckpoint(storage_path, uuid));
  struct stat st;
  const bool regular = fstatat(fd, kCheckpointMetadataFile, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
  close(fd);
  if (!regular) return absl::NotFoundError(absl::StrCat(storage_path, " has no regular ", kCheckpointMetadataFile));
  return static_cast<int64_t>(st.st_size);
}

absl::StatusOr<std::vector<CheckpointFiles::File>> CheckpointFiles::CheckResources(
    const CheckpointRow& row, const CheckpointFileLimits& limits, int64_t* total) {
  auto bad = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", row.uuid, ": ", why));
  };
  if (static_cast<int64_t>(row.resources.size()) > limits.max_files) {
    return bad(absl::StrCat(row.resources.size(), " files; at most ", limits.max_files, " can be downloaded"));
  }
  std::vector<File> files;
  *total = 0;
  for (const auto& [path, size] : row.resources) {  // std::map: path order
    if (static_cast<int64_t>(path.size()) > limits.max_path_bytes) {
      return bad(absl::StrCat("a file path of ", path.size(), " bytes; at most ", limits.max_path_bytes));
    }
    absl::Status st = ValidateRelativePath(path, "resources");
    if (!st.ok() || path.empty() || path.front() == '/') return bad(absl::StrCat("bad file path '", path, "'"));
    if (size < 0 || size > limits.max_total_bytes - *total) {
      return bad(absl::StrCat("more than ", limits.max_total_bytes, " bytes; too large to download"));
    }
    *total += size;
    files.push_back({path, size});
  }
  return files;
}

namespace {

// The shared_fs source: files below the checkpoint directory, opened
// without following a symlink.
class LocalCheckpointFiles final : public CheckpointFiles {
 public:
  LocalCheckpointFiles(int dir_fd, std::string uuid, std::vector<File> files, int64_t total, int64_t chunk)
      : CheckpointFiles(std::move(uuid), std::move(files), total, chunk), dir_fd_(dir_fd) {}
  ~LocalCheckpointFiles() override {
    if (file_fd_ >= 0) close(file_fd_);
    close(dir_fd_);
  }
  absl::StatusOr<bool> Next(apiv1::DownloadCheckpointResponse* out) override;

 private:
  // Opens files_[index_] (no symlink followed, regular, recorded size).
  absl::Status OpenCurrent();

  const int dir_fd_;
  size_t index_ = 0;    // the file being sent
  int64_t offset_ = 0;  // within it
  int file_fd_ = -1;    // files_[index_] once opened
};

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointFiles>> CheckpointFiles::Open(const CheckpointRoots& roots,
                                                                       const CheckpointRow& row,
                                                                       const CheckpointFileLimits& limits) {
  int64_t total = 0;
  DET_ASSIGN_OR_RETURN(std::vector<File> files, CheckResources(row, limits, &total));
  DET_ASSIGN_OR_RETURN(int fd, roots.OpenCheckpoint(row.storage_path, row.uuid));
  // det-trial writes metadata.json last, after listing the resources: it is
  // sent too (what makes the directory a checkpoint), at its size now.
  if (row.resources.count(kMetadataFile) == 0) {
    int meta = OpenNoFollowAt(fd, kMetadataFile);
    const int err = errno;
    struct stat st;
    const bool regular = meta >= 0 && fstat(meta, &st) == 0 && S_ISREG(st.st_mode);
    if (meta >= 0) close(meta);
    if (meta < 0 && err != ENOENT) {
      close(fd);
      return absl::DataLossError(absl::StrCat("checkpoint ", row.uuid, ": file ", kMetadataFile,
                                              ": a symlink or not a file (not followed)"));
    }
    if (regular && st.st_size <= limits.max_total_bytes - total) {
      total += st.st_size;
      files.push_back({kMetadataFile, st.st_size});
      std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.path < b.path; });
    }
  }
  return std::unique_ptr<CheckpointFiles>(
      new LocalCheckpointFiles(fd, row.uuid, std::move(files), total, std::max<int64_t>(1, limits.chunk_bytes)));
}

absl::Status LocalCheckpointFiles::OpenCurrent() {
  const File& f = files_[index_];
  auto lost = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("checkpoint ", uuid_, ": file ", f.path, ": ", why));
  };
  file_fd_ = OpenNoFollowAt(dir_fd_, f.path);
  if (file_fd_ < 0) {
    const int err = errno;
    if (err == ELOOP || err == ENOTDIR) return lost("a symlink or not a file (not followed)");
    return lost(std::strerror(err));
  }
  struct stat st;
  if (fstat(file_fd_, &st) != 0) return lost(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return lost("not a regular file");
  if (st.st_size != f.size) return lost(absl::StrCat(st.st_size, " bytes on disk; ", f.size, " recorded"));
  return absl::OkStatus();
}

absl::StatusOr<bool> LocalCheckpointFiles::Next(apiv1::DownloadCheckpointResponse* out) {
  if (index_ >= files_.size()) return false;
  const File& f = files_[index_];
  if (file_fd_ < 0) DET_RETURN_IF_ERROR(OpenCurrent());
  const int64_t n = std::min(chunk_, f.size - offset_);
  out->Clear();
  out->set_path(f.path);
  out->set_offset(offset_);
  out->set_file_size(f.size);
  std::string* data = out->mutable_data();
  data->resize(static_cast<size_t>(n));
  int64_t got = 0;
  while (got < n) {
    ssize_t r = pread(file_fd_, data->data() + got, static_cast<size_t>(n - got), offset_ + got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return absl::DataLossError(absl::StrCat("checkpoint ", uuid_, ": file ", f.path, ": ",
                                              r < 0 ? std::strerror(errno) : "shorter than recorded"));
    }
    got += r;
  }
  offset_ += n;
  if (offset_ >= f.size) {
    close(file_fd_);
    file_fd_ = -1;
    offset_ = 0;
    ++index_;
  }
  return true;
}

}  // namespace det::master
