// Checkpoints in S3: the layout and the verified copy of a checkpoint
// directory up to and down from a bucket. A checkpoint `uuid` of an
// experiment whose checkpoint_storage has bucket B and prefix P is the
// objects
//
//   P/<uuid>/<relative path>      one per regular file of the directory
//   P/<uuid>/det-manifest.json    written last: {"format": 1, "files":
//                                 [{"path", "size", "md5"}...]}
//
// and is recorded as storage_path "s3://B/P/<uuid>" (P may be empty:
// "s3://B/<uuid>"). A checkpoint without its manifest is incomplete: it is
// never reported, restored, downloaded or listed as a file.
#ifndef DET_COMMON_S3_S3_CHECKPOINT_H_
#define DET_COMMON_S3_S3_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/s3/s3_client.h"

namespace det::s3 {

inline constexpr char kManifestName[] = "det-manifest.json";
inline constexpr int64_t kMaxManifestBytes = int64_t{4} << 20;
inline constexpr int kMaxCheckpointFiles = 10000;
inline constexpr size_t kMaxPrefixBytes = 512;
// Free disk space a download keeps beyond its files (DownloadCheckpoint).
inline constexpr uint64_t kDownloadDiskMarginBytes = uint64_t{64} << 20;

struct S3Location {
  std::string bucket;
  std::string key_prefix;  // no leading or trailing '/'; may be empty
};

// "s3://bucket/a/b" -> {bucket, "a/b"}. InvalidArgument when not s3://, the
// bucket is invalid, or the prefix has an empty, "." or ".." segment or is
// longer than kMaxPrefixBytes. Pure.
absl::StatusOr<S3Location> ParseS3Url(absl::string_view url);
std::string FormatS3Url(const S3Location& location);
bool IsS3Url(absl::string_view storage_path);
// The checkpoint's location: {bucket, prefix + "/" + uuid} (uuid checked).
absl::StatusOr<S3Location> CheckpointLocation(const S3Location& storage, absl::string_view uuid);

struct ManifestFile {
  std::string path;  // relative, '/'-separated, no "..", no leading '/'
  int64_t size = 0;
  std::string md5;   // lowercase hex
};
struct Manifest {
  std::vector<ManifestFile> files;  // sorted by path
  int64_t total_bytes() const;
};

// Parses and checks a manifest (at most kMaxCheckpointFiles files, each path
// valid and its key within the client's max_key_bytes under `checkpoint`,
// sizes >= 0, md5 32 hex digits; no duplicates). InvalidArgument naming the
// entry. Pure.
absl::StatusOr<Manifest> ParseManifest(absl::string_view json, const S3Location& checkpoint,
                                       const S3Limits& limits);
std::string ManifestJson(const Manifest& manifest);

// Uploads every regular file under directory `dir` (no symlink followed; at
// most kMaxCheckpointFiles; a key longer than limits.max_key_bytes is an
// InvalidArgument naming the file) to `checkpoint`, each verified
// (S3Client::PutObjectFromFile), then the manifest. Returns the manifest.
// On failure nothing is reported: the objects written so far stay
// (no manifest), and the caller may retry or delete them.
absl::StatusOr<Manifest> UploadCheckpoint(S3Client& client, const S3Location& checkpoint, const std::string& dir);

// Reads and checks `checkpoint`'s manifest (NotFound when absent: the
// checkpoint is incomplete or gone).
absl::StatusOr<Manifest> ReadManifest(S3Client& client, const S3Location& checkpoint);

// Downloads `checkpoint` into new directory `dir` (must not exist:
// AlreadyExists; created 0700 as a temporary sibling, renamed into place
// when every file is written and verified against the manifest: size and
// MD5; on any error the sibling is removed and nothing is left). A manifest
// that fails ParseManifest is DataLoss. Before the first GET, the file
// system of `dir`'s parent must have the manifest's total bytes plus
// kDownloadDiskMarginBytes free (ResourceExhausted naming the checkpoint,
// the bytes needed and the bytes free; nothing written). Returns the
// manifest.
absl::StatusOr<Manifest> DownloadCheckpoint(S3Client& client, const S3Location& checkpoint, const std::string& dir);

// Deletes every object under `checkpoint`'s key prefix + "/" (the manifest
// first, so a half-deleted checkpoint is incomplete, never restorable).
// Refuses (InvalidArgument) a checkpoint location whose key prefix is not
// exactly `experiment_prefix` + "/<uuid>" ("<uuid>" when the experiment
// prefix is empty), and a listing that returns a key outside it
// (FailedPrecondition, nothing deleted). Returns how many objects were
// deleted (0 when none are left).
absl::StatusOr<int64_t> DeleteCheckpoint(S3Client& client, const S3Location& checkpoint,
                                         absl::string_view experiment_prefix);

}  // namespace det::s3

#endif  // DET_COMMON_S3_S3_CHECKPOINT_H_
