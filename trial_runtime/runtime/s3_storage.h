// Checkpoints of a managed trial whose checkpoint_storage is S3
// (checkpoint_storage_path "s3://bucket/prefix"; common/s3/s3_checkpoint.h
// has the layout). The chief saves each checkpoint into a private local
// staging directory as for shared_fs, uploads it (every object verified, the
// manifest last), removes the local copy and only then reports it. A restore
// (latest checkpoint, PBT parent, fork source, warm start) downloads the
// checkpoint into staging (verified against its manifest), the trial loads
// it from there, and the copy is removed.
//
// Credentials come from the master (TrialService.GetCheckpointStorageCredentials,
// on the trial's authenticated channel) and live only in this process's
// memory: never in argv, the environment, a file or a log line.
//
// Staging: <the trial's working directory>/det-s3-staging/rank-<R>, mode
// 0700. det-agent starts every rank in its allocation's own directory
// (<agent work_dir>/allocations/<id>, the trial user's, 0700), which is never
// inside the shared checkpoint root. Each rank of a distributed trial has its
// own and downloads a restored checkpoint itself (ranks on several hosts
// share no directory). An earlier run's staging is removed at start.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_S3_STORAGE_H_
#define DET_TRIAL_RUNTIME_RUNTIME_S3_STORAGE_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/s3/s3_checkpoint.h"
#include "common/s3/s3_client.h"
#include "trial_runtime/runtime/checkpoint.h"

namespace det::runtime {

// What the client of one storage location needs (the master's answer).
struct S3Access {
  s3::S3Endpoint endpoint;
  s3::S3Credentials credentials;
};

// Asks the master for the access to `storage_path` (an s3:// URL: the
// experiment's storage or a checkpoint the trial may read).
using S3AccessFetcher = std::function<absl::StatusOr<S3Access>(const std::string& storage_path)>;

// "path" / "virtual" as GetCheckpointStorageCredentials says; InvalidArgument
// otherwise. Pure.
absl::StatusOr<s3::Addressing> ParseAddressing(absl::string_view addressing);

// The staging directory of rank `rank` under `parent` (the working
// directory): <parent>/det-s3-staging/rank-<rank>. Whatever an earlier run
// left there is removed (a symlink is removed, never followed), then the
// directory is created, mode 0700 (both levels); a path there that is not a
// directory of this uid, or one that cannot be made 0700, is an error
// naming it. Returns its path.
absl::StatusOr<std::string> PrepareStagingDir(const std::string& parent, int rank);

// Local mode (det-trial --local, det-cli experiment create --local) has no
// master to hand out S3 credentials: checkpoint_storage.type s3 is refused
// (InvalidArgument naming the field and the fixes) unless --checkpoint-dir
// (`checkpoint_dir_flag`, non-empty) sends the checkpoints to a local
// directory. Pure.
absl::Status CheckLocalCheckpointStorage(absl::string_view storage_type, absl::string_view checkpoint_dir_flag);

// Not thread-safe: the training thread's.
class S3CheckpointStorage {
 public:
  // Requires `staging_dir` to exist (PrepareStagingDir).
  S3CheckpointStorage(S3AccessFetcher fetch, std::string staging_dir, s3::S3RetryPolicy retry = {},
                      s3::S3Limits limits = {});

  // Asks for the access to `storage_path` now and builds its client, so that
  // a refused profile fails the trial at start, not at its first checkpoint.
  absl::Status Open(const std::string& storage_path);

  // Where the chief saves a checkpoint before Upload (<staging>/save).
  std::string save_dir() const;

  // Uploads checkpoint `local` (a directory under save_dir()) to
  // <storage_url>/<uuid> (UploadCheckpoint: every object verified, the
  // manifest last), removes the local copy and returns the checkpoint as it
  // is reported: path = its s3:// URL, the same resources. Prints one line
  // "[det-trial] checkpoint UUID uploaded to s3://... (N objects, M bytes)".
  // On failure (after the client's retries) the local copy and the objects
  // written so far are removed (best effort) and the error names the
  // checkpoint and S3's error: the checkpoint must not be reported.
  absl::StatusOr<SavedCheckpoint> Upload(const std::string& storage_url, const SavedCheckpoint& local);

  // Downloads checkpoint `checkpoint_url` (s3://B/P/<uuid>, verified against
  // its manifest) into a new directory under staging; returns its path.
  // NotFound naming the checkpoint when it has no manifest.
  absl::StatusOr<std::string> Download(const std::string& checkpoint_url);

  // Removes `local_dir` (a directory this object made under staging).
  void Discard(const std::string& local_dir);

 private:
  // The client for `storage_path`'s access (asked of the master once per
  // storage path; cached).
  absl::StatusOr<s3::S3Client*> ClientFor(const std::string& storage_path);

  S3AccessFetcher fetch_;
  std::string staging_;
  s3::S3RetryPolicy retry_;
  s3::S3Limits limits_;
  std::map<std::string, std::unique_ptr<s3::S3Client>> clients_;  // by storage path
  int downloads_ = 0;
};

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_S3_STORAGE_H_
