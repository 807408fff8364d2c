// The operator's S3 credentials file: AWS's shared-credentials format (INI,
// as ~/.aws/credentials), named by det-master's --s3-credentials-file. A
// profile:
//
//   [team-a]
//   aws_access_key_id = AKIA...
//   aws_secret_access_key = ...
//   aws_session_token = ...          (optional)
//   endpoint_url = https://minio.example:9000   (optional; else AWS's)
//   region = us-east-1               (optional)
//   ca_bundle = /etc/det/minio-ca.pem   (optional; PEM read at load)
//   det_workspaces = team-a, shared  (which workspaces' experiments may use
//                                     the profile; "*": all. Required.)
//
// Secrets are never read from AWS_* environment variables: a process's
// initial environment stays readable in /proc/PID/environ.
#ifndef DET_COMMON_S3_S3_CREDENTIALS_H_
#define DET_COMMON_S3_S3_CREDENTIALS_H_

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det::s3 {

inline constexpr size_t kMaxCredentialsFileBytes = 64 * 1024;
inline constexpr int kMaxCredentialProfiles = 256;
inline constexpr size_t kMaxCaBundleBytes = 1 << 20;

struct S3Profile {
  std::string name;
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  std::string endpoint_url;  // empty: AWS's
  std::string region;        // empty: us-east-1
  std::string ca_pem;        // the ca_bundle file's text (empty: system CAs)
  std::vector<std::string> workspaces;  // "*" for all

  // Whether an experiment of workspace `workspace` may use this profile.
  bool AllowsWorkspace(absl::string_view workspace) const;
};

// Parses credentials-file text (`source` names it in errors, with the line).
// InvalidArgument on: a key outside a [profile], an unknown key, a profile
// without aws_access_key_id / aws_secret_access_key / det_workspaces, a
// duplicate profile or key, more than kMaxCredentialProfiles profiles, a
// malformed endpoint_url, region or det_workspaces, a line that is neither.
// ca_bundle names an absolute path read at parse time (a regular file of at
// most kMaxCaBundleBytes holding a PEM certificate). Errors name
// `source`:line and the key, never quote a secret's value or a line.
absl::StatusOr<std::map<std::string, S3Profile>> ParseS3Credentials(absl::string_view text,
                                                                    absl::string_view source);

// Reads and parses the file at `path` as this process, with the checks of
// common/secret_token_file.h (regular file; owned by this euid or root; no
// "other" bits, no group write; at most kMaxCredentialsFileBytes).
// InvalidArgument naming `flag`, the path and the fix.
absl::StatusOr<std::map<std::string, S3Profile>> ReadS3CredentialsFile(const std::string& path,
                                                                       absl::string_view flag);
// The same, checked for a daemon running as `euid`/`egid` (tests).
absl::StatusOr<std::map<std::string, S3Profile>> ReadS3CredentialsFileAs(const std::string& path,
                                                                         absl::string_view flag, uid_t euid,
                                                                         gid_t egid);

}  // namespace det::s3

#endif  // DET_COMMON_S3_S3_CREDENTIALS_H_
