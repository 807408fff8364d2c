// checkpoint_storage of an experiment config: parsing and checking (type
// shared_fs or s3), and its resolved JSON form. See
// docs/reference/experiment-config.md and
// docs/operations/checkpoint-storage.md.
//
// A config never holds a credential: a secret-looking key (config_redact.h's
// IsSecretConfigKey: access_key, secret_key, ...) under checkpoint_storage is
// refused, naming the key and the fix, without echoing its value.
//
// Pure and thread-safe.
#ifndef DET_COMMON_CHECKPOINT_STORAGE_CONFIG_H_
#define DET_COMMON_CHECKPOINT_STORAGE_CONFIG_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/config_reader.h"
#include "common/experiment_config.h"
#include "nlohmann/json.hpp"

namespace det {

inline constexpr size_t kMaxS3PrefixBytes = 512;
inline constexpr size_t kMaxS3EndpointBytes = 256;

// Parses the checkpoint_storage map read by `r` into `c`.
absl::Status ParseCheckpointStorage(const ConfigMapReader& r, CheckpointStorageConfig* c);

// The resolved form stored with an experiment (parses back to `c`).
nlohmann::json CheckpointStorageToJson(const CheckpointStorageConfig& c);

// An S3 bucket name S3 accepts (3..63 of [a-z0-9.-], starting and ending
// with a letter or digit, no "..", ".-" or "-.", not an IPv4 address).
// s3::ValidBucketName (the S3 client's) is this function.
bool ValidS3BucketName(std::string_view bucket);

// "" when `prefix` is a valid key prefix (at most kMaxS3PrefixBytes, no
// leading or trailing '/', no empty, "." or ".." segment, no control
// character), else what is wrong with it.
std::string S3PrefixProblem(std::string_view prefix);

// "" when `url` is scheme://host[:port] with scheme http or https (no path,
// query or user info; at most kMaxS3EndpointBytes), else what is wrong.
std::string S3EndpointProblem(std::string_view url);

// "s3://bucket/prefix" ("s3://bucket" without a prefix): where an s3
// experiment's checkpoints live (as s3::FormatS3Url writes it).
std::string S3StorageUrl(const CheckpointStorageConfig& c);

}  // namespace det

#endif  // DET_COMMON_CHECKPOINT_STORAGE_CONFIG_H_
