// The runtime's S3 checkpoint storage (s3_storage.h): the private staging
// directory, local mode's refusal, and a checkpoint uploaded to and restored
// from a real S3 server (npm's s3rver on loopback, tests/s3_harness.h),
// checked with boto3.
#include "trial_runtime/runtime/s3_storage.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/s3_harness.h"
#include "tests/test_util.h"

namespace det::runtime {
namespace {
namespace fs = std::filesystem;
using ::det::testing::FilesUnder;
using ::det::testing::ReadFile;
using ::det::testing::TempDir;
using ::det::testing::WriteFile;
using ::testing::HasSubstr;

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(S3StagingDirTest, IsPrivatePerRankAndStartsEmpty) {
  TempDir dir;
  auto staging = PrepareStagingDir(dir.path(), 3);
  ASSERT_TRUE(staging.ok()) << staging.status();
  EXPECT_EQ(*staging, dir / "det-s3-staging/rank-3");
  EXPECT_EQ(ModeOf(dir / "det-s3-staging"), 0700u);
  EXPECT_EQ(ModeOf(*staging), 0700u);
  // What a run that died mid-upload left is gone at the next start; the
  // other ranks' directories are theirs.
  fs::create_directories(*staging + "/save/.tmp-t1-x");
  WriteFile(*staging + "/save/.tmp-t1-x/model_0.pt", "stale");
  fs::create_directories(dir / "det-s3-staging/rank-4");
  WriteFile(dir / "det-s3-staging/rank-4/keep", "other rank");
  chmod(staging->c_str(), 0755);
  auto again = PrepareStagingDir(dir.path(), 3);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(FilesUnder(*again).empty());
  EXPECT_EQ(ModeOf(*again), 0700u);
  EXPECT_EQ(ReadFile(dir / "det-s3-staging/rank-4/keep"), "other rank");
}

TEST(S3StagingDirTest, ASymlinkIsRefusedNotFollowed) {
  TempDir dir;
  fs::create_directories(dir / "elsewhere/rank-0");
  WriteFile(dir / "elsewhere/rank-0/precious", "x");
  fs::create_directories(dir / "cwd");
  fs::create_directory_symlink(dir / "elsewhere", dir / "cwd/det-s3-staging");
  auto staging = PrepareStagingDir(dir / "cwd", 0);
  ASSERT_FALSE(staging.ok());
  EXPECT_THAT(std::string(staging.status().message()), HasSubstr(dir / "cwd/det-s3-staging"));
  EXPECT_EQ(ReadFile(dir / "elsewhere/rank-0/precious"), "x");
}

TEST(S3StagingDirTest, LocalModeRefusesS3StorageNamingTheField) {
  absl::Status st = CheckLocalCheckpointStorage("s3", "");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("checkpoint_storage.type"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("--checkpoint-dir"));
  EXPECT_TRUE(CheckLocalCheckpointStorage("s3", "/tmp/ckpt").ok());
  EXPECT_TRUE(CheckLocalCheckpointStorage("shared_fs", "").ok());
  EXPECT_EQ(ParseAddressing("virtual").value(), s3::Addressing::kVirtual);
  EXPECT_EQ(ParseAddressing("path").value(), s3::Addressing::kPath);
  EXPECT_FALSE(ParseAddressing("auto").ok());
}

// A checkpoint directory as SaveCheckpoint leaves it, under `save_dir`.
SavedCheckpoint FakeCheckpoint(const std::string& save_dir, const std::string& uuid, int64_t model_bytes = 70000) {
  SavedCheckpoint ck;
  ck.uuid = uuid;
  ck.path = save_dir + "/" + uuid;
  fs::create_directories(ck.path);
  WriteFile(ck.path + "/model_0.pt", std::string(model_bytes, 'm'));
  WriteFile(ck.path + "/callbacks.json", "{}");
  WriteFile(ck.path + "/metadata.json", "{\"format_version\": 1}");
  ck.resources = {{"model_0.pt", model_bytes}, {"callbacks.json", 2}};
  return ck;
}

class S3StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "s3");
    auto server = test::S3Server::Start(dir_ / "s3");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    std::filesystem::create_directories(dir_ / "cwd");
    auto staging = PrepareStagingDir(dir_ / "cwd", 0);
    ASSERT_TRUE(staging.ok()) << staging.status();
    staging_ = *staging;
  }
  S3AccessFetcher Fetcher(std::string endpoint = "") {
    if (endpoint.empty()) endpoint = server_->endpoint_url();
    return [this, endpoint](const std::string& path) -> absl::StatusOr<S3Access> {
      asked_.push_back(path);
      S3Access a;
      a.endpoint.endpoint_url = endpoint;
      a.credentials.access_key_id = test::S3Server::kAccessKeyId;
      a.credentials.secret_access_key = server_->secret();
      return a;
    };
  }
  static constexpr char kUuid[] = "0b7c4a2e-5d1f-4c3a-9e8b-2f6d1a0c9e77";
  TempDir dir_;
  std::unique_ptr<test::S3Server> server_;
  std::string staging_;
  std::vector<std::string> asked_;
};

TEST_F(S3StorageTest, UploadsVerifiedRemovesTheLocalCopyAndRestores) {
  S3CheckpointStorage storage(Fetcher(), staging_);
  ASSERT_TRUE(storage.Open("s3://det-test/exp-1").ok());
  SavedCheckpoint local = FakeCheckpoint(storage.save_dir(), kUuid);
  const auto files = FilesUnder(local.path);
  ::testing::internal::CaptureStdout();
  auto up = storage.Upload("s3://det-test/exp-1", local);
  const std::string log = ::testing::internal::GetCapturedStdout();
  ASSERT_TRUE(up.ok()) << up.status();
  // The upload is announced before it starts (a killed one shows in the log).
  EXPECT_NE(log.find(std::string("[det-trial] uploading checkpoint ") + kUuid + " to s3://det-test/exp-1/" + kUuid),
            std::string::npos)
      << log;
  EXPECT_LT(log.find("uploading checkpoint"), log.find("uploaded to")) << log;
  EXPECT_EQ(up->path, std::string("s3://det-test/exp-1/") + kUuid);
  EXPECT_EQ(up->uuid, kUuid);
  EXPECT_EQ(up->resources, local.resources);
  EXPECT_FALSE(fs::exists(local.path)) << "the local copy stays after the upload";
  EXPECT_EQ(asked_, std::vector<std::string>{"s3://det-test/exp-1"}) << "one credentials request per storage";

  // boto3 sees every file and the manifest, nothing else.
  auto listed = test::RunBoto3(*server_, {"list", "det-test", "exp-1/"});
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::map<std::string, int64_t> keys;
  for (const auto& o : *listed) keys[o.at("key").get<std::string>()] = o.at("size").get<int64_t>();
  const std::string p = std::string("exp-1/") + kUuid + "/";
  EXPECT_EQ(keys.size(), 4u) << listed->dump();
  EXPECT_EQ(keys[p + "model_0.pt"], 70000);
  EXPECT_EQ(keys[p + "metadata.json"], 21);
  EXPECT_EQ(keys.count(p + "det-manifest.json"), 1u);

  auto restored = storage.Download(up->path);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(FilesUnder(*restored), files);
  EXPECT_EQ(fs::path(*restored).parent_path(), fs::path(staging_));
  storage.Discard(*restored);
  EXPECT_FALSE(fs::exists(*restored));
}

TEST_F(S3StorageTest, AFailedUploadIsNotReportableAndLeavesNothing) {
  // model_0.pt goes up in 4 parts of 1 MiB; part 3 is cut at every try:
  // the client's retries end in an error naming the checkpoint, and the
  // staged copy and the objects already written (callbacks.json and
  // metadata.json come first) are gone.
  auto proxy = test::S3FaultProxy::Start(server_->port());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  s3::S3RetryPolicy retry;
  retry.max_attempts = 2;
  retry.base_backoff = std::chrono::milliseconds(1);
  s3::S3Limits limits;
  limits.part_size = 1 << 20;
  limits.multipart_threshold = 1 << 20;
  S3CheckpointStorage storage(Fetcher((*proxy)->endpoint_url()), staging_, retry, limits);
  SavedCheckpoint local = FakeCheckpoint(storage.save_dir(), kUuid, (3 << 20) + (1 << 19));
  (*proxy)->CutUploadPart(3, 1000);
  auto up = storage.Upload("s3://det-test/exp-1", local);
  ASSERT_FALSE(up.ok());
  EXPECT_GE((*proxy)->cuts(), 2) << up.status();
  EXPECT_THAT(std::string(up.status().message()), HasSubstr(std::string("checkpoint ") + kUuid));
  EXPECT_THAT(std::string(up.status().message()), HasSubstr("s3://det-test/exp-1"));
  EXPECT_FALSE(fs::exists(local.path));
  auto listed = test::RunBoto3(*server_, {"list", "det-test", "exp-1/"});
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->empty()) << listed->dump();
}

TEST_F(S3StorageTest, RefusedCredentialsFailTheUploadNamingTheStorage) {
  S3CheckpointStorage storage(
      [](const std::string&) -> absl::StatusOr<S3Access> {
        return absl::PermissionDeniedError("profile 'team-a' does not allow workspace 'b'");
      },
      staging_);
  EXPECT_EQ(storage.Open("s3://det-test/exp-1").code(), absl::StatusCode::kPermissionDenied);
  SavedCheckpoint local = FakeCheckpoint(storage.save_dir(), kUuid);
  auto up = storage.Upload("s3://det-test/exp-1", local);
  ASSERT_FALSE(up.ok());
  EXPECT_THAT(std::string(up.status().message()), HasSubstr("team-a"));
  EXPECT_FALSE(fs::exists(local.path));
  // A checkpoint without its manifest is never restored.
  S3CheckpointStorage reader(Fetcher(), staging_);
  auto missing = reader.Download(std::string("s3://det-test/exp-1/") + kUuid);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

}  // namespace
}  // namespace det::runtime
