// S3Profiles::Resolve: which profile, workspace, endpoint, region and
// addressing an s3 checkpoint_storage gets, and the errors that name the
// field and the fix without quoting a secret.
#include "master/core/s3_profiles.h"

#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace det::master {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "SECRET-NEEDLE-abcdefghijklmnopqrstuvwxyz";

s3::S3Profile Profile(const std::string& name, const std::string& endpoint, std::vector<std::string> workspaces) {
  s3::S3Profile p;
  p.name = name;
  p.access_key_id = "AKIA" + name;
  p.secret_access_key = kSecret;
  p.endpoint_url = endpoint;
  p.workspaces = std::move(workspaces);
  return p;
}

S3Profiles Profiles() {
  std::map<std::string, s3::S3Profile> m;
  m["default"] = Profile("default", "", {"*"});
  m["team-a"] = Profile("team-a", "http://minio.example:9000", {"team-a", "shared"});
  m["team-a"].region = "eu-west-3";
  m["team-a"].ca_pem = "-----BEGIN CERTIFICATE-----\n";
  m["slash"] = Profile("slash", "http://minio.example:9000/", {"*"});
  return S3Profiles(std::move(m));
}

CheckpointStorageConfig Storage(const std::string& profile = "default") {
  CheckpointStorageConfig c;
  c.type = "s3";
  c.bucket = "bkt";
  c.prefix = "p/q";
  c.profile = profile;
  return c;
}

TEST(S3ProfilesTest, AwsProfileDefaults) {
  auto r = Profiles().Resolve(Storage(), "Uncategorized");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->profile, "default");
  EXPECT_EQ(r->endpoint.endpoint_url, "https://s3.us-east-1.amazonaws.com");
  EXPECT_EQ(r->endpoint.region, "us-east-1");
  EXPECT_EQ(r->endpoint.addressing, s3::Addressing::kVirtual);
  EXPECT_EQ(r->credentials.access_key_id, "AKIAdefault");
  EXPECT_EQ(r->credentials.secret_access_key, kSecret);
  EXPECT_EQ(r->location.bucket, "bkt");
  EXPECT_EQ(r->location.key_prefix, "p/q");
  CheckpointStorageConfig s = Storage();
  s.region = "ap-south-1";
  s.addressing_style = "path";
  r = Profiles().Resolve(s, "x");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint.endpoint_url, "https://s3.ap-south-1.amazonaws.com");
  EXPECT_EQ(r->endpoint.addressing, s3::Addressing::kPath);
}

TEST(S3ProfilesTest, AutoAddressingOnAwsGoesPathStyleForADottedBucket) {
  // bucket.with.dots.s3.REGION.amazonaws.com would not match AWS's wildcard
  // certificate; botocore goes path style there, and so does det-cpp.
  CheckpointStorageConfig s = Storage();
  s.bucket = "my.det.ckpts";
  auto r = Profiles().Resolve(s, "x");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint.addressing, s3::Addressing::kPath);
  s.addressing_style = "virtual";  // an explicit choice stands
  r = Profiles().Resolve(s, "x");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint.addressing, s3::Addressing::kVirtual);
}

TEST(S3ProfilesTest, EndpointProfilePinsTheEndpoint) {
  auto r = Profiles().Resolve(Storage("team-a"), "team-a");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint.endpoint_url, "http://minio.example:9000");
  EXPECT_EQ(r->endpoint.region, "eu-west-3");  // the profile's
  EXPECT_EQ(r->endpoint.addressing, s3::Addressing::kPath);  // auto with an endpoint
  EXPECT_EQ(r->endpoint.ca_pem, "-----BEGIN CERTIFICATE-----\n");
  CheckpointStorageConfig same = Storage("team-a");
  same.endpoint_url = "http://minio.example:9000";
  same.addressing_style = "virtual";
  same.region = "us-west-2";
  r = Profiles().Resolve(same, "shared");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint.addressing, s3::Addressing::kVirtual);
  EXPECT_EQ(r->endpoint.region, "us-west-2");  // the config's first

  // A trailing '/' in the file is not part of the endpoint.
  CheckpointStorageConfig slash = Storage("slash");
  slash.endpoint_url = "http://minio.example:9000";
  r = Profiles().Resolve(slash, "any");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->endpoint.endpoint_url, "http://minio.example:9000");

  CheckpointStorageConfig other = Storage("team-a");
  other.endpoint_url = "http://evil.example:9000";
  absl::Status st = Profiles().Resolve(other, "team-a").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("checkpoint_storage.endpoint_url: 'http://evil.example:9000' is "
                                                   "not the endpoint of profile 'team-a'"));
  CheckpointStorageConfig aws_with_endpoint = Storage();
  aws_with_endpoint.endpoint_url = "http://127.0.0.1:1";
  st = Profiles().Resolve(aws_with_endpoint, "team-a").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("checkpoint_storage.endpoint_url: profile 'default'"));
}

TEST(S3ProfilesTest, ErrorsNameTheFieldAndNeverTheSecret) {
  absl::Status none = S3Profiles().Resolve(Storage(), "w").status();
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(none.message()), HasSubstr("checkpoint_storage.profile: det-master has no "
                                                     "--s3-credentials-file"));
  absl::Status missing = Profiles().Resolve(Storage("team-b"), "w").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("checkpoint_storage.profile: no profile 'team-b' in the master's S3 credentials file"));
  absl::Status denied = Profiles().Resolve(Storage("team-a"), "team-b").status();
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(denied.message()), HasSubstr("profile 'team-a'"));
  EXPECT_THAT(std::string(denied.message()), HasSubstr("workspace 'team-b'"));
  for (const absl::Status& st : {none, missing, denied}) {
    EXPECT_THAT(std::string(st.message()), Not(HasSubstr(kSecret)));
  }
}

TEST(S3ProfilesTest, NoFileNoProfiles) {
  auto p = S3Profiles::Load("");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->empty());
}

}  // namespace
}  // namespace det::master
