#include "common/sha256.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace det {
namespace {

namespace fs = std::filesystem;

constexpr char kEmpty[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr char kAbc[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
// FIPS 180-2's two-block message.
constexpr char kTwoBlockMessage[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
constexpr char kTwoBlock[] = "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";

TEST(Sha256Test, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), kEmpty);
  EXPECT_EQ(Sha256Hex("abc"), kAbc);
  EXPECT_EQ(Sha256Hex(kTwoBlockMessage), kTwoBlock);
  // Bytes, not C strings: a NUL counts.
  EXPECT_NE(Sha256Hex(std::string("a\0b", 3)), Sha256Hex("a"));
}

TEST(Sha256Test, StreamingEqualsOneShot) {
  Sha256 empty;
  EXPECT_EQ(empty.HexDigest(), kEmpty);
  Sha256 hash;
  hash.Update("a");
  hash.Update("");
  hash.Update("bc");
  EXPECT_EQ(hash.HexDigest(), kAbc);
}

TEST(Sha256Test, HashesFiles) {
  std::string tmpl = (fs::temp_directory_path() / "det-sha256-test-XXXXXX").string();
  const std::string dir = mkdtemp(tmpl.data());
  const std::string path = dir + "/data";
  // Larger than the read buffer, so that it is read in several chunks.
  std::string big(200000, 'x');
  std::ofstream(path, std::ios::binary) << big;
  auto sha = Sha256File(path);
  ASSERT_TRUE(sha.ok()) << sha.status();
  EXPECT_EQ(*sha, Sha256Hex(big));
  auto missing = Sha256File(dir + "/missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(Sha256Test, IsSha256Hex) {
  EXPECT_TRUE(IsSha256Hex(kAbc));
  EXPECT_TRUE(IsSha256Hex(Sha256Hex("x")));
  EXPECT_FALSE(IsSha256Hex(""));
  EXPECT_FALSE(IsSha256Hex("../../etc/passwd"));
  EXPECT_FALSE(IsSha256Hex(std::string(64, 'A')));  // upper case
  EXPECT_FALSE(IsSha256Hex(std::string(63, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(65, 'a')));
  EXPECT_FALSE(IsSha256Hex(std::string(kAbc).replace(10, 1, "g")));
}

}  // namespace
}  // namespace det
