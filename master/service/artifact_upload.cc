#include "master/service/artifact_upload.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/sha256.h"

namespace det::master {

namespace apiv1 = ::det::api::v1;

absl::Status ArtifactUpload::Add(const apiv1::UploadArtifactRequest& msg) {
  if (!started_) {
    if (!IsSha256Hex(msg.sha256())) {
      return absl::InvalidArgumentError("sha256: the first message must carry 64 lower-case hex digits");
    }
    if (msg.size_bytes() <= 0 || msg.size_bytes() > max_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("size_bytes: ", msg.size_bytes(), " must be in 1..", max_bytes_, " (max_trial_so_bytes)"));
    }
    started_ = true;
    sha256_ = msg.sha256();
    size_ = msg.size_bytes();
  } else if (!msg.sha256().empty() || msg.size_bytes() != 0) {
    return absl::InvalidArgumentError("sha256, size_bytes: only in the first message");
  }
  if (static_cast<int64_t>(msg.chunk().size()) > kMaxUploadChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk: ", msg.chunk().size(), " bytes; the limit is ", kMaxUploadChunkBytes));
  }
  if (static_cast<int64_t>(bytes_.size() + msg.chunk().size()) > size_) {
    return absl::InvalidArgumentError(absl::StrCat("chunk: more bytes than the announced size_bytes ", size_));
  }
  bytes_.append(msg.chunk());
  return absl::OkStatus();
}

absl::StatusOr<apiv1::UploadArtifactResponse> ArtifactUpload::Finish() {
  if (!started_) return absl::InvalidArgumentError("sha256: no message received");
  if (static_cast<int64_t>(bytes_.size()) != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("size_bytes: announced ", size_, " but received ", bytes_.size(), " bytes"));
  }
  if (Sha256Hex(bytes_) != sha256_) {
    return absl::InvalidArgumentError("sha256: the received bytes have another hash");
  }
  apiv1::UploadArtifactResponse resp;
  resp.set_already_existed(store_->Has(sha256_));
  auto sha = store_->Put(bytes_);
  if (!sha.ok()) return sha.status();
  resp.mutable_artifact()->set_sha256(*sha);
  resp.mutable_artifact()->set_size_bytes(size_);
  return resp;
}

UploadArtifactReactor::UploadArtifactReactor(ArtifactStore* store, int64_t max_bytes,
                                             apiv1::UploadArtifactResponse* response)
    : upload_(store, max_bytes), response_(response) {
  StartRead(&msg_);
}

void UploadArtifactReactor::OnReadDone(bool ok) {
  if (ok) {
    absl::Status st = upload_.Add(msg_);
    if (!st.ok()) return Finish(ToGrpcStatus(st));
    msg_.Clear();
    return StartRead(&msg_);
  }
  // The client half-closed (or went away: then Finish is ignored).
  auto resp = upload_.Finish();
  if (!resp.ok()) return Finish(ToGrpcStatus(resp.status()));
  *response_ = *std::move(resp);
  Finish(grpc::Status::OK);
}

}  // namespace det::master
