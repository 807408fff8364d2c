// The checkpoint layout in S3 (s3_checkpoint.h): URLs and manifests (pure),
// then upload, verified download and delete against s3rver on loopback,
// each checked with Debian's boto3 (tests/s3_harness.h), not our client.
#include "common/s3/s3_checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/s3_harness.h"
#include "tests/test_util.h"

namespace det::s3 {
namespace {

using det::test::RunBoto3;
using det::test::S3Server;
using det::testing::FilesUnder;
using det::testing::TempDir;
using det::testing::WriteFile;
using ::testing::HasSubstr;
using nlohmann::json;

constexpr char kUuid1[] = "0f3c9a1e-5b2d-4c6e-8f10-112233445566";
constexpr char kUuid2[] = "1a2b3c4d-0000-4c6e-8f10-aabbccddeeff";
constexpr char kMd5[] = "0123456789abcdef0123456789abcdef";

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(S3CheckpointLayoutTest, UrlsParseFormatAndRefuseBadPrefixes) {
  auto loc = ParseS3Url("s3://det-test/team/exp-1");
  ASSERT_TRUE(loc.ok()) << loc.status();
  EXPECT_EQ(loc->bucket, "det-test");
  EXPECT_EQ(loc->key_prefix, "team/exp-1");
  EXPECT_EQ(FormatS3Url(*loc), "s3://det-test/team/exp-1");
  EXPECT_EQ(ParseS3Url("s3://det-test")->key_prefix, "");
  EXPECT_EQ(ParseS3Url("s3://det-test/")->key_prefix, "");
  EXPECT_EQ(ParseS3Url("s3://det-test/a/")->key_prefix, "a");
  EXPECT_EQ(FormatS3Url({"det-test", ""}), "s3://det-test");
  EXPECT_TRUE(IsS3Url("s3://b/x"));
  EXPECT_FALSE(IsS3Url("/var/det/checkpoints"));
  EXPECT_THAT(Message(ParseS3Url("/tmp/x").status()), HasSubstr("is not an s3://bucket/prefix URL"));
  EXPECT_THAT(Message(ParseS3Url("s3://Bad_Bucket/x").status()), HasSubstr("is not a valid bucket name"));
  EXPECT_THAT(Message(ParseS3Url("s3://det-test/a//b").status()), HasSubstr("the prefix has an empty"));
  EXPECT_THAT(Message(ParseS3Url("s3://det-test/a/../b").status()), HasSubstr("\"..\" segment"));
  EXPECT_THAT(Message(ParseS3Url("s3://det-test/./b").status()), HasSubstr("\"..\" segment"));
  EXPECT_THAT(Message(ParseS3Url("s3://det-test/a\\b").status()), HasSubstr("backslash"));
  EXPECT_THAT(Message(ParseS3Url("s3://det-test/a\nb").status()), HasSubstr("control character"));
  EXPECT_TRUE(ParseS3Url("s3://det-test/" + std::string(kMaxPrefixBytes, 'p')).ok());
  EXPECT_THAT(Message(ParseS3Url("s3://det-test/" + std::string(kMaxPrefixBytes + 1, 'p')).status()),
              HasSubstr("longer than 512 bytes"));

  EXPECT_EQ(CheckpointLocation(*loc, kUuid1)->key_prefix, absl::StrCat("team/exp-1/", kUuid1));
  EXPECT_EQ(CheckpointLocation({"det-test", ""}, kUuid1)->key_prefix, kUuid1);
  EXPECT_FALSE(CheckpointLocation(*loc, "../x").ok());
  EXPECT_FALSE(CheckpointLocation(*loc, "").ok());
}

json Entry(const std::string& path, int64_t size = 1, const std::string& md5 = kMd5) {
  return {{"path", path}, {"size", size}, {"md5", md5}};
}

std::string ManifestError(const std::vector<json>& files, const S3Limits& limits = {}) {
  json j = json::object();
  j["format"] = 1;
  j["files"] = json(files);
  auto m = ParseManifest(j.dump(), {"det-test", "exp/x"}, limits);
  return m.ok() ? "ok" : Message(m.status());
}

TEST(S3CheckpointLayoutTest, ManifestsAreBoundedAndChecked) {
  auto m = ParseManifest(json{{"format", 1}, {"files", json::array({Entry("b/c.pt", 7), Entry("a.bin", 0)})}}.dump(),
                         {"det-test", "exp/x"}, {});
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->files.size(), 2u);
  EXPECT_EQ(m->files[0].path, "a.bin");  // sorted
  EXPECT_EQ(m->total_bytes(), 7);
  auto again = ParseManifest(ManifestJson(*m), {"det-test", "exp/x"}, {});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ManifestJson(*again), ManifestJson(*m));

  EXPECT_THAT(ManifestError({Entry("../etc/passwd")}), HasSubstr("files[0] path \"../etc/passwd\" has an empty"));
  EXPECT_THAT(ManifestError({Entry("/etc/passwd")}), HasSubstr("is absolute"));
  EXPECT_THAT(ManifestError({Entry("a//b")}), HasSubstr("has an empty"));
  EXPECT_THAT(ManifestError({Entry("a/./b")}), HasSubstr("has an empty"));
  EXPECT_THAT(ManifestError({Entry("")}), HasSubstr("is empty"));
  EXPECT_THAT(ManifestError({Entry("a\\b")}), HasSubstr("backslash"));
  EXPECT_THAT(ManifestError({Entry(kManifestName)}), HasSubstr("has the manifest's name"));
  EXPECT_THAT(ManifestError({Entry("a"), Entry("a")}), HasSubstr("lists a twice"));
  EXPECT_THAT(ManifestError({Entry("a", -1)}), HasSubstr("size must be 0.."));
  EXPECT_THAT(ManifestError({Entry("a", (int64_t{5} << 40) + 1)}), HasSubstr("size must be 0.."));
  EXPECT_THAT(ManifestError({json{{"path", "a"}, {"size", 18446744073709551615ull}, {"md5", kMd5}}}),
              HasSubstr("size must be 0.."));
  EXPECT_THAT(ManifestError({Entry("a", 1, "ABCDEF0123456789ABCDEF0123456789")}), HasSubstr("32 lower-case hex"));
  EXPECT_THAT(ManifestError({Entry("a", 1, "abc")}), HasSubstr("32 lower-case hex"));
  EXPECT_THAT(ManifestError({json{{"path", "a"}, {"size", "1"}, {"md5", kMd5}}}), HasSubstr("size an integer"));
  json extra = Entry("a");
  extra["x"] = 1;
  EXPECT_THAT(ManifestError({extra}), HasSubstr("is not {\"path\", \"size\", \"md5\"}"));
  S3Limits short_keys;
  short_keys.max_key_bytes = 20;  // "exp/x/" is 6 bytes
  EXPECT_EQ(ManifestError({Entry(std::string(14, 'k'))}, short_keys), "ok");
  EXPECT_THAT(ManifestError({Entry(std::string(15, 'k'))}, short_keys),
              HasSubstr("makes the object key 21 bytes long, over the limit of 20"));
  std::vector<json> many;
  for (int i = 0; i <= kMaxCheckpointFiles; ++i) many.push_back(Entry(absl::StrCat("f", i)));
  EXPECT_THAT(ManifestError(many), HasSubstr("more than 10000 files"));

  const S3Location loc{"det-test", "exp/x"};
  EXPECT_THAT(Message(ParseManifest("[1]", loc, {}).status()), HasSubstr("not a JSON object"));
  EXPECT_THAT(Message(ParseManifest("{\"format\": 2, \"files\": []}", loc, {}).status()), HasSubstr("format is not 1"));
  EXPECT_THAT(Message(ParseManifest("{\"format\": 1}", loc, {}).status()), HasSubstr("no files array"));
  EXPECT_THAT(Message(ParseManifest(std::string(kMaxManifestBytes + 1, ' '), loc, {}).status()),
              HasSubstr("larger than 4194304 bytes"));
}

// A server, a client of ours, and a checkpoint directory to upload.
class S3CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = S3Server::Start(dir_.path());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = NewClient(S3Limits{});
    ASSERT_NE(client_, nullptr);
    storage_ = {"det-test", "team/exp-1"};
    ckpt_ = *CheckpointLocation(storage_, kUuid1);
    std::filesystem::create_directories(dir_ / "ckpt/sub/deeper");
    WriteFile(dir_ / "ckpt/model.pt", std::string(200000, 'm') + "end");
    WriteFile(dir_ / "ckpt/empty", "");
    WriteFile(dir_ / "ckpt/sub/deeper/state.json", "{\"step\": 3}");
  }

  std::unique_ptr<S3Client> NewClient(const S3Limits& limits) {
    S3Endpoint endpoint;
    endpoint.endpoint_url = server_->endpoint_url();
    auto client = S3Client::Create(endpoint, {S3Server::kAccessKeyId, server_->secret(), ""}, {}, limits);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  json List(const std::string& prefix) {
    auto list = RunBoto3(*server_, {"list", "det-test", prefix});
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? *list : json::array();
  }

  std::vector<std::string> Keys(const std::string& prefix) {
    std::vector<std::string> keys;
    for (const json& o : List(prefix)) keys.push_back(o["key"]);
    return keys;
  }

  TempDir dir_;
  std::unique_ptr<S3Server> server_;
  std::unique_ptr<S3Client> client_;
  S3Location storage_, ckpt_;
};

TEST_F(S3CheckpointTest, UploadWritesEveryFileAndTheManifestAsBoto3Sees) {
  auto manifest = UploadCheckpoint(*client_, ckpt_, dir_ / "ckpt");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_EQ(manifest->files.size(), 3u);
  EXPECT_EQ(manifest->total_bytes(), 200003 + 11);
  const std::string p = ckpt_.key_prefix + "/";
  EXPECT_THAT(Keys(p), ::testing::ElementsAre(p + kManifestName, p + "empty", p + "model.pt",
                                              p + "sub/deeper/state.json"));
  for (const json& o : List(p)) {
    const std::string key = o["key"];
    if (key == p + kManifestName) continue;
    const std::string rel = key.substr(p.size());
    auto got = RunBoto3(*server_, {"get", "det-test", key, dir_ / "got"});
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(det::testing::ReadFile(dir_ / "got"), det::testing::ReadFile(dir_ / ("ckpt/" + rel))) << rel;
    const auto it = std::find_if(manifest->files.begin(), manifest->files.end(),
                                 [&](const ManifestFile& f) { return f.path == rel; });
    ASSERT_NE(it, manifest->files.end()) << rel;
    EXPECT_EQ((*got)["md5"], it->md5) << rel;
    EXPECT_EQ((*got)["size"], it->size) << rel;
  }
  auto got = RunBoto3(*server_, {"get", "det-test", p + kManifestName, dir_ / "manifest.json"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(det::testing::ReadFile(dir_ / "manifest.json"), ManifestJson(*manifest));
  auto read = ReadManifest(*client_, ckpt_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(ManifestJson(*read), ManifestJson(*manifest));
}

TEST_F(S3CheckpointTest, DownloadGivesBackTheSameFilesPrivately) {
  ASSERT_TRUE(UploadCheckpoint(*client_, ckpt_, dir_ / "ckpt").ok());
  auto manifest = DownloadCheckpoint(*client_, ckpt_, dir_ / "restored");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(FilesUnder(dir_ / "restored"), FilesUnder(dir_ / "ckpt"));
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "restored").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto again = DownloadCheckpoint(*client_, ckpt_, dir_ / "restored");
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
}

TEST_F(S3CheckpointTest, AFileOverTheThresholdGoesInPartsAndComesBackVerified) {
  // Through the fault proxy, which cuts part 3 once: that part exists (the
  // upload is multipart) and its retry completes the checkpoint. (s3rver
  // gives a multipart object its whole MD5 as ETag, not "<md5>-<parts>".)
  auto proxy = det::test::S3FaultProxy::Start(server_->port());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  (*proxy)->CutUploadPart(3, 1);
  S3Limits limits;
  limits.multipart_threshold = int64_t{5} << 20;
  limits.part_size = int64_t{5} << 20;
  S3Endpoint endpoint;
  endpoint.endpoint_url = (*proxy)->endpoint_url();
  auto client = S3Client::Create(endpoint, {S3Server::kAccessKeyId, server_->secret(), ""}, {}, limits);
  ASSERT_TRUE(client.ok()) << client.status();
  std::string big(int64_t{11} << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  WriteFile(dir_ / "ckpt/model.pt", big);
  auto manifest = UploadCheckpoint(**client, ckpt_, dir_ / "ckpt");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ((*proxy)->cuts(), 1);
  auto got = RunBoto3(*server_, {"get", "det-test", ckpt_.key_prefix + "/model.pt", dir_ / "got"});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["size"], big.size());
  EXPECT_EQ((*got)["md5"], Md5Hex(big));
  ASSERT_TRUE(DownloadCheckpoint(**client, ckpt_, dir_ / "restored").ok());
  EXPECT_EQ(FilesUnder(dir_ / "restored"), FilesUnder(dir_ / "ckpt"));
}

// What is left beside `dir_`/target: the target or a temporary sibling.
std::vector<std::string> Leftovers(const std::string& parent, const std::string& name) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(parent)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(name, 0) == 0) out.push_back(n);
  }
  return out;
}

TEST_F(S3CheckpointTest, ACorruptedObjectIsDataLossAndLeavesNoDirectory) {
  ASSERT_TRUE(UploadCheckpoint(*client_, ckpt_, dir_ / "ckpt").ok());
  // Same size, other bytes: only the MD5 tells.
  WriteFile(dir_ / "evil", std::string(200000, 'm') + "EnD");
  ASSERT_TRUE(RunBoto3(*server_, {"put", "det-test", ckpt_.key_prefix + "/model.pt", dir_ / "evil"}).ok());
  auto manifest = DownloadCheckpoint(*client_, ckpt_, dir_ / "restored");
  ASSERT_FALSE(manifest.ok());
  EXPECT_TRUE(absl::IsDataLoss(manifest.status())) << manifest.status();
  EXPECT_THAT(Message(manifest.status()), HasSubstr("model.pt"));
  EXPECT_THAT(Leftovers(dir_.path(), "restored"), ::testing::IsEmpty());
}

TEST_F(S3CheckpointTest, AMissingOrHostileManifestIsRefused) {
  ASSERT_TRUE(UploadCheckpoint(*client_, ckpt_, dir_ / "ckpt").ok());
  const std::string manifest_key = ckpt_.key_prefix + "/" + kManifestName;
  WriteFile(dir_ / "hostile.json", json{{"format", 1}, {"files", json::array({Entry("../../escaped", 1)})}}.dump());
  ASSERT_TRUE(RunBoto3(*server_, {"put", "det-test", manifest_key, dir_ / "hostile.json"}).ok());
  auto hostile = DownloadCheckpoint(*client_, ckpt_, dir_ / "restored");
  EXPECT_TRUE(absl::IsDataLoss(hostile.status())) << hostile.status();
  EXPECT_THAT(Message(hostile.status()), HasSubstr("\"../../escaped\" has an empty"));
  EXPECT_THAT(Leftovers(dir_.path(), "restored"), ::testing::IsEmpty());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "escaped"));
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir_.path()).parent_path() / "escaped"));

  ASSERT_TRUE(RunBoto3(*server_, {"delete", "det-test", manifest_key}).ok());
  auto missing = ReadManifest(*client_, ckpt_);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(Message(missing.status()), HasSubstr("is incomplete"));
  EXPECT_TRUE(absl::IsNotFound(DownloadCheckpoint(*client_, ckpt_, dir_ / "restored").status()));
}

// A manifest claiming more bytes than the target's file system has free
// (3 x 5 TiB) is refused before any GET of a file: the error names the
// checkpoint, the bytes needed and free, and nothing is written.
TEST_F(S3CheckpointTest, AManifestLargerThanTheFreeDiskIsRefusedBeforeAnyDownload) {
  ASSERT_TRUE(UploadCheckpoint(*client_, ckpt_, dir_ / "ckpt").ok());
  const int64_t huge = S3Limits{}.max_object_bytes;
  WriteFile(dir_ / "huge.json",
            json{{"format", 1}, {"files", json::array({Entry("a", huge), Entry("b", huge), Entry("c", huge)})}}.dump());
  ASSERT_TRUE(RunBoto3(*server_, {"put", "det-test", ckpt_.key_prefix + "/" + kManifestName, dir_ / "huge.json"}).ok());
  const int64_t before = client_->requests_sent();
  auto got = DownloadCheckpoint(*client_, ckpt_, dir_ / "restored");
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(got.status())) << got.status();
  EXPECT_THAT(Message(got.status()), HasSubstr("cannot download checkpoint s3://det-test/team/exp-1/" +
                                               std::string(kUuid1) + " into " + (dir_ / "restored")));
  EXPECT_THAT(Message(got.status()), HasSubstr(absl::StrCat("its manifest lists ", 3 * huge, " bytes")));
  EXPECT_THAT(Message(got.status()), HasSubstr("bytes free; free disk space there"));
  EXPECT_EQ(client_->requests_sent() - before, 1) << "only the manifest was read";
  EXPECT_THAT(Leftovers(dir_.path(), "restored"), ::testing::IsEmpty());
}

TEST_F(S3CheckpointTest, SymlinksLongKeysAndTheManifestNameAreRefusedBeforeAnyUpload) {
  ASSERT_EQ(::symlink("/etc/passwd", (dir_ / "ckpt/sub/link").c_str()), 0);
  auto linked = UploadCheckpoint(*client_, ckpt_, dir_ / "ckpt");
  EXPECT_TRUE(absl::IsInvalidArgument(linked.status())) << linked.status();
  EXPECT_THAT(Message(linked.status()), HasSubstr("checkpoint file sub/link in "));
  EXPECT_THAT(Message(linked.status()), HasSubstr("is a symbolic link"));
  std::filesystem::remove(dir_ / "ckpt/sub/link");
  ASSERT_EQ(::mkfifo((dir_ / "ckpt/fifo").c_str(), 0600), 0);
  EXPECT_THAT(Message(UploadCheckpoint(*client_, ckpt_, dir_ / "ckpt").status()),
              HasSubstr("fifo in " + (dir_ / "ckpt") + " is not a regular file"));
  std::filesystem::remove(dir_ / "ckpt/fifo");

  S3Limits short_keys;
  short_keys.max_key_bytes = static_cast<int>(ckpt_.key_prefix.size()) + 1 + 20;
  auto client = NewClient(short_keys);
  auto long_key = UploadCheckpoint(*client, ckpt_, dir_ / "ckpt");
  EXPECT_TRUE(absl::IsInvalidArgument(long_key.status())) << long_key.status();
  EXPECT_THAT(Message(long_key.status()), HasSubstr("\"sub/deeper/state.json\" makes the object key"));

  WriteFile(dir_ / (std::string("ckpt/") + kManifestName), "{}");
  EXPECT_THAT(Message(UploadCheckpoint(*client_, ckpt_, dir_ / "ckpt").status()),
              HasSubstr("has the manifest's name"));
  EXPECT_THAT(Keys(""), ::testing::IsEmpty());  // nothing was uploaded
}

TEST_F(S3CheckpointTest, DeleteRemovesThatCheckpointOnly) {
  ASSERT_TRUE(UploadCheckpoint(*client_, ckpt_, dir_ / "ckpt").ok());
  const S3Location other = *CheckpointLocation(storage_, kUuid2);
  ASSERT_TRUE(UploadCheckpoint(*client_, other, dir_ / "ckpt").ok());
  WriteFile(dir_ / "x", "x");  // a key that shares the uuid as a string prefix
  ASSERT_TRUE(RunBoto3(*server_, {"put", "det-test", ckpt_.key_prefix + ".txt", dir_ / "x"}).ok());

  auto deleted = DeleteCheckpoint(*client_, ckpt_, storage_.key_prefix);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 4);
  EXPECT_THAT(Keys(ckpt_.key_prefix + "/"), ::testing::IsEmpty());
  EXPECT_EQ(Keys(other.key_prefix + "/").size(), 4u);
  EXPECT_THAT(Keys(ckpt_.key_prefix + "."), ::testing::ElementsAre(ckpt_.key_prefix + ".txt"));
  EXPECT_EQ(*DeleteCheckpoint(*client_, ckpt_, storage_.key_prefix), 0);  // again: nothing left

  // Outside the experiment's prefix, or not <prefix>/<uuid>: refused.
  for (const S3Location& bad : {S3Location{"det-test", absl::StrCat("team/other/", kUuid2)},
                                S3Location{"det-test", absl::StrCat("team/exp-1/sub/", kUuid2)},
                                S3Location{"det-test", "team/exp-1"}, S3Location{"det-test", "team"},
                                S3Location{"det-test", absl::StrCat("team/exp-10/", kUuid2)}}) {
    auto refused = DeleteCheckpoint(*client_, bad, storage_.key_prefix);
    EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << bad.key_prefix << ": " << refused.status();
    EXPECT_THAT(Message(refused.status()), HasSubstr("under the experiment's prefix \"team/exp-1\""));
  }
  EXPECT_FALSE(DeleteCheckpoint(*client_, other, "").ok());  // empty prefix: only "<uuid>"
  EXPECT_EQ(Keys(other.key_prefix + "/").size(), 4u);
  ASSERT_TRUE(UploadCheckpoint(*client_, {"det-test", kUuid1}, dir_ / "ckpt").ok());
  EXPECT_EQ(*DeleteCheckpoint(*client_, {"det-test", kUuid1}, ""), 4);
  EXPECT_THAT(Keys(absl::StrCat(kUuid1, "/")), ::testing::IsEmpty());
}

}  // namespace
}  // namespace det::s3
