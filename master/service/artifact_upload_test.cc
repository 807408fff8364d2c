#include "master/service/artifact_upload.h"

#include <gtest/gtest.h>

#include "common/sha256.h"
#include "tests/test_util.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;

apiv1::UploadArtifactRequest Chunk(const std::string& bytes, const std::string& sha = "", int64_t size = 0) {
  apiv1::UploadArtifactRequest m;
  m.set_sha256(sha);
  m.set_size_bytes(size);
  m.set_chunk(bytes);
  return m;
}

class ArtifactUploadTest : public ::testing::Test {
 protected:
  det::testing::TempDir dir_;
  ArtifactStore store_{dir_ / "artifacts"};
  // A library over one chunk.
  const std::string so_ = det::testing::FakeTrialSo() + std::string((1 << 20) + 10, '\1');
};

TEST_F(ArtifactUploadTest, StoresChunksUnderTheirHash) {
  ArtifactUpload up(&store_, 4 << 20);
  const std::string sha = Sha256Hex(so_);
  ASSERT_TRUE(up.Add(Chunk(so_.substr(0, 1 << 20), sha, static_cast<int64_t>(so_.size()))).ok());
  ASSERT_TRUE(up.Add(Chunk(so_.substr(1 << 20))).ok());
  auto resp = up.Finish();
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_EQ(resp->artifact().sha256(), sha);
  EXPECT_FALSE(resp->already_existed());
  EXPECT_TRUE(store_.Has(sha));
  ArtifactUpload again(&store_, 4 << 20);
  ASSERT_TRUE(again.Add(Chunk(so_.substr(0, 1 << 20), sha, static_cast<int64_t>(so_.size()))).ok());
  ASSERT_TRUE(again.Add(Chunk(so_.substr(1 << 20))).ok());
  EXPECT_TRUE(again.Finish()->already_existed());
}

TEST_F(ArtifactUploadTest, RefusesBadAnnouncementsChunksAndMismatches) {
  const std::string sha = Sha256Hex(so_);
  const int64_t size = static_cast<int64_t>(so_.size());
  auto code = [](const absl::Status& s) { return s.code(); };
  EXPECT_EQ(code(ArtifactUpload(&store_, 4 << 20).Add(Chunk("x", "../../etc/passwd", 1))),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(ArtifactUpload(&store_, 4 << 20).Add(Chunk("x", sha, 0))), absl::StatusCode::kInvalidArgument);
  // Over max_bytes: refused from the announcement, before any byte.
  absl::Status big = ArtifactUpload(&store_, 1000).Add(Chunk("", sha, size));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("size_bytes"), absl::string_view::npos);
  // A chunk over 1 MiB.
  EXPECT_EQ(code(ArtifactUpload(&store_, 4 << 20).Add(Chunk(so_, sha, size))), absl::StatusCode::kInvalidArgument);
  // More bytes than announced.
  ArtifactUpload more(&store_, 4 << 20);
  ASSERT_TRUE(more.Add(Chunk("abc", Sha256Hex("ab"), 2)).code() == absl::StatusCode::kInvalidArgument);
  // Fewer bytes, or other bytes: nothing stored.
  ArtifactUpload fewer(&store_, 4 << 20);
  ASSERT_TRUE(fewer.Add(Chunk(so_.substr(0, 100), sha, size)).ok());
  EXPECT_EQ(fewer.Finish().status().code(), absl::StatusCode::kInvalidArgument);
  std::string other = so_;
  other.back() = '\2';
  ArtifactUpload swapped(&store_, 4 << 20);
  ASSERT_TRUE(swapped.Add(Chunk(other.substr(0, 1 << 20), sha, size)).ok());
  ASSERT_TRUE(swapped.Add(Chunk(other.substr(1 << 20))).ok());
  EXPECT_EQ(swapped.Finish().status().code(), absl::StatusCode::kInvalidArgument);
  // sha256 and size only in the first message; no message at all.
  ArtifactUpload twice(&store_, 4 << 20);
  ASSERT_TRUE(twice.Add(Chunk("", sha, size)).ok());
  EXPECT_EQ(code(twice.Add(Chunk("", sha, size))), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ArtifactUpload(&store_, 4 << 20).Finish().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store_.Has(sha));
  // Not a shared library.
  const std::string text(100, 'a');
  ArtifactUpload elf(&store_, 4 << 20);
  ASSERT_TRUE(elf.Add(Chunk(text, Sha256Hex(text), 100)).ok());
  EXPECT_EQ(elf.Finish().status().code(), absl::StatusCode::kInvalidArgument);
}

// The name a client gives its trial.so is a label, never a path: refused
// when it could name another file, kept beside the artifact otherwise.
TEST_F(ArtifactUploadTest, TrialSoNameIsALabelNeverAPath) {
  EXPECT_EQ(ValidateTrialSoName("").value(), "trial.so");
  EXPECT_EQ(ValidateTrialSoName("my_trial.so").value(), "my_trial.so");
  for (const std::string& bad : std::vector<std::string>{"../x.so", "/etc/passwd", "a/b.so", ".", "..", "a\nb.so",
                                std::string(256, 'x'), "tr\xe9" "al.so", "a\xc0\xaf.so"}) {
    absl::StatusOr<std::string> st = ValidateTrialSoName(bad);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(st.status().message()).rfind("trial_so_name: ", 0), 0u) << st.status();
  }
  const std::string sha = Sha256Hex(so_);
  ASSERT_TRUE(store_.Put(so_).ok());
  EXPECT_EQ(store_.Name(sha), "trial.so");
  ASSERT_TRUE(store_.SetName(sha, "my_trial.so").ok());
  EXPECT_EQ(store_.Name(sha), "my_trial.so");
  EXPECT_FALSE(store_.SetName(sha, "../evil").ok());
  EXPECT_FALSE(store_.SetName("../" + sha, "x.so").ok());
  EXPECT_EQ(store_.Name("../" + sha), "trial.so");
  ASSERT_TRUE(store_.Remove(sha).ok());
  EXPECT_EQ(store_.Name(sha), "trial.so");
}

}  // namespace
}  // namespace det::master
