// Checkpoints of experiments whose checkpoint_storage is s3
// (common/s3/s3_checkpoint.h's layout): what the master reads, checks and
// deletes of them. A checkpoint row's storage_path and resources come from a
// trial's report (untrusted), and the objects from trial code too: every
// operation first checks that the row's storage_path is exactly the
// checkpoint's location under its experiment's storage
// (s3://B/P/<uuid> for the experiment's bucket B and prefix P), so a row can
// never name another experiment's keys; downloads are checked against the
// manifest (sizes, then each file's MD5 at its end).
//
// These functions do S3 network I/O: never call them under MasterCore's
// mutex.
#ifndef DET_MASTER_CORE_CHECKPOINT_FILES_S3_H_
#define DET_MASTER_CORE_CHECKPOINT_FILES_S3_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/s3/s3_checkpoint.h"
#include "common/s3/s3_client.h"
#include "master/core/checkpoint_files.h"
#include "master/store/store.h"

namespace det::master {

// The location of checkpoint `row` (storage_path "s3://..."), when it is
// exactly CheckpointLocation(experiment, row.uuid); else FailedPrecondition
// naming the checkpoint, its recorded path and the experiment's storage
// (nothing is read or deleted). Pure.
absl::StatusOr<s3::S3Location> S3CheckpointOfRow(const s3::S3Location& experiment, const CheckpointRow& row);

// Checks a checkpoint report against the checkpoint's manifest: every
// reported resource is in the manifest at its reported size, and the
// manifest has metadata.json (which det-trial writes after listing the
// resources). The manifest may list more files than the report: det-trial
// reports only the directory's top-level files, while a callback's
// on_checkpoint_save may write subdirectories, which are uploaded and
// listed in the manifest (bounded by its rules). Returns metadata.json's
// size when the
// manifest has it and `resources` does not (recorded as the shared_fs path
// records it), else nullopt. FailedPrecondition "checkpoint <uuid>: its
// objects in <url> are incomplete (...)" naming the first difference. Pure.
absl::StatusOr<std::optional<int64_t>> CheckManifestAgainstReport(const s3::Manifest& manifest,
                                                                  const std::map<std::string, int64_t>& resources,
                                                                  const std::string& uuid, const std::string& url);

// ReadManifest of `checkpoint` and CheckManifestAgainstReport; no manifest
// is FailedPrecondition "... incomplete (no manifest ...)". S3 I/O.
absl::StatusOr<std::optional<int64_t>> VerifyS3CheckpointReport(s3::S3Client& client,
                                                                const s3::S3Location& checkpoint,
                                                                const std::map<std::string, int64_t>& resources,
                                                                const std::string& uuid);

// Deletes checkpoint `row`'s objects (s3::DeleteCheckpoint, the manifest
// first) after S3CheckpointOfRow's check; only keys under the experiment's
// prefix. Returns how many objects went (0: already gone). S3 I/O.
absl::StatusOr<int64_t> DeleteS3CheckpointRow(s3::S3Client& client, const s3::S3Location& experiment,
                                              const CheckpointRow& row);

// The download source of checkpoint `row` of an experiment whose storage is
// `experiment`: S3CheckpointOfRow, ReadManifest (NotFound when the manifest
// is gone), CheckResources's bounds, then every recorded resource must be
// in the manifest at its recorded size (DataLoss naming the file
// otherwise); the download is every file of the manifest (metadata.json
// and unreported subdirectory files included, under CheckResources's
// bounds), so a restorable checkpoint downloads whole. Next() reads each file in chunk_bytes ranges (GetObjectRange), after
// a HeadObject that checks its size, and compares its MD5 with the
// manifest's at its end (DataLoss naming file and checkpoint). Takes the
// client (one per download). S3 I/O.
absl::StatusOr<std::unique_ptr<CheckpointFiles>> OpenS3CheckpointFiles(std::unique_ptr<s3::S3Client> client,
                                                                       const s3::S3Location& experiment,
                                                                       const CheckpointRow& row,
                                                                       const CheckpointFileLimits& limits = {});

}  // namespace det::master

#endif  // DET_MASTER_CORE_CHECKPOINT_FILES_S3_H_
