// The trial runtime on S3 checkpoint storage, end to end (issue 49): a real
// det-master (--s3-credentials-file), det-agent and det-trial against npm's
// s3rver on loopback. A paused trial's checkpoint is in the bucket (checked
// with boto3: every file and the manifest), the agent's node keeps no copy,
// and activating resumes it from S3 to COMPLETED; a 2-rank experiment
// warm-starts from its last checkpoint, each rank downloading it. The full must-show tests
// (bit-exact metrics, GC, downloads, faults, secrets) are in
// s3_checkpoint_test.cc, s3_fault_test.cc and s3_secrets_test.cc.
#include <filesystem>
#include <map>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/s3_harness.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
namespace fs = std::filesystem;

const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";
constexpr auto kLong = std::chrono::seconds(120);

int64_t Int(const json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());  // int64 in protobuf's JSON mapping
  return v.is_number() ? v.get<int64_t>() : 0;
}

// One trial of the synthetic example, checkpoints in bucket det-test under
// prefix `prefix` (the endpoint and the credentials are the profile's);
// `extra` is appended (e.g. a warm start's source and slots_per_trial).
std::string Config(const std::string& prefix, const std::string& extra = "") {
  return absl::StrCat(
      "name: s3-smoke\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 16\n"
      "  dropout: 0.1\n  batch_delay_ms: 15\n"
      "searcher:\n  name: single\n  metric: validation_loss\n  smaller_is_better: true\n"
      "  max_length:\n    batches: 100\nmin_validation_period:\n  batches: 25\nscheduling_unit: 10\n"
      "checkpoint_storage:\n  type: s3\n  bucket: det-test\n  prefix: ",
      prefix,
      "\nreproducibility:\n  experiment_seed: 7\n"
      "environment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
      "data:\n  train_size: 256\n  val_size: 64\n", extra);
}

// key -> size of every object under `prefix`, as boto3 lists them.
std::map<std::string, int64_t> Objects(const test::S3Server& s3, const std::string& prefix) {
  std::map<std::string, int64_t> out;
  auto listed = test::RunBoto3(s3, {"list", "det-test", prefix});
  EXPECT_TRUE(listed.ok()) << listed.status();
  if (!listed.ok()) return out;
  for (const auto& o : *listed) out[o.at("key").get<std::string>()] = o.at("size").get<int64_t>();
  return out;
}

// Files det-trial left on the agent's node that look like a checkpoint's.
std::vector<std::string> CheckpointFilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& [path, bytes] : FilesUnder(dir)) {
    if (absl::EndsWith(path, ".pt") || absl::EndsWith(path, "callbacks.json")) out.push_back(path);
  }
  return out;
}

TEST(S3RuntimeSmokeTest, PausedTrialsCheckpointIsInTheBucketAndActivateResumesFromIt) {
  TempDir dir;
  fs::create_directories(dir / "s3");
  auto s3 = test::S3Server::Start(dir / "s3");
  ASSERT_TRUE(s3.ok()) << s3.status();
  const std::string credentials = test::WriteS3CredentialsFile(dir.path(), **s3);
  TestCluster cluster(dir, TestClusterOptions().add_master_flags({"--s3-credentials-file", credentials}));
  cluster.StartAgent("a", AgentOptions().set_slots(2));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));

  const int exp = cluster.CreateExperiment(Config("smoke/exp"), "smoke", kSynthetic);
  ASSERT_GT(exp, 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        json trials = cluster.Trials(exp);
        return trials.size() == 1 && Int(trials[0].value("total_batches_processed", json(0))) >= 30;
      },
      kLong))
      << cluster.Trials(exp).dump() << cluster.MasterLog();
  std::string err;
  ASSERT_EQ(cluster.Cli({"experiment", "pause", std::to_string(exp)}, nullptr, &err), 0) << err;
  ASSERT_TRUE(PollUntil([&] { return cluster.ExperimentState(exp) == "STATE_PAUSED" && cluster.BusySlots() == 0; },
                        std::chrono::seconds(60)))
      << cluster.Trials(exp).dump() << cluster.MasterLog();

  // The pause's checkpoint: recorded as its s3:// URL, every file and the
  // manifest in the bucket (boto3), no copy left on the agent's node.
  const json trial = cluster.Trials(exp)[0];
  const int64_t trial_id = Int(trial["id"]);
  const std::string uuid = trial.value("latest_checkpoint_uuid", "");
  ASSERT_FALSE(uuid.empty()) << trial.dump();
  const json ck = cluster.Get("/api/v1/checkpoints/" + uuid)["checkpoint"];
  const std::string key_prefix = "smoke/exp/" + uuid + "/";
  EXPECT_EQ(ck.value("storage_path", ""), "s3://det-test/" + key_prefix.substr(0, key_prefix.size() - 1)) << ck.dump();
  const int64_t paused_at = Int(ck["total_batches"]);
  EXPECT_GE(paused_at, 30) << ck.dump();
  std::map<std::string, int64_t> objects = Objects(**s3, key_prefix);
  EXPECT_EQ(objects.count(key_prefix + "det-manifest.json"), 1u);
  EXPECT_EQ(objects.count(key_prefix + "metadata.json"), 1u);
  ASSERT_TRUE(ck["resources"].is_object()) << ck.dump();
  for (const auto& [file, size] : ck["resources"].items()) {
    EXPECT_EQ(objects[key_prefix + file], Int(size)) << file;
  }
  const std::string logs = cluster.TrialLogs(trial_id);
  EXPECT_THAT(logs, HasSubstr("checkpoint " + uuid + " uploaded to s3://det-test/" + key_prefix.substr(0, key_prefix.size() - 1)));
  EXPECT_THAT(CheckpointFilesUnder(dir / "agent-a"), ::testing::IsEmpty());

  int status = 0;
  cluster.Send("POST", absl::StrCat("/api/v1/experiments/", exp, "/activate"), "{}", &status);
  EXPECT_EQ(status, 200);
  ASSERT_TRUE(cluster.WaitForState(exp, "STATE_COMPLETED", kLong)) << cluster.Trials(exp).dump() << cluster.MasterLog();
  const json done = cluster.Trials(exp)[0];
  EXPECT_EQ(done.value("restarts", 0), 0) << done.dump();
  // Resumed from the paused checkpoint in S3, not from batch 0: one training
  // row per 10 batches, each once.
  EXPECT_THAT(cluster.TrialLogs(trial_id),
              HasSubstr(absl::StrCat("resumed from checkpoint s3://det-test/smoke/exp/", uuid, " at batch ", paused_at)));
  const json rows = cluster.Metrics(static_cast<int>(trial_id), "training");
  ASSERT_EQ(rows.size(), 10u) << rows.dump();
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(Int(rows[i]["total_batches"]), 10 * static_cast<int64_t>(i + 1));
  // The final checkpoint is in the bucket too; nothing stays on the node.
  const std::string last = cluster.Trials(exp)[0].value("latest_checkpoint_uuid", "");
  EXPECT_EQ(Objects(**s3, "smoke/exp/" + last + "/").count("smoke/exp/" + last + "/det-manifest.json"), 1u);
  EXPECT_THAT(CheckpointFilesUnder(dir / "agent-a"), ::testing::IsEmpty());

  // A 2-rank experiment warm-started from that checkpoint: each rank
  // downloads it (the credentials for the source's path) and loads its
  // weights; its own checkpoints go under its own prefix.
  const std::string warm_yaml =
      absl::StrReplaceAll(Config("smoke/warm", "resources:\n  slots_per_trial: 2\n"),
                          {{"  name: single\n", absl::StrCat("  name: single\n  source_checkpoint_uuid: ", last, "\n")}});
  const int warm = cluster.CreateExperiment(warm_yaml, "warm", kSynthetic);
  ASSERT_GT(warm, 0);
  ASSERT_TRUE(cluster.WaitForState(warm, "STATE_COMPLETED", kLong)) << cluster.Trials(warm).dump() << cluster.MasterLog();
  const json warm_trial = cluster.Trials(warm)[0];
  const std::string warm_logs = cluster.TrialLogs(Int(warm_trial["id"]));
  const std::string source = absl::StrCat("s3://det-test/smoke/exp/", last);
  EXPECT_THAT(warm_logs, HasSubstr("warm start: model weights from checkpoint"));
  // Both ranks downloaded the source themselves.
  size_t downloads = 0;
  for (size_t at = warm_logs.find("checkpoint " + source + " downloaded"); at != std::string::npos;
       at = warm_logs.find("checkpoint " + source + " downloaded", at + 1)) {
    ++downloads;
  }
  EXPECT_EQ(downloads, 2u) << warm_logs;
  const std::string warm_last = warm_trial.value("latest_checkpoint_uuid", "");
  EXPECT_EQ(Objects(**s3, "smoke/warm/" + warm_last + "/").count("smoke/warm/" + warm_last + "/det-manifest.json"), 1u);
  EXPECT_THAT(CheckpointFilesUnder(dir / "agent-a"), ::testing::IsEmpty());
}

}  // namespace
}  // namespace det::testing
