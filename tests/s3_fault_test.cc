// The S3 fault test (issue 49, must-show 2), made deterministic: det-cpp
// reaches s3rver through tests/s3_harness.h's S3FaultProxy, which cuts the
// connection of exactly the requests that upload part k of a multipart
// upload, then lets traffic through again. boto3 (talking to s3rver
// directly) checks what is in the bucket.
//
// The trial is the synthetic example with hidden_size 131072: its model
// (~9.5 MiB) and optimizer (~19 MiB) files are larger than the 8 MiB part
// size, so every checkpoint is a multipart upload with a part 2.
#include <filesystem>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/s3_e2e.h"
#include "tests/s3_harness.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using json = nlohmann::json;

constexpr auto kLong = std::chrono::minutes(4);

// One trial of `batches` batches with a checkpoint every 20, S3 storage
// under `prefix` through `profile`, max_restarts 3.
std::string BigModel(const std::string& name, const std::string& prefix, const std::string& profile, int batches) {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 131072
  dropout: 0.1
  batch_delay_ms: 30
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: )", batches, R"(
min_validation_period:
  batches: 20
min_checkpoint_period:
  batches: 20
scheduling_unit: 10
max_restarts: 3
reproducibility:
  experiment_seed: 3
)", S3Storage(prefix, profile), R"(environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 128
  val_size: 32
)");
}

// A master whose profile "proxied" reaches s3rver through a fault proxy and
// whose profile "direct" reaches it straight; one agent of 2 slots.
struct FaultCluster {
  TempDir dir;
  std::unique_ptr<test::S3Server> s3;
  std::unique_ptr<test::S3FaultProxy> proxy;
  std::unique_ptr<TestCluster> cluster;

  FaultCluster() {
    std::filesystem::create_directories(dir / "s3");
    auto server = test::S3Server::Start(dir / "s3");
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return;
    s3 = std::move(*server);
    auto p = test::S3FaultProxy::Start(s3->port());
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return;
    proxy = std::move(*p);
    const std::string creds = WriteProfiles(
        dir, "s3-credentials", *s3, {{"proxied", proxy->endpoint_url(), "*"}, {"direct", s3->endpoint_url(), "*"}});
    cluster = std::make_unique<TestCluster>(
        dir, TestClusterOptions().add_master_flags({"--s3-credentials-file", creds}).set_cli_timeout(
                 std::chrono::minutes(3)));
    cluster->StartAgent("a", AgentOptions().set_slots(2));
    EXPECT_TRUE(PollUntil([&] { return cluster->ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  }
};

// Every checkpoint the master lists as COMPLETED has its manifest and every
// file with its size in the bucket (boto3), and every other checkpoint
// directory in the bucket (an upload that failed) has no manifest, so it is
// never restorable. Returns the uuids of those incomplete directories.
std::set<std::string> ExpectNoCompletedCheckpointMissesObjects(TestCluster& cluster, const test::S3Server& s3, int exp,
                                                               const std::string& prefix) {
  const auto manifests = CompletedManifests(cluster, s3, exp, prefix);
  const auto listed = Boto3List(s3, prefix);
  for (const auto& [key, size] : ExpectedObjects(prefix, manifests)) {
    auto it = listed.find(key);
    EXPECT_TRUE(it != listed.end()) << "a COMPLETED checkpoint misses " << key;
    if (it != listed.end() && size >= 0) {
      EXPECT_EQ(JsonInt(it->second["size"]), size) << key;
    }
  }
  std::set<std::string> known;
  for (const auto& c : ExperimentCheckpoints(cluster, exp)) known.insert(c.value("uuid", ""));
  std::set<std::string> orphans;
  for (const auto& [key, o] : listed) {
    std::vector<std::string> parts = absl::StrSplit(key.substr(prefix.size() + 1), absl::MaxSplits('/', 1));
    if (parts.size() != 2) continue;
    if (known.count(parts[0]) == 0) {
      orphans.insert(parts[0]);
      EXPECT_NE(parts[1], "det-manifest.json") << "an unreported checkpoint has a manifest: " << key;
    }
  }
  return orphans;
}

void ExpectSameMetrics(TestCluster& cluster, int a, int b) {
  auto ta = cluster.Trials(a);
  auto tb = cluster.Trials(b);
  ASSERT_EQ(ta.size(), 1u);
  ASSERT_EQ(tb.size(), 1u);
  for (const char* group : {"validation", "training"}) {
    auto ma = cluster.Metrics(ta[0]["id"].get<int>(), group);
    auto mb = cluster.Metrics(tb[0]["id"].get<int>(), group);
    ASSERT_EQ(ma.size(), mb.size()) << group;
    ASSERT_FALSE(ma.empty()) << group;
    for (size_t i = 0; i < ma.size(); ++i) {
      EXPECT_EQ(ma[i]["total_batches"], mb[i]["total_batches"]) << group;
      // Doubles in protobuf's JSON round-trip exactly: bitwise equality.
      EXPECT_EQ(ma[i]["metrics"], mb[i]["metrics"]) << group << " at batch " << ma[i]["total_batches"];
    }
  }
}

// Part 2 of the next checkpoint's multipart upload is cut more times than
// the client retries: that upload fails for good and is never reported; the
// trial restarts from its last complete checkpoint once traffic flows again,
// completes, and every metric equals an uninterrupted run's (through the
// direct profile, at the same time).
TEST(S3FaultE2ETest, APartCutPastTheRetriesFailsTheCheckpointAndTheTrialRestartsFromTheLastOne) {
  FaultCluster c;
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  // Part 2 of the first checkpoint after the first complete one (its
  // manifest PUT arms the cut inside the proxy: no race with the trial), cut
  // until the test resets the proxy; the restarted trial's checkpoints are
  // other objects, never cut.
  c.proxy->CutUploadPart(2, 1000, /*after_manifests=*/1);
  const int faulted = cluster.CreateExperiment(BigModel("faulted", "faulted", "proxied", 80), "faulted");
  const int reference = cluster.CreateExperiment(BigModel("reference", "reference", "direct", 80), "reference");
  ASSERT_GT(faulted, 0);
  ASSERT_GT(reference, 0);
  int64_t trial_id = 0;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster.Trials(faulted);
        if (trials.size() != 1) return false;
        trial_id = trials[0]["id"].get<int64_t>();
        return trials[0].value("restarts", 0) >= 1;
      },
      kLong))
      << cluster.Trials(faulted).dump() << cluster.MasterLog();
  const std::vector<std::string> manifests = c.proxy->manifest_puts();
  ASSERT_FALSE(manifests.empty());
  // "/det-test/faulted/<uuid>/det-manifest.json"
  const std::vector<std::string> segs = absl::StrSplit(manifests[0], '/');
  ASSERT_EQ(segs.size(), 5u) << manifests[0];
  const std::string first = segs[3];
  const int cuts = c.proxy->cuts();
  c.proxy->Reset();
  // The client retried the part (more than one cut), and gave up (bounded).
  EXPECT_GE(cuts, 2);
  EXPECT_LE(cuts, 20);
  const auto orphans = ExpectNoCompletedCheckpointMissesObjects(cluster, *c.s3, faulted, "faulted");
  std::printf("[ fault    ] part 2 cut %d times (the client's tries); %zu failed upload(s) left without a manifest\n",
              cuts, orphans.size());

  ASSERT_TRUE(cluster.WaitForState(faulted, "STATE_COMPLETED", kLong)) << cluster.Trials(faulted).dump()
                                                                         << cluster.TrialLogs(trial_id);
  ASSERT_TRUE(cluster.WaitForState(reference, "STATE_COMPLETED", kLong)) << cluster.MasterLog();
  const json done = cluster.Trial(trial_id);
  EXPECT_GE(done.value("restarts", 0), 1) << done.dump();
  const std::string logs = cluster.TrialLogs(trial_id);
  EXPECT_THAT(logs, ::testing::HasSubstr(absl::StrCat("resumed from checkpoint s3://", kBucket, "/faulted/", first)))
      << logs;
  // No COMPLETED checkpoint misses an object; the failed upload left no
  // manifest (its directory, if any, is not a checkpoint).
  ExpectNoCompletedCheckpointMissesObjects(cluster, *c.s3, faulted, "faulted");
  for (const auto& ck : ExperimentCheckpoints(cluster, faulted)) {
    EXPECT_NE(ck.value("state", ""), "CHECKPOINT_STATE_ERROR") << ck.dump();
  }
  // Nothing lost: the restarted trial trained exactly what an uninterrupted
  // run did.
  ExpectSameMetrics(cluster, faulted, reference);
}

// One cut of part 2 is retried: the checkpoint completes (boto3 verifies
// every object's MD5 against the manifest) and the trial never restarts.
TEST(S3FaultE2ETest, ASingleCutPartIsRetriedAndTheCheckpointCompletes) {
  FaultCluster c;
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  c.proxy->CutUploadPart(2, 1);
  const int exp = cluster.CreateExperiment(BigModel("retried", "retried", "proxied", 20), "retried");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", kLong)) << cluster.MasterLog() << cluster.AgentLogs();
  EXPECT_EQ(c.proxy->cuts(), 1);
  const json t = cluster.Trials(exp)[0];
  EXPECT_EQ(t.value("restarts", 0), 0) << t.dump();
  ExpectBucketHoldsExactlyTheCompletedCheckpoints(cluster, *c.s3, exp, "retried");
  const auto manifests = CompletedManifests(cluster, *c.s3, exp, "retried");
  ASSERT_EQ(manifests.size(), 1u);
  const auto files = Boto3CheckpointFiles(*c.s3, c.dir, "retried", manifests.begin()->first, manifests.begin()->second);
  EXPECT_GE(files.size(), 3u);
}

}  // namespace
}  // namespace det::testing
