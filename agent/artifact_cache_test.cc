#include "agent/artifact_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/sha256.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

namespace fs = std::filesystem;

std::string TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "det-cache-test-XXXXXX").string();
  return mkdtemp(tmpl.data());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Serves `content` in chunks of 3 bytes.
ArtifactCache::Fetcher Serve(std::string content, int* calls) {
  return [content, calls](const std::string&, const ArtifactCache::ChunkSink& sink) {
    ++*calls;
    for (size_t off = 0; off < content.size(); off += 3) {
      absl::Status st = sink(static_cast<int64_t>(off), absl::string_view(content).substr(off, 3));
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  };
}

TEST(ArtifactCacheTest, FetchesVerifiesAndReuses) {
  const std::string dir = TempDir();
  ArtifactCache cache(dir + "/cache");
  const std::string content = "pretend this is a trial.so";
  const std::string sha = Sha256Hex(content);
  int calls = 0;
  auto path = cache.Get(sha, Serve(content, &calls));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, dir + "/cache/" + sha + ".so");
  EXPECT_EQ(ReadFile(*path), content);
  EXPECT_FALSE(fs::exists(*path + ".tmp"));
  EXPECT_EQ(calls, 1);
  auto again = cache.Get(sha, Serve(content, &calls));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *path);
  EXPECT_EQ(calls, 1);  // cache hit: no second fetch
  auto file_sha = Sha256File(*path);
  ASSERT_TRUE(file_sha.ok());
  EXPECT_EQ(*file_sha, sha);
  fs::remove_all(dir);
}

TEST(ArtifactCacheTest, RejectsCorruptDownload) {
  const std::string dir = TempDir();
  ArtifactCache cache(dir);
  const std::string sha = Sha256Hex("the real bytes");
  int calls = 0;
  auto path = cache.Get(sha, Serve("tampered bytes", &calls));
  ASSERT_FALSE(path.ok());
  EXPECT_EQ(path.status().code(), absl::StatusCode::kDataLoss) << path.status();
  EXPECT_FALSE(fs::exists(cache.PathFor(sha)));
  EXPECT_FALSE(fs::exists(cache.PathFor(sha) + ".tmp"));
  // A later good download succeeds.
  auto good = cache.Get(sha, Serve("the real bytes", &calls));
  ASSERT_TRUE(good.ok()) << good.status();
  fs::remove_all(dir);
}

TEST(ArtifactCacheTest, RejectsMalformedHashAndFetchErrors) {
  const std::string dir = TempDir();
  ArtifactCache cache(dir);
  int calls = 0;
  auto bad = cache.Get("../evil", Serve("x", &calls));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 0);
  auto upper = cache.Get(std::string(64, 'A'), Serve("x", &calls));
  EXPECT_EQ(upper.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(calls, 0);
  auto failing = cache.Get(Sha256Hex("y"), [](const std::string&, const ArtifactCache::ChunkSink&) {
    return absl::UnavailableError("master down");
  });
  EXPECT_EQ(failing.status().code(), absl::StatusCode::kUnavailable);
  fs::remove_all(dir);
}

// A cache entry that is a symlink leading out of the cache (planted by
// someone else on the node) is refused rather than run as the trial.so.
TEST(ArtifactCacheTest, RefusesAnEntryThatLeadsOutsideTheCache) {
  const std::string dir = TempDir();
  fs::create_directories(dir + "/cache");
  std::ofstream(dir + "/outside.so") << "not what the master sent";
  const std::string sha = Sha256Hex("the real bytes");
  fs::create_symlink(dir + "/outside.so", dir + "/cache/" + sha + ".so");
  ArtifactCache cache(dir + "/cache");
  int calls = 0;
  // Not followed: the link goes (its target stays as it was) and the real
  // bytes are fetched.
  auto path = cache.Get(sha, Serve("the real bytes", &calls));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(fs::is_symlink(*path));
  EXPECT_EQ(ReadFile(*path), "the real bytes");
  EXPECT_EQ(ReadFile(dir + "/outside.so"), "not what the master sent");
  fs::remove_all(dir);
}

// A cached file is read-only; one changed anyway (by someone with the
// agent's uid, who makes it writable first) is detected at the next use,
// deleted and fetched again.
TEST(ArtifactCacheTest, SwappedFileIsDetectedAndFetchedAgain) {
  const std::string dir = TempDir();
  ArtifactCache cache(dir + "/cache");
  const std::string content = "the real trial.so";
  const std::string sha = Sha256Hex(content);
  int calls = 0;
  auto path = cache.Get(sha, Serve(content, &calls));
  ASSERT_TRUE(path.ok()) << path.status();
  struct stat st;
  ASSERT_EQ(stat(path->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  ASSERT_EQ(stat((dir + "/cache").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0711u);

  ASSERT_EQ(chmod(path->c_str(), 0644), 0);
  std::ofstream(*path, std::ios::trunc) << "another experiment's trial.so";
  auto again = cache.Get(sha, Serve(content, &calls));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(ReadFile(*again), content);
  ASSERT_EQ(stat(again->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);

  // Replaced by a symlink: not trusted either.
  std::filesystem::remove(*path);
  std::ofstream(dir + "/elsewhere") << content;
  std::filesystem::create_symlink(dir + "/elsewhere", *path);
  auto third = cache.Get(sha, Serve(content, &calls));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(calls, 3);
  EXPECT_FALSE(std::filesystem::is_symlink(*third));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace det::agent
