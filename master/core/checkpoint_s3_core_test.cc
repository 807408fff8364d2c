// MasterCore with an s3 experiment against s3rver (issue 49): a checkpoint
// report is recorded only when its manifest lists the reported files
// (s3://bucket/prefix/<uuid>, metadata.json's size from the manifest);
// DownloadCheckpoint streams it from S3; GC, DeleteCheckpoints and
// experiment delete remove exactly its objects (listed with boto3).
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/s3/s3_checkpoint.h"
#include "common/s3/s3_client.h"
#include "master/core/core_test_fixture.h"
#include "tests/s3_harness.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

constexpr char kUuidA[] = "2d8c3d4e-5f60-4172-8c83-9d0e1f203142";
constexpr char kUuidB[] = "3e9d4e5f-6071-4283-9d94-0e1f20314253";

class S3CheckpointCoreTest : public MasterCoreFixture {
 protected:
  void SetUp() override {
    auto server = test::S3Server::Start(s3_dir_.path());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    credentials_ = test::WriteS3CredentialsFile(s3_dir_.path(), *server_);
    s3::S3Endpoint endpoint;
    endpoint.endpoint_url = server_->endpoint_url();
    auto client = s3::S3Client::Create(endpoint, {test::S3Server::kAccessKeyId, server_->secret(), ""});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    MasterCoreFixture::SetUp();
  }
  void Customize(MasterOptions* options) override { options->s3_credentials_file = credentials_; }

  // One agent, an active s3 experiment of one trial (bucket det-test,
  // prefix team/exp), its allocation in start_.
  void Start() {
    ASSERT_NO_FATAL_FAILURE(AttachOneSlotAgent(&session_));
    std::string yaml = det::testing::SingleTrialConfig("s3", "/unused", 1);
    yaml = absl::StrReplaceAll(yaml, {{"  type: shared_fs\n  host_path: /unused\n",
                                       "  type: s3\n  bucket: det-test\n  prefix: team/exp\n"}});
    ASSERT_GT(CreateActiveExperiment(yaml), 0);
    core_->RunBackgroundPass();
    for (const auto& s : Starts(*session_)) start_ = s;
    ASSERT_FALSE(start_.allocation_id().empty());
    EXPECT_EQ(start_.checkpoint_storage_path(), "s3://det-test/team/exp");
  }

  // Uploads `files` as checkpoint `uuid` of the experiment (what det-trial does).
  void Upload(const std::string& uuid, const std::map<std::string, std::string>& files) {
    const std::string local = s3_dir_ / absl::StrCat("local-", uuid);
    std::filesystem::create_directories(local);
    for (const auto& [path, bytes] : files) {
      std::filesystem::create_directories(std::filesystem::path(local + "/" + path).parent_path());
      det::testing::WriteFile(local + "/" + path, bytes);
    }
    auto loc = s3::CheckpointLocation({"det-test", "team/exp"}, uuid);
    ASSERT_TRUE(loc.ok()) << loc.status();
    auto manifest = s3::UploadCheckpoint(*client_, *loc, local);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
  }

  absl::Status Report(const std::string& uuid, const std::map<std::string, int64_t>& resources, int64_t batches) {
    trialv1::ReportCheckpointRequest ck;
    ck.set_allocation_id(start_.allocation_id());
    ck.set_uuid(uuid);
    ck.set_total_batches(batches);
    for (const auto& [path, size] : resources) (*ck.mutable_resources())[path] = size;
    return core_->ReportCheckpoint(ck, start_.allocation_token()).status();
  }

  std::set<std::string> Boto3Keys(const std::string& prefix) {
    auto listed = test::RunBoto3(*server_, {"list", "det-test", prefix});
    EXPECT_TRUE(listed.ok()) << listed.status();
    std::set<std::string> keys;
    if (listed.ok()) {
      for (const auto& o : *listed) keys.insert(o.at("key").get<std::string>());
    }
    return keys;
  }

  det::testing::TempDir s3_dir_;
  std::unique_ptr<test::S3Server> server_;
  std::string credentials_;
  std::unique_ptr<s3::S3Client> client_;
  std::shared_ptr<AgentSession> session_;
  agentv1::StartAllocation start_;
};

TEST_F(S3CheckpointCoreTest, AReportIsRecordedOnlyWhenItsManifestListsItsFiles) {
  ASSERT_NO_FATAL_FAILURE(Start());
  // Nothing uploaded (or objects without their manifest): not recorded.
  absl::Status st = Report(kUuidA, {{"model.pt", 5}}, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("checkpoint ", kUuidA, ": its objects in s3://det-test/team/exp/",
                                                   kUuidA, " are incomplete (no manifest")));
  EXPECT_TRUE(core_->store()->ListCheckpoints(std::nullopt, 1)->empty());
  // The manifest lists another size: not recorded.
  ASSERT_NO_FATAL_FAILURE(Upload(kUuidA, {{"model.pt", "12345"}, {"metadata.json", "{\"a\":1}"}}));
  st = Report(kUuidA, {{"model.pt", 6}}, 10);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(st.message(), HasSubstr("model.pt is 5 bytes; 6 reported"));
  EXPECT_TRUE(core_->store()->ListCheckpoints(std::nullopt, 1)->empty());
  // As uploaded: recorded at s3://det-test/team/exp/<uuid>, metadata.json's
  // size from the manifest.
  ASSERT_TRUE(Report(kUuidA, {{"model.pt", 5}}, 10).ok());
  auto row = core_->store()->GetCheckpoint(kUuidA);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(row->storage_path, absl::StrCat("s3://det-test/team/exp/", kUuidA));
  EXPECT_EQ(row->resources, (std::map<std::string, int64_t>{{"metadata.json", 7}, {"model.pt", 5}}));
  EXPECT_EQ(Trial().latest_checkpoint_uuid(), kUuidA);
}

TEST_F(S3CheckpointCoreTest, DownloadStreamsFromS3AndDeleteRemovesOnlyItsObjects) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::map<std::string, std::string> files = {{"model.pt", std::string(3 << 20, 'm')},
                                                    {"metadata.json", "{}"}};
  ASSERT_NO_FATAL_FAILURE(Upload(kUuidA, files));
  ASSERT_TRUE(Report(kUuidA, {{"model.pt", 3 << 20}}, 10).ok());
  ASSERT_NO_FATAL_FAILURE(Upload(kUuidB, {{"model.pt", "b"}, {"metadata.json", "{}"}}));
  ASSERT_TRUE(Report(kUuidB, {{"model.pt", 1}}, 20).ok());

  apiv1::DownloadCheckpointRequest req;
  req.set_checkpoint_uuid(kUuidA);
  auto opened = core_->OpenCheckpointFiles(req);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::map<std::string, std::string> got;
  apiv1::DownloadCheckpointResponse chunk;
  for (;;) {
    auto more = (*opened)->Next(&chunk);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    got[chunk.path()] += chunk.data();
  }
  EXPECT_EQ(got, files);

  // A (not the latest) goes: exactly its objects, B's stay.
  ASSERT_EQ(Boto3Keys(absl::StrCat("team/exp/", kUuidA, "/")).size(), 3u);
  apiv1::DeleteCheckpointsRequest del;
  del.add_checkpoint_uuids(kUuidA);
  auto deleted = core_->DeleteCheckpoints(del);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_TRUE(Boto3Keys(absl::StrCat("team/exp/", kUuidA, "/")).empty());
  EXPECT_EQ(Boto3Keys("team/exp/"),
            (std::set<std::string>{absl::StrCat("team/exp/", kUuidB, "/det-manifest.json"),
                                   absl::StrCat("team/exp/", kUuidB, "/metadata.json"),
                                   absl::StrCat("team/exp/", kUuidB, "/model.pt")}));
  // A download of a deleted checkpoint is refused before S3 is asked.
  EXPECT_EQ(core_->OpenCheckpointFiles(req).status().code(), absl::StatusCode::kFailedPrecondition);
}

// det-trial reports a checkpoint's top-level files; a callback's
// on_checkpoint_save may write a subdirectory, which is uploaded and in the
// manifest: the checkpoint is recorded, and its download has that file.
TEST_F(S3CheckpointCoreTest, ACallbacksSubdirectoryIsRecordedAndDownloaded) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const std::map<std::string, std::string> files = {
      {"model.pt", "mm"}, {"cb/state/rng.bin", "rng"}, {"metadata.json", "{}"}};
  ASSERT_NO_FATAL_FAILURE(Upload(kUuidA, files));
  absl::Status st = Report(kUuidA, {{"model.pt", 2}}, 10);
  ASSERT_TRUE(st.ok()) << st;
  apiv1::DownloadCheckpointRequest req;
  req.set_checkpoint_uuid(kUuidA);
  auto opened = core_->OpenCheckpointFiles(req);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::map<std::string, std::string> got;
  apiv1::DownloadCheckpointResponse chunk;
  for (;;) {
    auto more = (*opened)->Next(&chunk);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    got[chunk.path()] += chunk.data();
  }
  EXPECT_EQ(got, files);
}

TEST_F(S3CheckpointCoreTest, GcAndExperimentDeleteRemoveItsObjectsOnly) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(Upload(kUuidA, {{"model.pt", "a"}, {"metadata.json", "{}"}}));
  ASSERT_TRUE(Report(kUuidA, {{"model.pt", 1}}, 10).ok());
  ASSERT_NO_FATAL_FAILURE(Upload(kUuidB, {{"model.pt", "bb"}, {"metadata.json", "{}"}}));
  ASSERT_TRUE(Report(kUuidB, {{"model.pt", 2}}, 20).ok());
  // Another experiment's objects next to it (a prefix sharing its start).
  const std::string other = s3_dir_ / "other.bin";
  det::testing::WriteFile(other, "o");
  ASSERT_TRUE(test::RunBoto3(*server_, {"put", "det-test", absl::StrCat("team/exp-2/", kUuidA, "/x"), other}).ok());
  apiv1::KillExperimentRequest kill;
  kill.set_experiment_id(1);
  ASSERT_TRUE(core_->KillExperiment(kill).ok());
  Exited("a", start_.allocation_id(), 0, 137);
  core_->RunBackgroundPass();  // the trial ended: GC keeps its latest (B) only
  EXPECT_TRUE(Boto3Keys(absl::StrCat("team/exp/", kUuidA, "/")).empty());
  EXPECT_EQ(Boto3Keys(absl::StrCat("team/exp/", kUuidB, "/")).size(), 3u);
  apiv1::DeleteExperimentRequest del;
  del.set_experiment_id(1);
  auto deleted = core_->DeleteExperiment(del);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  core_->RunBackgroundPass();  // runs the deletion to its end
  EXPECT_TRUE(Boto3Keys("team/exp/").empty());
  EXPECT_EQ(Boto3Keys("team/"), (std::set<std::string>{absl::StrCat("team/exp-2/", kUuidA, "/x")}));
  EXPECT_TRUE(core_->store()->ListCheckpoints(1, std::nullopt)->empty());
}

// The master's profile points at an S3FaultProxy in front of the server, so
// a test can fail the master's S3 requests (review M4a: retried deletes).
class S3DeleteRetryCoreTest : public S3CheckpointCoreTest {
 protected:
  void Customize(MasterOptions* options) override {
    if (!proxy_) {
      auto proxy = test::S3FaultProxy::Start(server_->port());
      ASSERT_TRUE(proxy.ok()) << proxy.status();
      proxy_ = *std::move(proxy);
      credentials_ = test::WriteS3CredentialsFile(proxy_dir_.path(), *server_, "default", "*", proxy_->endpoint_url());
    }
    S3CheckpointCoreTest::Customize(options);
  }

  det::testing::TempDir proxy_dir_;
  std::unique_ptr<test::S3FaultProxy> proxy_;
};

// A delete that fails (every request 503) leaves the row DELETED and the
// objects in place; the background pass retries it 1 min later, then with
// the backoff doubled (2 min), and once S3 answers again the objects go.
TEST_F(S3DeleteRetryCoreTest, AFailedDeleteIsRetriedWithBackoffUntilItSucceeds) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(Upload(kUuidA, {{"model.pt", "a"}, {"metadata.json", "{}"}}));
  ASSERT_TRUE(Report(kUuidA, {{"model.pt", 1}}, 10).ok());
  ASSERT_NO_FATAL_FAILURE(Upload(kUuidB, {{"model.pt", "b"}, {"metadata.json", "{}"}}));
  ASSERT_TRUE(Report(kUuidB, {{"model.pt", 1}}, 20).ok());
  const std::string a_prefix = absl::StrCat("team/exp/", kUuidA, "/");

  proxy_->FailNextRequests(1000000, 503);
  apiv1::DeleteCheckpointsRequest del;
  del.add_checkpoint_uuids(kUuidA);
  ASSERT_TRUE(core_->DeleteCheckpoints(del).ok());
  EXPECT_EQ(core_->store()->GetCheckpoint(kUuidA)->state, "DELETED");
  EXPECT_EQ(Boto3Keys(a_prefix).size(), 3u);  // boto3 goes to the server, not the proxy
  const int failed = proxy_->failed();
  EXPECT_GT(failed, 0);

  core_->RunBackgroundPass();  // not due yet: no request
  EXPECT_EQ(proxy_->failed(), failed);
  clock_->AdvanceMs(60'001);
  core_->RunBackgroundPass();  // due: tried, fails again (next in 2 min)
  EXPECT_GT(proxy_->failed(), failed);
  EXPECT_EQ(Boto3Keys(a_prefix).size(), 3u);

  proxy_->Reset();
  clock_->AdvanceMs(60'001);
  core_->RunBackgroundPass();  // 1 min after the second failure: not due
  EXPECT_EQ(Boto3Keys(a_prefix).size(), 3u);
  clock_->AdvanceMs(60'000);
  core_->RunBackgroundPass();  // 2 min after it: deleted
  EXPECT_TRUE(Boto3Keys(a_prefix).empty());
  EXPECT_EQ(Boto3Keys(absl::StrCat("team/exp/", kUuidB, "/")).size(), 3u);
  clock_->AdvanceMs(3'600'000);
  const int requests = proxy_->requests();
  core_->RunBackgroundPass();  // the entry went: no further request
  EXPECT_EQ(proxy_->requests(), requests);
}

}  // namespace
}  // namespace det::master
