#include "trial_runtime/runtime/managed_s3.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace det::runtime {
namespace tv1 = ::det::trial::v1;

namespace {

// One GetCheckpointStorageCredentials call with the allocation's token (the
// request names the trial, not the allocation, so MasterClient::Call does
// not fit), retried while the master is unreachable, up to the client's
// retry timeout.
absl::Status AskForCredentials(MasterClient* client, const tv1::GetCheckpointStorageCredentialsRequest& req,
                               tv1::GetCheckpointStorageCredentialsResponse* resp) {
  const auto give_up = MasterClient::Clock::now() + client->retry_timeout();
  auto backoff = std::chrono::milliseconds(100);
  while (true) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-det-allocation-token", client->token());
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status s = client->stub()->GetCheckpointStorageCredentials(&ctx, req, resp);
    client->Note(s.error_code());
    if (s.ok()) return absl::OkStatus();
    const bool transient =
        s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!transient || MasterClient::Clock::now() >= give_up) {
      return FromGrpcStatus(s, "GetCheckpointStorageCredentials");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace

S3AccessFetcher MasterS3Access(MasterClient* client, int64_t trial_id) {
  return [client, trial_id](const std::string& storage_path) -> absl::StatusOr<S3Access> {
    tv1::GetCheckpointStorageCredentialsRequest req;
    req.set_trial_id(trial_id);
    req.set_storage_path(storage_path);
    tv1::GetCheckpointStorageCredentialsResponse resp;
    DET_RETURN_IF_ERROR(AskForCredentials(client, req, &resp));
    S3Access access;
    DET_ASSIGN_OR_RETURN(access.endpoint.addressing, ParseAddressing(resp.addressing()));
    access.endpoint.endpoint_url = resp.endpoint_url();
    if (!resp.region().empty()) access.endpoint.region = resp.region();
    access.endpoint.ca_pem = resp.ca_pem();
    access.credentials.access_key_id = resp.access_key_id();
    access.credentials.secret_access_key = resp.secret_access_key();
    access.credentials.session_token = resp.session_token();
    return access;
  };
}

bool UsesS3(const tv1::GetTrialContextResponse& tc) {
  return s3::IsS3Url(tc.checkpoint_storage_path()) || s3::IsS3Url(tc.latest_checkpoint().storage_path()) ||
         s3::IsS3Url(tc.warm_start_checkpoint().storage_path());
}

absl::StatusOr<std::unique_ptr<S3CheckpointStorage>> OpenS3Storage(MasterClient* client,
                                                                   const tv1::GetTrialContextResponse& tc, int rank,
                                                                   bool chief) {
  if (!UsesS3(tc)) return nullptr;
  std::error_code ec;
  const std::filesystem::path cwd = std::filesystem::current_path(ec);
  if (ec) return absl::InternalError(absl::StrCat("the working directory: ", ec.message()));
  DET_ASSIGN_OR_RETURN(std::string staging, PrepareStagingDir(cwd.string(), rank));
  auto storage = std::make_unique<S3CheckpointStorage>(MasterS3Access(client, tc.trial_id()), std::move(staging));
  if (chief && s3::IsS3Url(tc.checkpoint_storage_path())) {
    DET_RETURN_IF_ERROR(storage->Open(tc.checkpoint_storage_path()));
  }
  return storage;
}

absl::StatusOr<std::string> LocalCheckpointDir(S3CheckpointStorage* s3, const std::string& storage_path) {
  if (!s3::IsS3Url(storage_path)) return storage_path;
  if (s3 == nullptr) return absl::InternalError(absl::StrCat("checkpoint ", storage_path, ": no S3 storage opened"));
  return s3->Download(storage_path);
}

void DiscardLocalCheckpoint(S3CheckpointStorage* s3, const std::string& dir) {
  if (s3 != nullptr) s3->Discard(dir);
}

}  // namespace det::runtime
