// MasterCore::GetCheckpointStorageCredentials: a trial's S3 credentials,
// handed over the authenticated TrialService channel (trial.proto).
//
// Who may read what: the token of the trial's current allocation; a
// storage_path under the trial's own experiment's s3 storage, or under a
// checkpoint the trial is started from (its latest, its PBT parent's, its
// experiment's warm-start checkpoint), each resolved with the profile its
// experiment names, which must allow the trial's workspace. The reply holds
// the secret: nothing here logs it.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_storage_config.h"
#include "common/status_macros.h"
#include "master/core/core_state.h"
#include "master/core/master_core.h"

namespace det::master {
namespace {

constexpr size_t kMaxStoragePathBytes = 2048;

// InvalidArgument unless `url` is s3://BUCKET[/KEY/PREFIX] with a valid
// bucket and a key prefix without empty, "." or ".." segments (libcurl would
// resolve dot segments: s3://b/p/../q must not reach outside p).
absl::Status CheckS3Url(const std::string& url) {
  if (url.size() > kMaxStoragePathBytes || !absl::StartsWith(url, "s3://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "storage_path: must be an s3:// URL of at most ", kMaxStoragePathBytes, " bytes (a checkpoint storage of "
        "type s3); other storage needs no credentials"));
  }
  const std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  const std::string bucket = rest.substr(0, slash);
  const std::string key = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (!ValidS3BucketName(bucket) || (slash != std::string::npos && key.empty()) ||
      (!key.empty() && !S3PrefixProblem(key.substr(0, kMaxS3PrefixBytes)).empty())) {
    return absl::InvalidArgumentError("storage_path: not a valid s3://BUCKET/PREFIX URL (bucket name, or an empty, "
                                      "'.' or '..' segment)");
  }
  return absl::OkStatus();
}

bool Within(const std::string& path, const std::string& base) {
  return path == base || absl::StartsWith(path, base + "/");
}

// A storage the trial may use and the URL prefix it covers.
struct Grant {
  const CheckpointStorageConfig* storage;
  std::string base;
};

}  // namespace

absl::StatusOr<trialv1::GetCheckpointStorageCredentialsResponse> MasterCore::GetCheckpointStorageCredentials(
    const trialv1::GetCheckpointStorageCredentialsRequest& req, const std::string& token) {
  std::lock_guard<std::mutex> l(mu_);
  auto t = trials_.find(req.trial_id());
  if (t == trials_.end()) return absl::NotFoundError(absl::StrCat("trial ", req.trial_id(), " not found"));
  const TrialRuntime& trial = *t->second;
  if (trial.allocation_id.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("trial ", trial.row.id, " has no running allocation"));
  }
  DET_RETURN_IF_ERROR(Authorize(trial.allocation_id, token).status());
  DET_RETURN_IF_ERROR(CheckS3Url(req.storage_path()));
  const ExperimentRuntime& exp = *experiments_.at(trial.row.experiment_id);
  DET_ASSIGN_OR_RETURN(ProjectRow project, store_->GetProject(exp.row.project_id));

  std::vector<Grant> grants;
  auto s3_storage = [](const ExperimentRuntime& e) -> const CheckpointStorageConfig* {
    return e.config.checkpoint_storage && e.config.checkpoint_storage->type == "s3" ? &*e.config.checkpoint_storage
                                                                                   : nullptr;
  };
  if (const CheckpointStorageConfig* own = s3_storage(exp)) grants.push_back({own, exp.checkpoint_dir});
  for (const std::string* uuid :
       {&trial.row.latest_checkpoint_uuid, &trial.row.parent_checkpoint_uuid, &exp.row.warm_start_checkpoint_uuid}) {
    if (uuid->empty()) continue;
    absl::StatusOr<CheckpointRow> ck = store_->GetCheckpoint(*uuid);
    if (!ck.ok() || !absl::StartsWith(ck->storage_path, "s3://")) continue;
    auto source = experiments_.find(ck->experiment_id);
    if (source == experiments_.end()) continue;
    if (const CheckpointStorageConfig* storage = s3_storage(*source->second)) {
      grants.push_back({storage, ck->storage_path});
    }
  }
  for (const Grant& grant : grants) {
    if (!Within(req.storage_path(), grant.base)) continue;
    // The profile must allow the trial's workspace, even for another
    // experiment's checkpoint.
    DET_ASSIGN_OR_RETURN(ResolvedS3Storage resolved, s3_profiles_.Resolve(*grant.storage, project.workspace_name));
    trialv1::GetCheckpointStorageCredentialsResponse resp;
    resp.set_endpoint_url(resolved.endpoint.endpoint_url);
    resp.set_region(resolved.endpoint.region);
    resp.set_addressing(resolved.endpoint.addressing == s3::Addressing::kVirtual ? "virtual" : "path");
    resp.set_access_key_id(resolved.credentials.access_key_id);
    resp.set_secret_access_key(resolved.credentials.secret_access_key);
    resp.set_session_token(resolved.credentials.session_token);
    resp.set_ca_pem(resolved.endpoint.ca_pem);
    return resp;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "trial ", trial.row.id, " may not use '", req.storage_path(),
      "': it is neither under its experiment's checkpoint storage nor a checkpoint the trial starts from"));
}

}  // namespace det::master
