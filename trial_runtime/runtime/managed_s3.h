// Managed mode's link between S3 checkpoint storage (s3_storage.h) and the
// master: the access to a storage location is asked of the master's
// TrialService.GetCheckpointStorageCredentials on the trial's authenticated
// channel and kept in memory only.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_MANAGED_S3_H_
#define DET_TRIAL_RUNTIME_RUNTIME_MANAGED_S3_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "det/trial/v1/trial.pb.h"
#include "trial_runtime/runtime/master_client.h"
#include "trial_runtime/runtime/s3_storage.h"

namespace det::runtime {

// A fetcher asking the master, through `client` (which must outlive it), for
// trial `trial_id`'s access to a storage path.
S3AccessFetcher MasterS3Access(MasterClient* client, int64_t trial_id);

// Whether this run touches S3: the experiment's storage, the checkpoint it
// restores or the one it warm-starts from is an s3:// URL.
bool UsesS3(const ::det::trial::v1::GetTrialContextResponse& tc);

// The S3 storage of rank `rank` (staging in the working directory) when the
// run uses S3, else null. The chief also asks for the access to the
// experiment's storage now (a refused profile fails at start). Errors name
// what failed.
absl::StatusOr<std::unique_ptr<S3CheckpointStorage>> OpenS3Storage(
    MasterClient* client, const ::det::trial::v1::GetTrialContextResponse& tc, int rank, bool chief);

// The local directory of checkpoint `storage_path`: itself, or for an s3://
// checkpoint its verified download into `s3`'s staging (Internal when `s3`
// is null). DiscardLocalCheckpoint removes such a download after loading
// (nothing else).
absl::StatusOr<std::string> LocalCheckpointDir(S3CheckpointStorage* s3, const std::string& storage_path);
void DiscardLocalCheckpoint(S3CheckpointStorage* s3, const std::string& dir);

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_MANAGED_S3_H_
