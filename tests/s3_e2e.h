// Shared pieces of the S3 end-to-end tests (issue 49: s3_checkpoint_test,
// s3_fault_test, s3_secrets_test): a credentials file of several profiles,
// synthetic-trial configs with S3 checkpoint storage, and what Debian's boto3
// (tests/s3/s3check.py through det::test::RunBoto3, never our own S3 code)
// finds in the bucket, compared with the checkpoints the master lists.
#ifndef DET_TESTS_S3_E2E_H_
#define DET_TESTS_S3_E2E_H_

#include <sys/stat.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/s3_harness.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {

inline constexpr char kBucket[] = "det-test";

// One [profile] of the credentials file (access key S3RVER, the server's
// random secret).
struct ProfileSpec {
  std::string name = "default";
  std::string endpoint_url;  // the profile's endpoint (s3rver or a proxy)
  std::string workspaces = "*";
};

// Writes dir/NAME (mode 0600) with `profiles`; returns its path.
inline std::string WriteProfiles(const TempDir& dir, const std::string& name, const test::S3Server& s3,
                                 const std::vector<ProfileSpec>& profiles) {
  std::string text;
  for (const auto& p : profiles) {
    absl::StrAppend(&text, "[", p.name, "]\naws_access_key_id = ", test::S3Server::kAccessKeyId,
                    "\naws_secret_access_key = ", s3.secret(), "\nendpoint_url = ", p.endpoint_url,
                    "\nregion = us-east-1\ndet_workspaces = ", p.workspaces, "\n\n");
  }
  const std::string path = dir / name;
  WriteFile(path, text);
  chmod(path.c_str(), 0600);
  return path;
}

inline int64_t JsonInt(const nlohmann::json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());  // int64 in protobuf's JSON mapping
  if (v.is_number()) return v.get<int64_t>();
  return 0;
}

// checkpoint_storage lines of an S3 experiment (2-space indented keys),
// plus `extra` lines (e.g. the GC policy).
inline std::string S3Storage(const std::string& prefix, const std::string& profile = "default",
                             const std::string& extra = "") {
  return absl::StrCat("checkpoint_storage:\n  type: s3\n  bucket: ", kBucket, "\n  prefix: ", prefix,
                      "\n  profile: ", profile, "\n", extra);
}

// What boto3 lists under `prefix` + "/": key -> {"key", "size", "etag"}.
inline std::map<std::string, nlohmann::json> Boto3List(const test::S3Server& s3, const std::string& prefix) {
  auto got = test::RunBoto3(s3, {"list", kBucket, prefix + "/"});
  EXPECT_TRUE(got.ok()) << got.status();
  std::map<std::string, nlohmann::json> out;
  if (!got.ok() || !got->is_array()) return out;
  for (const auto& o : *got) out[o.value("key", "")] = o;
  return out;
}

// boto3 get of `key` into `path`: {"size", "md5"} ({} on failure, with a
// test failure).
inline nlohmann::json Boto3Get(const test::S3Server& s3, const std::string& key, const std::string& path) {
  auto got = test::RunBoto3(s3, {"get", kBucket, key, path});
  EXPECT_TRUE(got.ok()) << key << ": " << got.status();
  return got.ok() ? *got : nlohmann::json::object();
}

// The experiment's checkpoints (REST) in `state` ("" for all).
inline nlohmann::json ExperimentCheckpoints(TestCluster& cluster, int exp, const std::string& state = "") {
  nlohmann::json got = cluster.Get(absl::StrCat("/api/v1/experiments/", exp, "/checkpoints"));
  nlohmann::json out = nlohmann::json::array();
  if (!got.is_object() || !got.contains("checkpoints")) return out;
  for (const auto& c : got["checkpoints"]) {
    if (state.empty() || c.value("state", "") == state) out.push_back(c);
  }
  return out;
}

// Each COMPLETED checkpoint's manifest, got with boto3 and parsed: uuid ->
// manifest JSON. Checks on the way that the master's storage_path is
// s3://BUCKET/PREFIX/UUID and that the manifest lists exactly the master's
// resources with their sizes.
inline std::map<std::string, nlohmann::json> CompletedManifests(TestCluster& cluster, const test::S3Server& s3,
                                                                 int exp, const std::string& prefix) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& c : ExperimentCheckpoints(cluster, exp, "CHECKPOINT_STATE_COMPLETED")) {
    const std::string uuid = c.value("uuid", "");
    SCOPED_TRACE("checkpoint " + uuid);
    EXPECT_EQ(c.value("storage_path", ""), absl::StrCat("s3://", kBucket, "/", prefix, "/", uuid)) << c.dump();
    const std::string local = cluster.dir() / ("manifest-" + uuid + ".json");
    nlohmann::json got = Boto3Get(s3, absl::StrCat(prefix, "/", uuid, "/det-manifest.json"), local);
    if (got.empty()) continue;
    nlohmann::json manifest = nlohmann::json::parse(ReadFile(local), nullptr, false);
    EXPECT_TRUE(manifest.is_object() && manifest["files"].is_array()) << ReadFile(local);
    if (!manifest.is_object() || !manifest["files"].is_array()) continue;
    std::map<std::string, int64_t> listed, reported;
    for (const auto& f : manifest["files"]) listed[f.value("path", "")] = f.value("size", int64_t{-1});
    for (const auto& [path, size] : c["resources"].items()) reported[path] = JsonInt(size);
    EXPECT_EQ(listed, reported) << "the manifest's files are the master's resources: " << c.dump();
    out[uuid] = manifest;
  }
  return out;
}

// The keys (with sizes) the checkpoints `manifests` are made of: each file
// and the manifest itself.
inline std::map<std::string, int64_t> ExpectedObjects(const std::string& prefix,
                                                      const std::map<std::string, nlohmann::json>& manifests) {
  std::map<std::string, int64_t> out;
  for (const auto& [uuid, manifest] : manifests) {
    for (const auto& f : manifest["files"]) {
      out[absl::StrCat(prefix, "/", uuid, "/", f.value("path", ""))] = f.value("size", int64_t{-1});
    }
    out[absl::StrCat(prefix, "/", uuid, "/det-manifest.json")] = -1;  // its size: whatever boto3 says
  }
  return out;
}

// Checks that the bucket holds under `prefix` EXACTLY the objects of the
// experiment's COMPLETED checkpoints (files with the manifest's sizes, and
// each manifest), as boto3 lists them.
inline void ExpectBucketHoldsExactlyTheCompletedCheckpoints(TestCluster& cluster, const test::S3Server& s3, int exp,
                                                            const std::string& prefix) {
  const auto manifests = CompletedManifests(cluster, s3, exp, prefix);
  const auto expected = ExpectedObjects(prefix, manifests);
  const auto listed = Boto3List(s3, prefix);
  std::vector<std::string> extra, missing;
  for (const auto& [key, o] : listed) {
    auto it = expected.find(key);
    if (it == expected.end()) {
      extra.push_back(key);
    } else if (it->second >= 0) {
      EXPECT_EQ(JsonInt(o["size"]), it->second) << key << ": boto3's size is not the manifest's";
    }
  }
  for (const auto& [key, size] : expected) {
    if (listed.count(key) == 0) missing.push_back(key);
  }
  EXPECT_TRUE(extra.empty()) << extra.size() << " object(s) of no COMPLETED checkpoint (deleted or unreported): "
                             << absl::StrJoin(extra, ", ")
                             << "\nthe master's checkpoints: " << ExperimentCheckpoints(cluster, exp).dump();
  EXPECT_TRUE(missing.empty()) << missing.size() << " object(s) of COMPLETED checkpoints missing: "
                               << absl::StrJoin(missing, ", ");
}

// Every file of `manifest` (checkpoint `uuid`) as boto3 gets it, with the
// manifest's MD5 checked: relative path -> bytes.
inline std::map<std::string, std::string> Boto3CheckpointFiles(const test::S3Server& s3, const TempDir& dir,
                                                               const std::string& prefix, const std::string& uuid,
                                                               const nlohmann::json& manifest) {
  std::map<std::string, std::string> out;
  int n = 0;
  for (const auto& f : manifest["files"]) {
    const std::string path = f.value("path", "");
    const std::string local = dir / absl::StrCat("boto3-", uuid, "-", n++);
    nlohmann::json got = Boto3Get(s3, absl::StrCat(prefix, "/", uuid, "/", path), local);
    EXPECT_EQ(got.value("md5", ""), f.value("md5", "x")) << path;
    EXPECT_EQ(JsonInt(got.value("size", nlohmann::json(-1))), f.value("size", int64_t{-2})) << path;
    out[path] = ReadFile(local);
  }
  return out;
}

// A master with --s3-credentials-file naming one profile "default" at the
// test's s3rver (for `workspaces`), and one agent of `slots` slots.
struct S3Cluster {
  // Starts nothing when s3rver does not start (a test failure).
  TempDir dir;
  std::unique_ptr<test::S3Server> s3;
  std::unique_ptr<TestCluster> cluster;
  std::string credentials_file;
  pid_t agent_pid = 0;

  explicit S3Cluster(int slots, const std::string& workspaces = "*") {
    std::filesystem::create_directories(dir / "s3");
    auto server = test::S3Server::Start(dir / "s3");
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return;
    s3 = std::move(*server);
    const std::string creds = WriteProfiles(dir, "s3-credentials", *s3, {{"default", s3->endpoint_url(), workspaces}});
    credentials_file = creds;
    cluster = std::make_unique<TestCluster>(
        dir, TestClusterOptions()
                 .add_master_flags({"--s3-credentials-file", creds})
                 .set_cli_timeout(std::chrono::minutes(3))
                 .set_http_read_timeout(std::chrono::seconds(60)));
    agent_pid = cluster->StartAgent("a", AgentOptions().set_slots(slots)).pid();
    EXPECT_TRUE(PollUntil([&] { return cluster->ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  }
};

}  // namespace det::testing

#endif  // DET_TESTS_S3_E2E_H_
