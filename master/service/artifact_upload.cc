#include "master/service/artifact_upload.h"

#include <unistd.h>

#include <cerrno>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/sha256.h"

namespace det::master {

namespace apiv1 = ::det::api::v1;

ArtifactUpload::~ArtifactUpload() {
  if (tmp_fd_ >= 0) close(tmp_fd_);
  if (!tmp_path_.empty()) unlink(tmp_path_.c_str());
}

absl::Status ArtifactUpload::Add(const apiv1::UploadArtifactRequest& msg) {
  if (!started_) {
    if (!IsSha256Hex(msg.sha256())) {
      return absl::InvalidArgumentError("sha256: the first message must carry 64 lower-case hex digits");
    }
    if (msg.size_bytes() <= 0 || msg.size_bytes() > max_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("size_bytes: ", msg.size_bytes(), " must be in 1..", max_bytes_, " (max_trial_so_bytes)"));
    }
    auto tmp = store_->CreateTemp();
    if (!tmp.ok()) return tmp.status();
    std::tie(tmp_path_, tmp_fd_) = *tmp;
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
  if (received_ + static_cast<int64_t>(msg.chunk().size()) > size_) {
    return absl::InvalidArgumentError(absl::StrCat("chunk: more bytes than the announced size_bytes ", size_));
  }
  const char* p = msg.chunk().data();
  size_t left = msg.chunk().size();
  while (left > 0) {
    ssize_t n = write(tmp_fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InternalError(absl::StrCat("cannot write the upload to ", tmp_path_));
    p += n;
    left -= static_cast<size_t>(n);
  }
  hash_.Update(msg.chunk());
  received_ += static_cast<int64_t>(msg.chunk().size());
  return absl::OkStatus();
}

absl::StatusOr<apiv1::UploadArtifactResponse> ArtifactUpload::Finish() {
  if (!started_) return absl::InvalidArgumentError("sha256: no message received");
  if (received_ != size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("size_bytes: announced ", size_, " but received ", received_, " bytes"));
  }
  if (hash_.HexDigest() != sha256_) {
    return absl::InvalidArgumentError("sha256: the received bytes have another hash");
  }
  if (close(tmp_fd_) != 0) {
    tmp_fd_ = -1;
    return absl::InternalError(absl::StrCat("cannot write the upload to ", tmp_path_));
  }
  tmp_fd_ = -1;
  apiv1::UploadArtifactResponse resp;
  resp.set_already_existed(store_->Has(sha256_));
  absl::Status adopted = store_->Adopt(tmp_path_, sha256_);
  tmp_path_.clear();  // Adopt moved or removed it
  if (!adopted.ok()) return adopted;
  resp.mutable_artifact()->set_sha256(sha256_);
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
