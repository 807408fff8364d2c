// Content-addressed storage of uploaded trial libraries: <dir>/<sha256>.so.
#ifndef DET_MASTER_CORE_ARTIFACT_STORE_H_
#define DET_MASTER_CORE_ARTIFACT_STORE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace det::master {

// Returns OK when `bytes` is an ELF shared object (ET_DYN) for this machine's
// architecture; InvalidArgument naming what is wrong otherwise.
absl::Status CheckSharedLibrary(const std::string& bytes);

// The label a client gave its trial.so (CreateExperimentRequest
// .trial_so_name): "" becomes "trial.so"; INVALID_ARGUMENT naming
// trial_so_name when it is over 255 bytes, contains '/', a control
// character or is "." or "..". Never a path: the master opens nothing by it.
absl::StatusOr<std::string> ValidateTrialSoName(const std::string& name);

// Thread-safe: files are written to a temporary name and renamed.
class ArtifactStore {
 public:
  explicit ArtifactStore(std::string dir) : dir_(std::move(dir)) {}
  // Validates and stores `bytes`; returns their sha256 (idempotent).
  absl::StatusOr<std::string> Put(const std::string& bytes);
  // A new empty temporary file in the store's directory for an upload
  // (written by the caller, then given to Adopt, or removed). Returns its
  // path and an open, writable descriptor the caller closes.
  absl::StatusOr<std::pair<std::string, int>> CreateTemp();
  // Stores the library at `tmp_path` (in the store's directory, from
  // CreateTemp) whose SHA-256 the caller computed as `sha256`: its ELF
  // header is checked (InvalidArgument, the file removed), then it is
  // renamed into place (removed instead when already stored).
  absl::Status Adopt(const std::string& tmp_path, const std::string& sha256);
  // Whether an artifact with this hash is stored; false for anything that is
  // not a lower-case hex SHA-256 (so a hash never names a file outside dir).
  bool Has(const std::string& sha256) const;
  // Size in bytes; NotFound for an unknown hash.
  absl::StatusOr<int64_t> Size(const std::string& sha256) const;
  // Up to max_bytes from offset. NotFound / OutOfRange.
  absl::StatusOr<std::string> Read(const std::string& sha256, int64_t offset, int64_t max_bytes) const;
  // Deletes artifact `sha256` (DeleteExperiment, when no other experiment
  // uses it). OK when it is already gone; InvalidArgument for a malformed
  // hash (never a file outside dir).
  absl::Status Remove(const std::string& sha256) const;
  // The file name the artifact was last uploaded as (ValidateTrialSoName's
  // result), kept beside it as <sha256>.name for the agents' load errors;
  // SetName overwrites it, Name returns "trial.so" when none is recorded.
  absl::Status SetName(const std::string& sha256, const std::string& name) const;
  std::string Name(const std::string& sha256) const;
  // The file of stored artifact `sha256` (the Slurm resource manager copies
  // it into a job's directory); NotFound for an unknown or malformed hash.
  absl::StatusOr<std::string> FilePath(const std::string& sha256) const;

 private:
  // `sha256` must be a valid hash (checked by every caller).
  std::string PathOf(const std::string& sha256) const;
  std::string dir_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_ARTIFACT_STORE_H_
