// CheckpointFiles: the files of one checkpoint, read for DownloadCheckpoint
// (gRPC chunks, REST tar). The file list is the checkpoint's recorded
// resources (reported by trial code: untrusted), so it is bounded and every
// path is checked; the directory is opened through CheckpointRoots and every
// file below it without following a symlink, and only regular files of the
// recorded size are read.
#ifndef DET_MASTER_CORE_CHECKPOINT_FILES_H_
#define DET_MASTER_CORE_CHECKPOINT_FILES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "det/api/v1/checkpoint.pb.h"
#include "master/core/checkpoint_roots.h"
#include "master/store/store.h"

namespace det::master {

struct CheckpointFileLimits {
  int64_t max_files = 10000;
  int64_t max_total_bytes = int64_t{64} << 30;  // 64 GiB
  int64_t max_path_bytes = 1024;
  int64_t chunk_bytes = int64_t{1} << 20;  // DownloadCheckpointResponse.data
};

// The name and size of the file det-trial writes last into a checkpoint
// directory, after it listed the other files as the checkpoint's resources:
// "metadata.json" at its size in checkpoint `uuid`'s directory
// `storage_path` (opened as CheckpointRoots::OpenCheckpoint does; the file
// not followed if a symlink). NotFound when there is no such regular file.
// Thread-safe; reads the file system.
inline constexpr char kCheckpointMetadataFile[] = "metadata.json";
absl::StatusOr<int64_t> CheckpointMetadataSize(const CheckpointRoots& roots, const std::string& storage_path,
                                               const std::string& uuid);

// The files of one checkpoint for a download, in path order. The shared_fs
// source is Open's (below); the S3 source is OpenS3CheckpointFiles
// (checkpoint_files_s3.h). Not thread-safe: one per download.
class CheckpointFiles {
 public:
  struct File {
    std::string path;  // relative, as recorded
    int64_t size = 0;
  };

  // Opens checkpoint `row`'s directory (CheckpointRoots::OpenCheckpoint) and
  // checks its resources (plus metadata.json, which det-trial writes after
  // listing them, at its current size): CheckResources's rules
  // (FailedPrecondition naming the checkpoint otherwise; NotFound when the
  // directory is gone).
  static absl::StatusOr<std::unique_ptr<CheckpointFiles>> Open(const CheckpointRoots& roots,
                                                               const CheckpointRow& row,
                                                               const CheckpointFileLimits& limits = {});
  virtual ~CheckpointFiles() = default;
  CheckpointFiles(const CheckpointFiles&) = delete;
  CheckpointFiles& operator=(const CheckpointFiles&) = delete;

  // The files in path order.
  const std::vector<File>& files() const { return files_; }
  int64_t total_bytes() const { return total_bytes_; }

  // Fills `out` with the next chunk (files in path order, each in offset
  // order, at most chunk_bytes each; an empty file is one empty chunk).
  // Returns false when every file has been sent. DataLoss naming the file
  // (and the checkpoint) when it is missing, not of its recorded size or
  // content (shared_fs: not a regular file, reached through a symlink; S3:
  // not the manifest's MD5).
  virtual absl::StatusOr<bool> Next(::det::api::v1::DownloadCheckpointResponse* out) = 0;

  // Checkpoint `row`'s recorded resources as files in path order: at most
  // limits.max_files, paths relative without '..', at most max_path_bytes
  // each, sizes >= 0, total at most max_total_bytes (FailedPrecondition
  // naming the checkpoint otherwise). Sets *total. Pure.
  static absl::StatusOr<std::vector<File>> CheckResources(const CheckpointRow& row,
                                                          const CheckpointFileLimits& limits, int64_t* total);

 protected:
  CheckpointFiles(std::string uuid, std::vector<File> files, int64_t total, int64_t chunk)
      : uuid_(std::move(uuid)), files_(std::move(files)), total_bytes_(total), chunk_(chunk) {}

  const std::string uuid_;
  const std::vector<File> files_;
  const int64_t total_bytes_;
  const int64_t chunk_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_CHECKPOINT_FILES_H_
