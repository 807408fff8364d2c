// S3Profiles: the master's S3 credentials (det-master --s3-credentials-file,
// AWS's shared-credentials format; common/s3/s3_credentials.h) and how an
// experiment's checkpoint_storage of type s3 resolves against them.
//
// A config names a profile (checkpoint_storage.profile, default "default");
// the profile holds the secret, the endpoint the operator pins, the region,
// an optional CA bundle and the workspaces allowed to use it
// (det_workspaces). The secret stays in this object's memory: it is handed
// only to S3 clients the master builds and, over the authenticated
// TrialService channel, to the trials of allowed workspaces.
//
// Thread-compatible; immutable after Load (MasterCore holds one, set once at
// start, read without its mutex).
#ifndef DET_MASTER_CORE_S3_PROFILES_H_
#define DET_MASTER_CORE_S3_PROFILES_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/experiment_config.h"
#include "common/s3/s3_checkpoint.h"
#include "common/s3/s3_client.h"
#include "common/s3/s3_credentials.h"

namespace det::master {

// An s3 checkpoint_storage resolved against a profile: where to connect,
// with which credentials, and the experiment's bucket and prefix.
struct ResolvedS3Storage {
  s3::S3Endpoint endpoint;
  s3::S3Credentials credentials;
  s3::S3Location location;
  std::string profile;
};

class S3Profiles {
 public:
  // Reads `credentials_file` (ReadS3CredentialsFile; errors name
  // --s3-credentials-file, the path and the fix, never a secret). "" -> no
  // profiles (every s3 storage then fails to resolve with a clear error).
  static absl::StatusOr<S3Profiles> Load(const std::string& credentials_file);

  S3Profiles() = default;
  explicit S3Profiles(std::map<std::string, s3::S3Profile> profiles) : profiles_(std::move(profiles)) {}

  bool empty() const { return profiles_.empty(); }

  // Resolves an s3 `storage` for an experiment of `workspace`:
  //   InvalidArgument "checkpoint_storage.profile: ..." when the master has
  //     no credentials file or no such profile;
  //   PermissionDenied when the profile's det_workspaces exclude `workspace`;
  //   InvalidArgument "checkpoint_storage.endpoint_url: ..." when the config
  //     names an endpoint other than the profile's (the operator pins it) or
  //     any endpoint for a profile without one (AWS).
  // Region: the config's, else the profile's, else us-east-1. Addressing:
  // path/virtual as configured; auto -> virtual on AWS, path on an endpoint.
  // Never returns an error quoting a secret.
  absl::StatusOr<ResolvedS3Storage> Resolve(const CheckpointStorageConfig& storage,
                                            absl::string_view workspace) const;

 private:
  std::map<std::string, s3::S3Profile> profiles_;
};

// The master's S3 requests (report checks, downloads, GC and deletes) run
// on its gRPC and background threads, so each call is bounded in time:
// 3 tries of at most 40 s each (connect 10 s) plus backoff (<= 10 s), about
// 2 min against an endpoint that accepts and never answers.
s3::S3RetryPolicy MasterS3RetryPolicy();

// A client for `resolved` (S3Client::Create with MasterS3RetryPolicy and the
// default limits).
absl::StatusOr<std::unique_ptr<s3::S3Client>> NewS3Client(const ResolvedS3Storage& resolved);

}  // namespace det::master

#endif  // DET_MASTER_CORE_S3_PROFILES_H_
