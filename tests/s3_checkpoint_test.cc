// End-to-end tests of S3 checkpoint storage (issue 49, must-show 1 and 4) on
// real det-master, det-agent and det-trial processes, against npm's s3rver
// on loopback (tests/s3_harness.h) and checked with Debian's boto3, never
// with det-cpp's own S3 client.
//
// The example search is examples/synthetic/random.yaml (4 trials, 2 at a
// time, 200 batches each): its whole search runs in well under a minute on
// 2 cores, where fashion_mnist's would take several, and it has everything a
// resumed run must restore (dropout RNG, Adam state, LR scheduler, shuffled
// loader, a stateful callback), so bit-exact resumed metrics mean the
// checkpoint came back from S3 whole. A test-only batch_delay_ms of 10 lets
// the pause land mid-training; OMP_NUM_THREADS=1 makes every process compute
// the same bits.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tests/s3_e2e.h"
#include "tests/s3_harness.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using json = nlohmann::json;

constexpr auto kLong = std::chrono::minutes(3);

// examples/synthetic/random.yaml named `name`, with batch_delay_ms 10, a
// checkpoint every 50 batches, S3 storage under `prefix` with a GC policy
// that keeps each trial's best and latest, and one torch thread.
std::string ExampleSearch(const std::string& name, const std::string& prefix) {
  std::string yaml = ReadFile(std::string(DET_SOURCE_DIR) + "/examples/synthetic/random.yaml");
  EXPECT_THAT(yaml, HasSubstr("name: synthetic-random\n"));
  EXPECT_THAT(yaml, HasSubstr("\nhyperparameters:\n"));
  // Two passes: in one, the name's newline is consumed and
  // "\nhyperparameters:" no longer matches (the trials then ran undelayed
  // and could finish before the test paused them).
  absl::StrReplaceAll({{"name: synthetic-random\n", absl::StrCat("name: ", name, "\n")}}, &yaml);
  absl::StrReplaceAll({{"\nhyperparameters:\n", "\nhyperparameters:\n  batch_delay_ms: 10\n"}}, &yaml);
  EXPECT_THAT(yaml, HasSubstr("\n  batch_delay_ms: 10\n"));
  absl::StrAppend(&yaml, "min_checkpoint_period:\n  batches: 50\n",
                  S3Storage(prefix, "default",
                            "  save_experiment_best: 0\n  save_trial_best: 1\n  save_trial_latest: 1\n"),
                  "environment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n");
  return yaml;
}

// A one-trial synthetic experiment whose model is ~9.5 MiB and optimizer
// state ~19 MiB (hidden_size 131072 on 16 features): both files are larger
// than the 8 MiB part size, so they go up in parts.
std::string BigModel(const std::string& name, const std::string& prefix, int batches) {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 131072
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: )", batches, R"(
min_validation_period:
  batches: )", batches, R"(
scheduling_unit: 10
reproducibility:
  experiment_seed: 3
)", S3Storage(prefix), R"(environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 128
  val_size: 32
)");
}

// Each trial of `a` (by request id) has the hparams, seed and every training
// and validation metric of its twin in `b`, bit for bit.
void ExpectSameMetrics(TestCluster& cluster, int a, int b) {
  auto ta = cluster.Trials(a);
  auto tb = cluster.Trials(b);
  ASSERT_EQ(ta.size(), tb.size());
  std::map<int, json> by_request;
  for (const auto& t : tb) by_request[t.value("request_id", 0)] = t;
  for (const auto& t : ta) {
    const json& other = by_request[t.value("request_id", 0)];
    ASSERT_TRUE(other.is_object());
    EXPECT_EQ(t["hparams"], other["hparams"]);
    EXPECT_EQ(t["seed"], other["seed"]);
    for (const char* group : {"validation", "training"}) {
      auto ma = cluster.Metrics(t["id"].get<int>(), group);
      auto mb = cluster.Metrics(other["id"].get<int>(), group);
      ASSERT_EQ(ma.size(), mb.size()) << group;
      ASSERT_FALSE(ma.empty()) << group;
      for (size_t i = 0; i < ma.size(); ++i) {
        EXPECT_EQ(ma[i]["total_batches"], mb[i]["total_batches"]) << group;
        // Doubles in protobuf's JSON round-trip exactly: bitwise equality.
        EXPECT_EQ(ma[i]["metrics"], mb[i]["metrics"]) << group << " at batch " << ma[i]["total_batches"];
      }
    }
  }
}

// Pauses experiment `exp` once both of its running trials passed batch 20;
// true when both are PAUSED with a checkpoint and no slot is busy.
bool PauseMidTraining(TestCluster& cluster, int exp) {
  const bool running = PollUntil(
      [&] {
        auto trials = cluster.Trials(exp);
        if (trials.size() != 2) return false;
        for (const auto& t : trials) {
          if (JsonInt(t.value("total_batches_processed", json(0))) < 20) return false;
        }
        return true;
      },
      kLong);
  EXPECT_TRUE(running) << cluster.Trials(exp).dump();
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"experiment", "pause", std::to_string(exp)}, &out, &err), 0) << err;
  const bool paused = PollUntil(
      [&] {
        auto trials = cluster.Trials(exp);
        for (const auto& t : trials) {
          if (t.value("state", "") != "STATE_PAUSED" || t.value("latest_checkpoint_uuid", "").empty()) return false;
        }
        return trials.size() == 2 && cluster.BusySlots() == 0;
      },
      std::chrono::minutes(1));
  EXPECT_TRUE(paused) << cluster.Trials(exp).dump() << cluster.MasterLog();
  return running && paused;
}

// det-cli checkpoint download UUID -o DIR and the REST tar of `uuid` give
// exactly the files boto3 gets from the bucket (each MD5-checked against the
// manifest).
void ExpectDownloadsEqualBoto3(S3Cluster& c, const std::string& prefix, const std::string& uuid,
                               const json& manifest) {
  SCOPED_TRACE("download of " + uuid);
  TestCluster& cluster = *c.cluster;
  const auto from_boto3 = Boto3CheckpointFiles(*c.s3, c.dir, prefix, uuid, manifest);
  ASSERT_FALSE(from_boto3.empty());
  std::string out, err;
  const std::string got_dir = c.dir / ("cli-" + uuid);
  ASSERT_EQ(cluster.Cli({"checkpoint", "download", uuid, "-o", got_dir}, &out, &err), 0) << out << err;
  EXPECT_THAT(out, HasSubstr("Downloaded checkpoint " + uuid));
  EXPECT_TRUE(FilesUnder(got_dir) == from_boto3) << "det-cli checkpoint download differs from boto3";

  auto res = cluster.Http("GET", absl::StrCat("/api/v1/checkpoints/", uuid, "/download"),
                          {{"Authorization", "Bearer " + cluster.Token()}}, "");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/x-tar");
  const std::string tar = c.dir / ("rest-" + uuid + ".tar");
  const std::string untar = c.dir / ("untar-" + uuid);
  WriteFile(tar, res->body);
  fs::create_directories(untar);
  ASSERT_EQ(RunProcess({"/usr/bin/tar", "-xf", tar, "-C", untar}, &out, &err), 0) << err;
  EXPECT_TRUE(FilesUnder(untar) == from_boto3) << "the REST tar differs from boto3";
}

// Must show 1: the example search with S3 storage, paused mid-training and
// activated, resumes bit-exactly (the same metrics as an uninterrupted run
// of the same seed); boto3 lists exactly the objects of the checkpoints the
// master has not deleted (GC deleted the others' objects); det-cli and REST
// downloads equal boto3's bytes; deleting the remaining checkpoints (and the
// other experiment) removes their objects.
TEST(S3CheckpointE2ETest, ExampleSearchPausesResumesAndKeepsTheBucketExact) {
  S3Cluster c(/*slots=*/2);
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  const int paused = cluster.CreateExperiment(ExampleSearch("s3-paused", "runs/paused"), "paused");
  ASSERT_GT(paused, 0);
  ASSERT_TRUE(PauseMidTraining(cluster, paused));
  // While paused: each trial's latest checkpoint is in the bucket, whole.
  for (const auto& t : cluster.Trials(paused)) {
    const std::string uuid = t.value("latest_checkpoint_uuid", "");
    EXPECT_EQ(Boto3List(*c.s3, "runs/paused/" + uuid).count("runs/paused/" + uuid + "/det-manifest.json"), 1u)
        << "paused trial " << t.value("id", 0) << "'s checkpoint " << uuid << " has no manifest in the bucket";
  }
  ExpectBucketHoldsExactlyTheCompletedCheckpoints(cluster, *c.s3, paused, "runs/paused");

  int status = 0;
  cluster.Send("POST", absl::StrCat("/api/v1/experiments/", paused, "/activate"), "{}", &status);
  EXPECT_EQ(status, 200);
  const int straight = cluster.CreateExperiment(ExampleSearch("s3-straight", "runs/straight"), "straight");
  ASSERT_GT(straight, 0);
  ASSERT_TRUE(cluster.WaitForState(paused, "STATE_COMPLETED", kLong)) << cluster.Trials(paused).dump()
                                                                        << cluster.MasterLog();
  ASSERT_TRUE(cluster.WaitForState(straight, "STATE_COMPLETED", kLong)) << cluster.MasterLog();
  for (const auto& t : cluster.Trials(paused)) {
    EXPECT_EQ(t.value("state", ""), "STATE_COMPLETED") << t.dump();
    EXPECT_EQ(t.value("restarts", 0), 0) << "a pause is not a restart: " << t.dump();
  }
  ExpectSameMetrics(cluster, paused, straight);

  // GC deleted some checkpoints (each trial keeps its best and latest);
  // the bucket holds exactly the others.
  for (int exp : {paused, straight}) {
    SCOPED_TRACE(absl::StrCat("experiment ", exp));
    const std::string prefix = exp == paused ? "runs/paused" : "runs/straight";
    EXPECT_FALSE(ExperimentCheckpoints(cluster, exp, "CHECKPOINT_STATE_DELETED").empty())
        << ExperimentCheckpoints(cluster, exp).dump();
    ExpectBucketHoldsExactlyTheCompletedCheckpoints(cluster, *c.s3, exp, prefix);
  }

  const auto manifests = CompletedManifests(cluster, *c.s3, paused, "runs/paused");
  ASSERT_FALSE(manifests.empty());
  ExpectDownloadsEqualBoto3(c, "runs/paused", manifests.begin()->first, manifests.begin()->second);

  // det-cli checkpoint delete of every remaining checkpoint empties the prefix.
  std::vector<std::string> args = {"checkpoint", "delete"};
  for (const auto& [uuid, m] : manifests) args.push_back(uuid);
  args.push_back("--yes");
  std::string out, err;
  ASSERT_EQ(cluster.Cli(args, &out, &err), 0) << err;
  EXPECT_TRUE(Boto3List(*c.s3, "runs/paused").empty()) << json(Boto3List(*c.s3, "runs/paused")).dump();
  EXPECT_TRUE(ExperimentCheckpoints(cluster, paused, "CHECKPOINT_STATE_COMPLETED").empty());
  // Deleting the other experiment deletes its objects (only under its prefix).
  ASSERT_FALSE(Boto3List(*c.s3, "runs/straight").empty());
  auto deleted = cluster.Http("DELETE", absl::StrCat("/api/v1/experiments/", straight),
                              {{"Authorization", "Bearer " + cluster.Token()}}, "");
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200) << deleted->body;
  EXPECT_TRUE(PollUntil([&] { return Boto3List(*c.s3, "runs/straight").empty(); }, std::chrono::minutes(1)))
      << json(Boto3List(*c.s3, "runs/straight")).dump() << cluster.MasterLog();
}

// N of an ETag "<md5>-N" (an object uploaded in N parts), else 0.
int EtagParts(const std::string& etag) {
  const size_t dash = etag.rfind('-');
  int parts = 0;
  if (dash == std::string::npos || !absl::SimpleAtoi(etag.substr(dash + 1), &parts)) return 0;
  return parts;
}

// How many distinct parts of `key` s3rver's request log shows uploaded
// (its lines of "PUT /BUCKET/KEY?partNumber=N&uploadId=...").
int PartsInLog(const std::string& log, const std::string& key) {
  std::set<std::string> parts;
  // (s3rver's logger drops the line's first 16 characters: the method and
  // part of the bucket; only UploadPart has a partNumber.)
  const std::string target = absl::StrCat("/", key, "?partNumber=");
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    const size_t at = line.find(target);
    if (at == absl::string_view::npos) continue;
    absl::string_view n = line.substr(at + target.size());
    n = n.substr(0, n.find_first_not_of("0123456789"));
    parts.insert(std::string(n));
  }
  return static_cast<int>(parts.size());
}

// Must show 4: a checkpoint whose files are larger than the 8 MiB part size
// is uploaded in parts of 8 MiB (s3rver's log shows each part's PUT; on S3
// the ETag would be "<md5>-N"), every object's MD5 (boto3's own download)
// matches the manifest, and det-cli and REST downloads give the same bytes.
TEST(S3CheckpointE2ETest, MultipartCheckpointIsWholeInTheBucket) {
  S3Cluster c(/*slots=*/1);
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  const int exp = cluster.CreateExperiment(BigModel("s3-big", "big", 10), "big");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", kLong)) << cluster.MasterLog() << cluster.AgentLogs();
  ASSERT_EQ(ExperimentCheckpoints(cluster, exp, "CHECKPOINT_STATE_COMPLETED").size(), 1u)
      << ExperimentCheckpoints(cluster, exp).dump() << cluster.TrialLogs(cluster.Trials(exp)[0].value("id", 0));
  ExpectBucketHoldsExactlyTheCompletedCheckpoints(cluster, *c.s3, exp, "big");

  // In parts: S3 and MinIO give such an object the ETag "<md5>-N"; s3rver
  // gives the whole object's MD5, so there its request log shows the parts.
  const std::string log = c.s3->Log();
  int multipart = 0;
  for (const auto& [key, o] : Boto3List(*c.s3, "big")) {
    if (JsonInt(o["size"]) <= int64_t{8} << 20) continue;
    const std::string etag = o.value("etag", "");
    const int parts = std::max(EtagParts(etag), PartsInLog(log, key));
    EXPECT_EQ(parts, (JsonInt(o["size"]) + (int64_t{8} << 20) - 1) / (int64_t{8} << 20)) << key << " " << etag;
    multipart += parts >= 2;
  }
  EXPECT_GE(multipart, 2) << "model and optimizer files in parts: " << json(Boto3List(*c.s3, "big")).dump()
                          << "\ns3rver's log:\n" << log.substr(0, 20000);

  const auto manifests = CompletedManifests(cluster, *c.s3, exp, "big");
  ASSERT_EQ(manifests.size(), 1u);
  ExpectDownloadsEqualBoto3(c, "big", manifests.begin()->first, manifests.begin()->second);
}

// det-cli experiment continue of a COMPLETED S3 experiment: the trial
// downloads its last checkpoint from the bucket, resumes at its batch and
// trains on to the new length; its new checkpoints land under the same
// prefix and the bucket again holds exactly the COMPLETED checkpoints.
TEST(S3CheckpointE2ETest, ContinueResumesFromTheLastCheckpointInTheBucket) {
  S3Cluster c(/*slots=*/1);
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  const std::string yaml = absl::StrCat(R"(name: s3-continue
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 20
min_checkpoint_period:
  batches: 10
scheduling_unit: 10
reproducibility:
  experiment_seed: 3
)", S3Storage("cont"), R"(environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 128
  val_size: 32
)");
  const int exp = cluster.CreateExperiment(yaml, "cont");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", kLong)) << cluster.MasterLog() << cluster.AgentLogs();
  const json t = cluster.Trials(exp)[0];
  const int64_t trial = t["id"].get<int64_t>();
  const std::string last = t.value("latest_checkpoint_uuid", "");
  ASSERT_FALSE(last.empty()) << t.dump();
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"experiment", "continue", std::to_string(exp), "--max-length", "40"}, &out, &err), 0)
      << out << err;
  ASSERT_TRUE(PollUntil([&] { return JsonInt(cluster.Trial(trial).value("total_batches_processed", json(0))) == 40; },
                        kLong))
      << cluster.Trial(trial).dump() << cluster.TrialLogs(trial);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", kLong)) << cluster.MasterLog();
  const std::string url = absl::StrCat("s3://", kBucket, "/cont/", last);
  const std::string logs = cluster.TrialLogs(trial);
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("[det-trial] checkpoint ", url, " downloaded"))) << logs;
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("resumed from checkpoint ", url, " at batch 20"))) << logs;
  EXPECT_NE(cluster.Trial(trial).value("latest_checkpoint_uuid", ""), last);
  ExpectBucketHoldsExactlyTheCompletedCheckpoints(cluster, *c.s3, exp, "cont");
}

// A PBT child restores its parent's checkpoint from the bucket: its log
// shows the download of s3://det-test/pbt/<parent_checkpoint_uuid> and the
// resume from it, and that checkpoint is the parent's.
TEST(S3CheckpointE2ETest, PbtChildrenStartFromTheParentsCheckpointInTheBucket) {
  S3Cluster c(/*slots=*/2);
  ASSERT_TRUE(c.cluster);
  TestCluster& cluster = *c.cluster;
  const std::string yaml = absl::StrCat(R"(name: s3-pbt
hyperparameters:
  global_batch_size: 16
  learning_rate:
    type: log
    minval: -3
    maxval: -1
  hidden_size: 16
  dropout: 0.1
searcher:
  name: pbt
  population_size: 4
  perturb_period: 20
  burn_in_period: 0
  truncate_fraction: 0.25
  resample_probability: 0
  perturb_factors: [1.0]
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 40
min_validation_period:
  batches: 20
scheduling_unit: 10
reproducibility:
  experiment_seed: 5
)", S3Storage("pbt"), R"(environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
)");
  const int exp = cluster.CreateExperiment(yaml, "pbt");
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", kLong)) << cluster.MasterLog() << cluster.AgentLogs();
  int children = 0;
  for (const json& t : cluster.Trials(exp)) {
    const int64_t parent = JsonInt(t.value("parent_trial_id", json(0)));
    if (parent == 0) continue;
    ++children;
    const std::string uuid = t.value("parent_checkpoint_uuid", "");
    ASSERT_FALSE(uuid.empty()) << t.dump();
    bool parents = false;
    for (const json& ck : ExperimentCheckpoints(cluster, exp)) {
      if (ck.value("uuid", "") == uuid) parents = JsonInt(ck["trial_id"]) == parent;
    }
    EXPECT_TRUE(parents) << uuid << " is not trial " << parent << "'s: " << ExperimentCheckpoints(cluster, exp).dump();
    const std::string url = absl::StrCat("s3://", kBucket, "/pbt/", uuid);
    const std::string logs = cluster.TrialLogs(JsonInt(t["id"]));
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("[det-trial] checkpoint ", url, " downloaded"))) << logs;
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("resumed from checkpoint ", url, " at batch 20"))) << logs;
  }
  EXPECT_GE(children, 1) << cluster.Trials(exp).dump();
}

}  // namespace
}  // namespace det::testing
