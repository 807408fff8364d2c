#include "master/core/s3_profiles.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace det::master {

absl::StatusOr<S3Profiles> S3Profiles::Load(const std::string& credentials_file) {
  if (credentials_file.empty()) return S3Profiles();
  auto profiles = s3::ReadS3CredentialsFile(credentials_file, "--s3-credentials-file");
  if (!profiles.ok()) return profiles.status();
  return S3Profiles(*std::move(profiles));
}

namespace {

// The endpoint a resolved storage connects to: the profile's (pinned by the
// operator; a config may only repeat it), else AWS's regional endpoint.
absl::Status ResolveEndpoint(const CheckpointStorageConfig& storage, const s3::S3Profile& profile,
                             s3::S3Endpoint* endpoint) {
  // The credentials file allows a trailing '/', a config does not.
  const std::string pinned(absl::StripSuffix(profile.endpoint_url, "/"));
  if (!pinned.empty()) {
    if (!storage.endpoint_url.empty() && storage.endpoint_url != pinned) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint_storage.endpoint_url: '", storage.endpoint_url, "' is not the endpoint of profile '",
          profile.name, "' in the master's S3 credentials file ('", profile.endpoint_url,
          "'); the operator pins the endpoint: leave endpoint_url out or set it to the profile's"));
    }
    endpoint->endpoint_url = pinned;
  } else if (!storage.endpoint_url.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_storage.endpoint_url: profile '", profile.name,
        "' of the master's S3 credentials file has no endpoint_url (it is for AWS S3), so a config may not name "
        "one; leave endpoint_url out, or ask the operator for a profile with that endpoint_url"));
  }
  endpoint->region = !storage.region.empty() ? storage.region
                     : !profile.region.empty() ? profile.region
                                               : std::string("us-east-1");
  if (endpoint->endpoint_url.empty()) {
    endpoint->endpoint_url = absl::StrCat("https://s3.", endpoint->region, ".amazonaws.com");
  }
  if (storage.addressing_style == "path") {
    endpoint->addressing = s3::Addressing::kPath;
  } else if (storage.addressing_style == "virtual") {
    endpoint->addressing = s3::Addressing::kVirtual;
  } else {
    // auto: virtual-hosted on AWS, as botocore, except for a bucket with a
    // '.' (bucket.s3.REGION.amazonaws.com would not match AWS's wildcard
    // certificate), which goes path style as botocore does too.
    const bool aws = profile.endpoint_url.empty();
    endpoint->addressing = aws && !absl::StrContains(storage.bucket, '.') ? s3::Addressing::kVirtual
                                                                           : s3::Addressing::kPath;
  }
  endpoint->ca_pem = profile.ca_pem;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ResolvedS3Storage> S3Profiles::Resolve(const CheckpointStorageConfig& storage,
                                                      absl::string_view workspace) const {
  if (storage.type != "s3") {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_storage.type: '", storage.type, "' is not s3 (internal: Resolve of non-s3 storage)"));
  }
  if (profiles_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_storage.profile: det-master has no --s3-credentials-file, so checkpoint_storage.type s3 "
        "cannot be used (profile '", storage.profile,
        "'); the operator must start det-master with --s3-credentials-file naming a file with that profile"));
  }
  auto it = profiles_.find(storage.profile);
  if (it == profiles_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint_storage.profile: no profile '", storage.profile,
        "' in the master's S3 credentials file; name a profile the operator has set up for your workspace"));
  }
  const s3::S3Profile& profile = it->second;
  if (!profile.AllowsWorkspace(workspace)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint_storage.profile: profile '", profile.name, "' of the master's S3 credentials file may not be "
        "used by workspace '", workspace, "' (its det_workspaces do not name it); use your workspace's profile "
        "or ask the operator to add the workspace"));
  }
  ResolvedS3Storage r;
  r.profile = profile.name;
  r.credentials = {profile.access_key_id, profile.secret_access_key, profile.session_token};
  if (absl::Status s = ResolveEndpoint(storage, profile, &r.endpoint); !s.ok()) return s;
  r.location = {storage.bucket, storage.prefix};
  return r;
}

s3::S3RetryPolicy MasterS3RetryPolicy() {
  s3::S3RetryPolicy retry;
  retry.max_attempts = 3;
  retry.connect_timeout = std::chrono::seconds(10);
  retry.total_timeout = std::chrono::seconds(40);
  return retry;
}

absl::StatusOr<std::unique_ptr<s3::S3Client>> NewS3Client(const ResolvedS3Storage& resolved) {
  return s3::S3Client::Create(resolved.endpoint, resolved.credentials, MasterS3RetryPolicy());
}

}  // namespace det::master
