// The client-streaming UploadArtifact RPC (api.proto): a trial.so sent in
// chunks of at most 1 MiB, the first message announcing its SHA-256 and size,
// so that no single gRPC message needs to hold a large library (the master's
// receive limit stays a few MiB). Stored in the same ArtifactStore as
// CreateExperiment's inline trial.so. The chunks go to a temporary file in
// the store as they arrive and are hashed on the way, so the master's memory
// stays flat whatever the size (at most max_trial_so_bytes).
#ifndef DET_MASTER_SERVICE_ARTIFACT_UPLOAD_H_
#define DET_MASTER_SERVICE_ARTIFACT_UPLOAD_H_

#include <cstdint>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "common/sha256.h"
#include "det/api/v1/experiment.pb.h"
#include "master/core/artifact_store.h"

namespace det::master {

// Largest chunk one UploadArtifactRequest may carry.
inline constexpr int64_t kMaxUploadChunkBytes = int64_t{1} << 20;

// Collects one upload and stores it. Not thread-safe (one per call; gRPC
// delivers a stream's messages one at a time).
class ArtifactUpload {
 public:
  // `store` is not owned and must outlive this; `max_bytes` bounds the
  // announced size.
  ArtifactUpload(ArtifactStore* store, int64_t max_bytes) : store_(store), max_bytes_(max_bytes) {}
  // Removes the temporary file unless Finish stored it.
  ~ArtifactUpload();
  ArtifactUpload(const ArtifactUpload&) = delete;
  ArtifactUpload& operator=(const ArtifactUpload&) = delete;

  // Takes the next message. InvalidArgument naming the field for a missing
  // or bad sha256/size_bytes in the first message, a chunk over 1 MiB, or
  // more bytes than announced (the upload is then over).
  absl::Status Add(const ::det::api::v1::UploadArtifactRequest& msg);
  // After the last message: checks size and hash against the announced ones
  // (InvalidArgument, nothing stored), validates and stores the library.
  absl::StatusOr<::det::api::v1::UploadArtifactResponse> Finish();

 private:
  ArtifactStore* const store_;
  const int64_t max_bytes_;
  bool started_ = false;
  std::string sha256_;
  int64_t size_ = 0;
  int64_t received_ = 0;
  Sha256 hash_;
  std::string tmp_path_;  // set once the first message is accepted
  int tmp_fd_ = -1;
};

// The reactor serving one UploadArtifact call: reads every message into an
// ArtifactUpload and finishes with its result (or its first error).
// Deletes itself when done.
class UploadArtifactReactor final : public grpc::ServerReadReactor<::det::api::v1::UploadArtifactRequest> {
 public:
  UploadArtifactReactor(ArtifactStore* store, int64_t max_bytes, ::det::api::v1::UploadArtifactResponse* response);
  void OnReadDone(bool ok) override;
  void OnDone() override { delete this; }

 private:
  ArtifactUpload upload_;
  ::det::api::v1::UploadArtifactRequest msg_;
  ::det::api::v1::UploadArtifactResponse* const response_;
};

}  // namespace det::master

#endif  // DET_MASTER_SERVICE_ARTIFACT_UPLOAD_H_
