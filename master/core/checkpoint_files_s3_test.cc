// The master's operations on s3 checkpoints (checkpoint_files_s3.h): the
// row-to-location check (the attack: a row naming another experiment's
// keys), the report check against the manifest, downloads checked against
// the manifest and compared with what boto3 reads, and deletes that remove
// only the checkpoint's own keys (listed with boto3). Against s3rver on
// loopback (tests/s3_harness.h).
#include "master/core/checkpoint_files_s3.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/s3/s3_checkpoint.h"
#include "common/s3/s3_client.h"
#include "master/core/s3_profiles.h"
#include "tests/s3_harness.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

constexpr char kBucket[] = "det-test";
constexpr char kUuidA[] = "0b6a1b2c-3d4e-4f50-8a61-7b8c9d0e1f20";
constexpr char kUuidB[] = "1c7b2c3d-4e5f-4061-9b72-8c9d0e1f2031";

s3::S3Location Loc(const std::string& prefix) { return {kBucket, prefix}; }

CheckpointRow Row(const std::string& uuid, const std::string& storage_path,
                  std::map<std::string, int64_t> resources = {}) {
  CheckpointRow row;
  row.uuid = uuid;
  row.experiment_id = 7;
  row.state = "COMPLETED";
  row.storage_path = storage_path;
  row.resources = std::move(resources);
  return row;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

TEST(S3CheckpointOfRowTest, OnlyTheRowsOwnPlaceUnderItsExperiment) {
  const s3::S3Location exp = Loc("team/exp1");
  auto ok = S3CheckpointOfRow(exp, Row(kUuidA, absl::StrCat("s3://det-test/team/exp1/", kUuidA)));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->key_prefix, absl::StrCat("team/exp1/", kUuidA));
  // The attack: a row (written from a trial's report) naming keys outside
  // its experiment's prefix, another bucket, another uuid, or climbing out.
  for (const std::string& path :
       {absl::StrCat("s3://det-test/team/exp2/", kUuidA), absl::StrCat("s3://other-bucket/team/exp1/", kUuidA),
        absl::StrCat("s3://det-test/team/exp1/", kUuidB), std::string("s3://det-test/team/exp1"),
        absl::StrCat("s3://det-test/team/exp1/../exp2/", kUuidA), absl::StrCat("/data/team/exp1/", kUuidA),
        absl::StrCat("s3://det-test/team/exp1/sub/", kUuidA)}) {
    auto refused = S3CheckpointOfRow(exp, Row(kUuidA, path));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << path;
    EXPECT_THAT(refused.status().message(), HasSubstr(kUuidA)) << path;
  }
  // An experiment without a prefix: s3://B/<uuid>.
  EXPECT_TRUE(S3CheckpointOfRow(Loc(""), Row(kUuidA, absl::StrCat("s3://det-test/", kUuidA))).ok());
}

TEST(CheckManifestAgainstReportTest, EveryReportedFileAndMetadataAtTheirSizes) {
  s3::Manifest m;
  m.files = {{"metadata.json", 12, std::string(32, 'a')},
             {"model.pt", 100, std::string(32, 'b')},
             {"sub/opt.pt", 0, std::string(32, 'c')}};
  const std::string url = "s3://det-test/p/x";
  auto ok = CheckManifestAgainstReport(m, {{"model.pt", 100}, {"sub/opt.pt", 0}}, kUuidA, url);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->value_or(-1), 12);  // metadata.json's size, recorded as for shared_fs
  auto listed = CheckManifestAgainstReport(m, {{"model.pt", 100}, {"sub/opt.pt", 0}, {"metadata.json", 12}},
                                           kUuidA, url);
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_FALSE(listed->has_value());

  auto missing = CheckManifestAgainstReport(m, {{"model.pt", 100}, {"sub/opt.pt", 0}, {"extra.bin", 5}}, kUuidA, url);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("are incomplete (file extra.bin missing)"));
  EXPECT_THAT(missing.status().message(), HasSubstr(url));
  auto size = CheckManifestAgainstReport(m, {{"model.pt", 99}, {"sub/opt.pt", 0}}, kUuidA, url);
  EXPECT_EQ(size.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(size.status().message(), HasSubstr("model.pt is 100 bytes; 99 reported"));
  // A file the report does not list (a callback's subdirectory: det-trial
  // reports only top-level files) is accepted.
  auto extra = CheckManifestAgainstReport(m, {{"model.pt", 100}}, kUuidA, url);
  ASSERT_TRUE(extra.ok()) << extra.status();
  EXPECT_EQ(extra->value_or(-1), 12);
  // metadata.json must be in the manifest.
  s3::Manifest no_meta = m;
  no_meta.files.erase(no_meta.files.begin());
  auto no_metadata = CheckManifestAgainstReport(no_meta, {{"model.pt", 100}}, kUuidA, url);
  EXPECT_EQ(no_metadata.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_metadata.status().message(), HasSubstr("are incomplete (file metadata.json missing)"));
}

// The master's S3 calls run on its gRPC and background threads: each try
// has a total deadline (review M2), so an endpoint that accepts the
// connection and never answers (a listening socket nobody accepts: the
// kernel completes the handshake) cannot pin a thread for the stall
// timeout. Without CURLOPT_TIMEOUT_MS the HEAD below waits 60 s (stall) and
// the 30 s deadline fails.
TEST(MasterS3RetryPolicyTest, AnEndpointThatNeverAnswersEndsWithinTheTotalTimeout) {
  const s3::S3RetryPolicy master = MasterS3RetryPolicy();
  EXPECT_EQ(master.max_attempts, 3);
  EXPECT_EQ(master.total_timeout, std::chrono::seconds(40));
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 16), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  s3::S3Endpoint endpoint;
  endpoint.endpoint_url = absl::StrCat("http://127.0.0.1:", ntohs(addr.sin_port));
  s3::S3RetryPolicy retry = master;
  retry.max_attempts = 1;
  retry.total_timeout = std::chrono::seconds(1);
  auto client = s3::S3Client::Create(endpoint, {"AKIDEXAMPLE", "not-a-secret", ""}, retry);
  ASSERT_TRUE(client.ok()) << client.status();
  auto head = std::async(std::launch::async, [&] { return (*client)->HeadObject(kBucket, "k").status(); });
  ASSERT_EQ(head.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "a request to an endpoint that never answers outlived its total_timeout";
  EXPECT_FALSE(head.get().ok());
  close(fd);
  // Out of bounds is refused.
  retry.total_timeout = std::chrono::seconds(3601);
  EXPECT_EQ(s3::S3Client::Create(endpoint, {"AKIDEXAMPLE", "not-a-secret", ""}, retry).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class S3CheckpointMasterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = test::S3Server::Start(dir_.path());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = NewClient();
    ASSERT_NE(client_, nullptr);
  }

  std::unique_ptr<s3::S3Client> NewClient() {
    s3::S3Endpoint endpoint;
    endpoint.endpoint_url = server_->endpoint_url();
    s3::S3Credentials credentials{test::S3Server::kAccessKeyId, server_->secret(), ""};
    auto client = s3::S3Client::Create(endpoint, credentials);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Writes `files` into a local directory and uploads it as checkpoint
  // `uuid` under `prefix` (s3::UploadCheckpoint: the objects, then the
  // manifest).
  void Upload(const std::string& prefix, const std::string& uuid, const std::map<std::string, std::string>& files) {
    const std::string local = dir_ / absl::StrCat("local-", prefix, "-", uuid);  // prefixes here have no /
    for (const auto& [path, bytes] : files) {
      std::filesystem::create_directories(std::filesystem::path(local + "/" + path).parent_path());
      testing::WriteFile(local + "/" + path, bytes);
    }
    auto loc = s3::CheckpointLocation(Loc(prefix), uuid);
    ASSERT_TRUE(loc.ok()) << loc.status();
    auto manifest = s3::UploadCheckpoint(*client_, *loc, local);
    ASSERT_TRUE(manifest.ok()) << manifest.status();
  }

  // Keys under `prefix` as boto3 lists them.
  std::set<std::string> Boto3Keys(const std::string& prefix) {
    auto listed = test::RunBoto3(*server_, {"list", kBucket, prefix});
    EXPECT_TRUE(listed.ok()) << listed.status();
    std::set<std::string> keys;
    if (listed.ok()) {
      for (const auto& o : *listed) keys.insert(o.at("key").get<std::string>());
    }
    return keys;
  }

  void Boto3Put(const std::string& key, const std::string& bytes) {
    const std::string file = dir_ / "put.bin";
    testing::WriteFile(file, bytes);
    auto put = test::RunBoto3(*server_, {"put", kBucket, key, file});
    ASSERT_TRUE(put.ok()) << put.status();
  }

  // Every chunk of a download, joined per path; the error that ended it.
  absl::Status Drain(CheckpointFiles& files, std::map<std::string, std::string>* got) {
    api::v1::DownloadCheckpointResponse chunk;
    for (;;) {
      absl::StatusOr<bool> more = files.Next(&chunk);
      if (!more.ok()) return more.status();
      if (!*more) return absl::OkStatus();
      std::string& bytes = (*got)[chunk.path()];
      if (static_cast<int64_t>(bytes.size()) != chunk.offset()) return absl::InternalError("chunk out of order");
      if (static_cast<int64_t>(chunk.data().size()) > 1000) return absl::InternalError("chunk over chunk_bytes");
      bytes += chunk.data();
    }
  }

  testing::TempDir dir_;
  std::unique_ptr<test::S3Server> server_;
  std::unique_ptr<s3::S3Client> client_;
};

TEST_F(S3CheckpointMasterTest, DownloadStreamsWhatBoto3Reads) {
  const std::map<std::string, std::string> files = {{"model.pt", RandomBytes(4500, 1)},
                                                    {"sub/optimizer.pt", RandomBytes(1000, 2)},
                                                    {"empty.txt", ""},
                                                    {"metadata.json", R"({"steps_completed": 10})"}};
  ASSERT_NO_FATAL_FAILURE(Upload("exp1", kUuidA, files));
  // As ReportCheckpoint records it: the top-level resources (det-trial does
  // not report a callback's subdirectory), metadata.json from the manifest.
  // The download is the whole manifest: sub/optimizer.pt too.
  CheckpointRow row =
      Row(kUuidA, absl::StrCat("s3://det-test/exp1/", kUuidA), {{"model.pt", 4500}, {"empty.txt", 0}});
  CheckpointFileLimits limits;
  limits.chunk_bytes = 1000;
  auto opened = OpenS3CheckpointFiles(NewClient(), Loc("exp1"), row, limits);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->files().size(), 4u);  // metadata.json and sub/optimizer.pt from the manifest
  EXPECT_EQ((*opened)->total_bytes(), 4500 + 1000 + static_cast<int64_t>(files.at("metadata.json").size()));
  std::map<std::string, std::string> got;
  ASSERT_TRUE(Drain(**opened, &got).ok());
  EXPECT_EQ(got, files);
  // The independent client reads the same bytes.
  for (const auto& [path, bytes] : files) {
    const std::string out = dir_ / "boto3.out";
    auto read = test::RunBoto3(*server_, {"get", kBucket, absl::StrCat("exp1/", kUuidA, "/", path), out});
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->at("md5").get<std::string>(), s3::Md5Hex(got[path])) << path;
  }
  // The manifest's files are bounded as recorded resources are.
  limits.max_files = 3;
  auto over = OpenS3CheckpointFiles(NewClient(), Loc("exp1"), row, limits);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(over.status().message(), HasSubstr("4 files; at most 3 can be downloaded"));
}

TEST_F(S3CheckpointMasterTest, AChangedObjectIsDataLossNamingTheFile) {
  ASSERT_NO_FATAL_FAILURE(Upload("exp1", kUuidA, {{"model.pt", RandomBytes(2500, 3)}, {"z.bin", "zz"}}));
  CheckpointRow row = Row(kUuidA, absl::StrCat("s3://det-test/exp1/", kUuidA), {{"model.pt", 2500}, {"z.bin", 2}});
  CheckpointFileLimits limits;
  limits.chunk_bytes = 1000;
  // The same size, other bytes: caught by the MD5 at the file's end, before
  // its last chunk goes out.
  Boto3Put(absl::StrCat("exp1/", kUuidA, "/model.pt"), RandomBytes(2500, 4));
  auto opened = OpenS3CheckpointFiles(NewClient(), Loc("exp1"), row, limits);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::map<std::string, std::string> got;
  absl::Status st = Drain(**opened, &got);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("checkpoint ", kUuidA, ": file model.pt")));
  EXPECT_THAT(st.message(), HasSubstr("MD5"));
  EXPECT_EQ(got["model.pt"].size(), 2000u);  // the last chunk was held back
  EXPECT_EQ(got.count("z.bin"), 0u);
  // Another size: caught before its first byte.
  Boto3Put(absl::StrCat("exp1/", kUuidA, "/model.pt"), RandomBytes(2600, 5));
  opened = OpenS3CheckpointFiles(NewClient(), Loc("exp1"), row, limits);
  ASSERT_TRUE(opened.ok()) << opened.status();
  got.clear();
  st = Drain(**opened, &got);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(st.message(), HasSubstr("2600 bytes in S3; 2500 recorded"));
  // A recorded file the manifest does not have: refused before streaming.
  row.resources["missing.bin"] = 3;
  opened = OpenS3CheckpointFiles(NewClient(), Loc("exp1"), row, limits);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(opened.status().message(), HasSubstr("missing.bin: not in the manifest"));
}

TEST_F(S3CheckpointMasterTest, NoManifestIsNotFoundForDownloadAndIncompleteForAReport) {
  Boto3Put(absl::StrCat("exp1/", kUuidA, "/model.pt"), "abc");  // objects, no manifest
  CheckpointRow row = Row(kUuidA, absl::StrCat("s3://det-test/exp1/", kUuidA), {{"model.pt", 3}});
  auto opened = OpenS3CheckpointFiles(NewClient(), Loc("exp1"), row);
  EXPECT_EQ(opened.status().code(), absl::StatusCode::kNotFound) << opened.status();
  auto loc = s3::CheckpointLocation(Loc("exp1"), kUuidA);
  ASSERT_TRUE(loc.ok());
  auto report = VerifyS3CheckpointReport(*client_, *loc, {{"model.pt", 3}}, kUuidA);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(report.status().message(), HasSubstr("are incomplete (no manifest det-manifest.json)"));

  ASSERT_NO_FATAL_FAILURE(Upload("exp1", kUuidB, {{"model.pt", "abcd"}, {"metadata.json", "{}"}}));
  auto loc_b = s3::CheckpointLocation(Loc("exp1"), kUuidB);
  ASSERT_TRUE(loc_b.ok());
  auto good = VerifyS3CheckpointReport(*client_, *loc_b, {{"model.pt", 4}}, kUuidB);
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->value_or(-1), 2);
  auto bad = VerifyS3CheckpointReport(*client_, *loc_b, {{"model.pt", 4}, {"more.pt", 1}}, kUuidB);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(bad.status().message(), HasSubstr("file more.pt missing"));
}

TEST_F(S3CheckpointMasterTest, DeleteRemovesOnlyThatCheckpointsKeys) {
  ASSERT_NO_FATAL_FAILURE(Upload("exp1", kUuidA, {{"model.pt", "aaaa"}, {"sub/x.pt", "x"}}));
  ASSERT_NO_FATAL_FAILURE(Upload("exp1", kUuidB, {{"model.pt", "bbbb"}}));
  ASSERT_NO_FATAL_FAILURE(Upload("exp2", kUuidA, {{"model.pt", "cccc"}}));
  Boto3Put(absl::StrCat("exp1/", kUuidA, "-other/keep.bin"), "k");  // shares the uuid as a key prefix
  const std::set<std::string> exp2_before = Boto3Keys("exp2/");
  ASSERT_EQ(Boto3Keys(absl::StrCat("exp1/", kUuidA, "/")).size(), 3u);  // 2 files + the manifest

  auto deleted = DeleteS3CheckpointRow(*client_, Loc("exp1"), Row(kUuidA, absl::StrCat("s3://det-test/exp1/", kUuidA)));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 3);
  EXPECT_TRUE(Boto3Keys(absl::StrCat("exp1/", kUuidA, "/")).empty());
  EXPECT_EQ(Boto3Keys(absl::StrCat("exp1/", kUuidB, "/")).size(), 2u);
  EXPECT_EQ(Boto3Keys(absl::StrCat("exp1/", kUuidA, "-other/")).size(), 1u);
  EXPECT_EQ(Boto3Keys("exp2/"), exp2_before);
  // Gone already: nothing to delete, OK.
  deleted = DeleteS3CheckpointRow(*client_, Loc("exp1"), Row(kUuidA, absl::StrCat("s3://det-test/exp1/", kUuidA)));
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 0);
}

TEST_F(S3CheckpointMasterTest, ARowNamingAnotherExperimentsKeysDeletesNothing) {
  ASSERT_NO_FATAL_FAILURE(Upload("exp2", kUuidA, {{"model.pt", "victim"}}));
  const std::set<std::string> before = Boto3Keys("");
  ASSERT_EQ(before.size(), 2u);
  // Experiment exp1's row, its storage_path pointing at exp2's checkpoint.
  auto refused =
      DeleteS3CheckpointRow(*client_, Loc("exp1"), Row(kUuidA, absl::StrCat("s3://det-test/exp2/", kUuidA)));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("nothing is read or deleted"));
  auto download = OpenS3CheckpointFiles(NewClient(), Loc("exp1"),
                                        Row(kUuidA, absl::StrCat("s3://det-test/exp2/", kUuidA), {{"model.pt", 6}}));
  EXPECT_EQ(download.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Boto3Keys(""), before);
}

}  // namespace
}  // namespace det::master
