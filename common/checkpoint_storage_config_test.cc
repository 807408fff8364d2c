// checkpoint_storage of type s3: every field's bounds, the keys of the other
// type, and credentials refused without their value in the error.
#include "common/checkpoint_storage_config.h"

#include <string>

#include "common/experiment_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kMinimal[] = R"(hyperparameters:
  global_batch_size: 8
searcher:
  name: single
  metric: loss
  max_length: {batches: 10}
checkpoint_storage:
)";

absl::StatusOr<ExperimentConfig> Parse(const std::string& storage) {
  ParseOptions options;
  options.default_experiment_seed = 1;
  return ParseExperimentConfig(std::string(kMinimal) + storage, "config.yaml", options);
}

std::string ErrorOf(const std::string& storage) {
  auto c = Parse(storage);
  return c.ok() ? "OK" : std::string(c.status().message());
}

TEST(CheckpointStorageConfigTest, S3FieldsAndDefaults) {
  auto c = Parse("  type: s3\n  bucket: det-ckpt\n");
  ASSERT_TRUE(c.ok()) << c.status();
  const CheckpointStorageConfig& s = *c->checkpoint_storage;
  EXPECT_EQ(s.type, "s3");
  EXPECT_EQ(s.bucket, "det-ckpt");
  EXPECT_EQ(s.prefix, "");
  EXPECT_EQ(s.profile, "default");
  EXPECT_EQ(s.addressing_style, "auto");
  EXPECT_EQ(S3StorageUrl(s), "s3://det-ckpt");

  auto full = Parse(
      "  type: s3\n  bucket: b.1-x\n  prefix: team-a/exp.1\n  endpoint_url: https://minio.example:9000\n"
      "  region: eu-west-3\n  profile: team_a.v2\n  addressing_style: virtual\n  save_trial_best: 2\n");
  ASSERT_TRUE(full.ok()) << full.status();
  const CheckpointStorageConfig& f = *full->checkpoint_storage;
  EXPECT_EQ(f.prefix, "team-a/exp.1");
  EXPECT_EQ(f.endpoint_url, "https://minio.example:9000");
  EXPECT_EQ(f.region, "eu-west-3");
  EXPECT_EQ(f.profile, "team_a.v2");
  EXPECT_EQ(f.addressing_style, "virtual");
  EXPECT_EQ(f.save_trial_best, 2);
  EXPECT_EQ(S3StorageUrl(f), "s3://b.1-x/team-a/exp.1");

  // The stored JSON form parses back to the same storage.
  auto again = ParseExperimentConfigJson(ExperimentConfigToJson(*full), "stored");
  ASSERT_TRUE(again.ok()) << again.status();
  const CheckpointStorageConfig& g = *again->checkpoint_storage;
  EXPECT_EQ(g.type, "s3");
  EXPECT_EQ(g.bucket, f.bucket);
  EXPECT_EQ(g.prefix, f.prefix);
  EXPECT_EQ(g.endpoint_url, f.endpoint_url);
  EXPECT_EQ(g.region, f.region);
  EXPECT_EQ(g.profile, f.profile);
  EXPECT_EQ(g.addressing_style, f.addressing_style);
  EXPECT_EQ(g.save_trial_best, 2);
}

TEST(CheckpointStorageConfigTest, BadS3FieldsNameTheFieldAndTheRule) {
  EXPECT_THAT(ErrorOf("  type: s3\n"), HasSubstr("missing required field 'checkpoint_storage.bucket'"));
  for (const char* bucket : {"ab", "Upper", "-lead", "trail-", "a..b", "under_score", "x/y"}) {
    EXPECT_THAT(ErrorOf(std::string("  type: s3\n  bucket: ") + bucket + "\n"),
                HasSubstr("field 'checkpoint_storage.bucket' must be an S3 bucket name"))
        << bucket;
  }
  EXPECT_THAT(ErrorOf("  type: s3\n  bucket: " + std::string(64, 'a') + "\n"), HasSubstr("S3 bucket name"));
  for (const char* prefix : {"/a", "a/", "a//b", "a/./b", "../a", "a/.."}) {
    EXPECT_THAT(ErrorOf(std::string("  type: s3\n  bucket: bkt\n  prefix: '") + prefix + "'\n"),
                HasSubstr("field 'checkpoint_storage.prefix' must not"))
        << prefix;
  }
  EXPECT_EQ(ErrorOf("  type: s3\n  bucket: bkt\n  prefix: " + std::string(512, 'p') + "\n"), "OK");
  EXPECT_THAT(ErrorOf("  type: s3\n  bucket: bkt\n  prefix: " + std::string(513, 'p') + "\n"),
              HasSubstr("field 'checkpoint_storage.prefix' must be at most 512 bytes, got 513"));
  for (const char* url : {"ftp://h", "http://", "http://h/path", "https://user@h", "http://h:0", "http://h:70000",
                          "http://h:", "h:9000", "http://h?x=1"}) {
    EXPECT_THAT(ErrorOf(std::string("  type: s3\n  bucket: bkt\n  endpoint_url: '") + url + "'\n"),
                HasSubstr("field 'checkpoint_storage.endpoint_url' must be http://HOST[:PORT]"))
        << url;
  }
  for (const char* url : {"http://127.0.0.1:9000", "https://s3.localhost", "http://[::1]:9000"}) {
    EXPECT_EQ(ErrorOf(std::string("  type: s3\n  bucket: bkt\n  endpoint_url: '") + url + "'\n"), "OK") << url;
  }
  EXPECT_THAT(ErrorOf("  type: s3\n  bucket: bkt\n  endpoint_url: http://" + std::string(260, 'h') + "\n"),
              HasSubstr("must be at most 256 bytes"));
  for (const char* region : {"US-EAST-1", "eu_west", "''"}) {
    EXPECT_THAT(ErrorOf(std::string("  type: s3\n  bucket: bkt\n  region: ") + region + "\n"),
                HasSubstr("field 'checkpoint_storage.region' must be an S3 region"))
        << region;
  }
  EXPECT_THAT(ErrorOf("  type: s3\n  bucket: bkt\n  region: " + std::string(33, 'a') + "\n"),
              HasSubstr("must be an S3 region"));
  for (const char* profile : {"''", "a b", "a/b", "p\\u00e9"}) {
    EXPECT_THAT(ErrorOf(std::string("  type: s3\n  bucket: bkt\n  profile: \"") + profile + "\"\n"),
                HasSubstr("field 'checkpoint_storage.profile' must be the name of a profile"))
        << profile;
  }
  EXPECT_THAT(ErrorOf("  type: s3\n  bucket: bkt\n  profile: " + std::string(65, 'p') + "\n"),
              HasSubstr("must be the name of a profile"));
  EXPECT_THAT(ErrorOf("  type: s3\n  bucket: bkt\n  addressing_style: dns\n"),
              HasSubstr("checkpoint_storage.addressing_style"));
  EXPECT_THAT(ErrorOf("  type: s3\n  bucket: bkt\n  bucket_name: x\n"),
              HasSubstr("unknown field 'checkpoint_storage.bucket_name'"));
}

TEST(CheckpointStorageConfigTest, KeysOfTheOtherTypeAreRefused) {
  EXPECT_THAT(ErrorOf("  type: s3\n  bucket: bkt\n  host_path: /x\n"),
              HasSubstr("field 'checkpoint_storage.host_path' is for checkpoint_storage.type shared_fs"));
  EXPECT_THAT(ErrorOf("  type: s3\n  bucket: bkt\n  storage_path: x\n"),
              HasSubstr("field 'checkpoint_storage.storage_path' is for checkpoint_storage.type shared_fs"));
  EXPECT_THAT(ErrorOf("  type: shared_fs\n  host_path: /x\n  bucket: bkt\n"),
              HasSubstr("field 'checkpoint_storage.bucket' is for checkpoint_storage.type s3"));
  // No type: the master's storage (shared_fs); s3 keys need type s3.
  EXPECT_THAT(ErrorOf("  prefix: p\n"), HasSubstr("set checkpoint_storage.type: s3"));
}

// The attack: a secret in the config would be stored and shown to every
// reader. Refused with the key and the fix, never echoing the value.
TEST(CheckpointStorageConfigTest, CredentialsAreRefusedWithoutEchoingThem) {
  const std::string secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY";
  for (const char* key : {"access_key", "secret_key", "session_token", "aws_access_key_id", "aws_secret_access_key",
                          "password", "token", "Secret_Access", "my_secret"}) {
    for (const char* type : {"s3", "shared_fs"}) {
      const std::string error =
          ErrorOf(std::string("  type: ") + type + "\n  bucket: bkt\n  host_path: /x\n  " + key + ": " + secret + "\n");
      EXPECT_THAT(error, HasSubstr(std::string("checkpoint_storage.") + key +
                                   ": an experiment config must not hold credentials (it is stored and shown to "
                                   "every reader of the experiment); put them in the master's S3 credentials file "
                                   "(--s3-credentials-file) and name its profile with checkpoint_storage.profile"))
          << key << " " << type;
      EXPECT_THAT(error, Not(HasSubstr(secret))) << key;
    }
  }
}

TEST(CheckpointStorageConfigTest, PureValidators) {
  EXPECT_TRUE(ValidS3BucketName("det-test"));
  EXPECT_TRUE(ValidS3BucketName("a.b-c"));
  EXPECT_TRUE(ValidS3BucketName(std::string(63, 'a')));
  EXPECT_FALSE(ValidS3BucketName(std::string(64, 'a')));
  EXPECT_FALSE(ValidS3BucketName("a"));
  EXPECT_FALSE(ValidS3BucketName("a..b"));
  EXPECT_FALSE(ValidS3BucketName("a.-b"));
  EXPECT_FALSE(ValidS3BucketName("a-.b"));
  EXPECT_FALSE(ValidS3BucketName("192.168.5.4"));  // IP-shaped: S3 refuses it
  EXPECT_TRUE(ValidS3BucketName("192.168.5.4a"));
  EXPECT_TRUE(ValidS3BucketName("1.2.3"));
  EXPECT_EQ(S3PrefixProblem(""), "");
  EXPECT_EQ(S3PrefixProblem("a/b/c"), "");
  EXPECT_EQ(S3PrefixProblem("a\nb"), "must not contain control characters");
  EXPECT_EQ(S3EndpointProblem("http://localhost:4568"), "");
  EXPECT_NE(S3EndpointProblem("http://localhost:4568/"), "");
}

}  // namespace
}  // namespace det
