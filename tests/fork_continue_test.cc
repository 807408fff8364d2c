// End-to-end tests of forking and continuing experiments, warm starts from
// a checkpoint, and pausing one trial while its sibling trains, on real
// det-master, det-agent and det-trial processes running the synthetic
// example.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";
constexpr auto kLong = std::chrono::seconds(180);

int64_t Int(const json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());  // int64 in protobuf's JSON mapping
  if (v.is_number()) return v.get<int64_t>();
  return 0;
}

// A synthetic experiment: `searcher` single (hp fixed) or random (2 trials).
std::string Yaml(const std::string& checkpoint_dir, int max_length, int validation_period,
                 const std::string& extra_hparams = "", const std::string& extra_searcher = "",
                 const std::string& searcher = "single", int batch_delay_ms = 5) {
  std::string hp = searcher == "single" ? "  learning_rate: 0.01\n  hidden_size: 16\n"
                                        : "  learning_rate:\n    type: log\n    minval: -3\n    maxval: -1\n"
                                          "  hidden_size: 16\n";
  return absl::StrCat("name: fork-test\nhyperparameters:\n  global_batch_size: 16\n", hp, extra_hparams,
                      "  dropout: 0.1\n  batch_delay_ms: ", batch_delay_ms, "\nsearcher:\n  name: ", searcher,
                      "\n  metric: validation_loss\n  smaller_is_better: true\n",
                      searcher == "single" ? "" : "  max_trials: 2\n", extra_searcher,
                      "  max_length:\n    batches: ", max_length, "\nmin_validation_period:\n  batches: ",
                      validation_period, "\nscheduling_unit: 10\ncheckpoint_storage:\n  type: shared_fs\n  host_path: ",
                      checkpoint_dir, "\nreproducibility:\n  experiment_seed: 3\n",
                      "environment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
                      "data:\n  train_size: 256\n  val_size: 64\n");
}

// The trial's metric rows of `group`, archived ones too when `archived`.
json MetricRows(TestCluster& cluster, int64_t trial_id, const std::string& group, bool archived = false) {
  auto m = cluster.Get(absl::StrCat("/api/v1/trials/", trial_id, "/metrics?group=", group,
                                    archived ? "&include_archived=true" : ""));
  if (!m.is_object() || !m.contains("metrics")) return json::array();
  return m["metrics"];
}

std::vector<int64_t> Batches(const json& rows) {
  std::vector<int64_t> out;
  for (const auto& r : rows) out.push_back(Int(r["total_batches"]));
  return out;
}

bool StrictlyIncreasing(const std::vector<int64_t>& v) {
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] <= v[i - 1]) return false;
  }
  return true;
}

// A token of a new non-admin user `name` (created by the admin), "" on failure.
std::string OtherUserToken(TestCluster& cluster, const std::string& name) {
  auto admin = cluster.Http("POST", "/api/v1/auth/login", {}, R"({"username": "admin", "password": ""})");
  if (!admin || admin->status != 200) return "";
  std::string admin_token = json::parse(admin->body, nullptr, false).value("token", "");
  auto created = cluster.Http("POST", "/api/v1/PostUser", {{"Authorization", "Bearer " + admin_token}},
                              absl::StrCat(R"({"user": {"username": ")", name, R"(", "active": true}, "password": "pw"})"));
  if (!created || created->status != 200) return "";
  auto login = cluster.Http("POST", "/api/v1/auth/login", {},
                            absl::StrCat(R"({"username": ")", name, R"(", "password": "pw"})"));
  if (!login || login->status != 200) return "";
  return json::parse(login->body, nullptr, false).value("token", "");
}

class ForkContinueTest : public ::testing::Test {
 protected:
  void StartAgent(int slots) {
    cluster_.StartAgent("a", AgentOptions().set_slots(slots));
    ASSERT_TRUE(PollUntil([&] { return cluster_.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  }
  std::string CheckpointDir() const { return dir_ / "checkpoints"; }
  json Experiment(int id) { return cluster_.Get(absl::StrCat("/api/v1/experiments/", id))["experiment"]; }

  TempDir dir_;
  TestCluster cluster_{dir_};
};

TEST_F(ForkContinueTest, ForkWithOverridesRecordsItsParentAndWarmStartLoadsTheSourceWeights) {
  StartAgent(1);
  const int parent = cluster_.CreateExperiment(Yaml(CheckpointDir(), 40, 20), "parent", kSynthetic);
  ASSERT_GT(parent, 0);
  ASSERT_TRUE(cluster_.WaitForState(parent, "STATE_COMPLETED", kLong)) << cluster_.MasterLog();
  const json parent_trial = cluster_.Trials(parent)[0];
  const int64_t parent_trial_id = Int(parent_trial["id"]);

  // Fork: the overrides are deep-merged (searcher.max_length replaced, the
  // rest of searcher kept) and the parent is recorded.
  WriteFile(dir_ / "overrides.yaml", "name: forked\nsearcher:\n  max_length:\n    batches: 20\n");
  std::string out, err;
  ASSERT_EQ(cluster_.Cli({"experiment", "fork", std::to_string(parent), "--config", dir_ / "overrides.yaml"}, &out,
                         &err),
            0)
      << out << err;
  auto pos = out.find("Forked experiment ");
  ASSERT_NE(pos, std::string::npos) << out;
  const int child = std::atoi(out.c_str() + pos + 18);
  ASSERT_GT(child, 0);
  json e = Experiment(child);
  EXPECT_EQ(Int(e["parent_id"]), parent) << e.dump();
  EXPECT_EQ(e.value("name", ""), "forked");
  EXPECT_EQ(e.value("searcher_metric", ""), "validation_loss") << "merged, not replaced: " << e.dump();
  EXPECT_EQ(e["trial_so"].value("sha256", ""), Experiment(parent)["trial_so"].value("sha256", "x"));
  EXPECT_EQ(Int(Experiment(parent)["parent_id"]), 0);
  ASSERT_TRUE(cluster_.WaitForState(child, "STATE_COMPLETED", kLong)) << cluster_.MasterLog();
  EXPECT_EQ(Int(cluster_.Trials(child)[0]["total_batches_processed"]), 20);

  // A merged config is validated like any other.
  WriteFile(dir_ / "bad.yaml", "searcher:\n  max_length:\n    batches: 0\n");
  EXPECT_EQ(cluster_.Cli({"experiment", "fork", std::to_string(parent), "--config", dir_ / "bad.yaml"}, &out, &err),
            1);
  EXPECT_THAT(err, HasSubstr("searcher.max_length"));
  EXPECT_EQ(cluster_.Cli({"experiment", "fork", "999"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("NOT_FOUND"));

  // Warm start: learning_rate 0 keeps the loaded weights, so the first
  // validation equals the source checkpoint's.
  const std::string uuid = parent_trial.value("latest_checkpoint_uuid", "");
  ASSERT_FALSE(uuid.empty()) << parent_trial.dump();
  auto ck = cluster_.Get("/api/v1/checkpoints/" + uuid)["checkpoint"];
  const int64_t ck_batches = Int(ck["total_batches"]);
  double source_loss = -1;
  for (const auto& r : MetricRows(cluster_, parent_trial_id, "validation")) {
    if (Int(r["total_batches"]) == ck_batches) source_loss = r["metrics"].value("validation_loss", -2.0);
  }
  ASSERT_GE(source_loss, 0) << "no validation at the checkpoint's batch " << ck_batches;
  std::string warm = Yaml(CheckpointDir(), 10, 10, "", absl::StrCat("  source_checkpoint_uuid: ", uuid, "\n"));
  warm.replace(warm.find("learning_rate: 0.01"), 19, "learning_rate: 0.0");
  const int warmed = cluster_.CreateExperiment(warm, "warm", kSynthetic);
  ASSERT_GT(warmed, 0);
  ASSERT_TRUE(cluster_.WaitForState(warmed, "STATE_COMPLETED", kLong)) << cluster_.MasterLog();
  const int64_t warm_trial = Int(cluster_.Trials(warmed)[0]["id"]);
  json warm_val = MetricRows(cluster_, warm_trial, "validation");
  ASSERT_FALSE(warm_val.empty());
  EXPECT_EQ(Int(warm_val[0]["total_batches"]), 10) << "a warm start begins at batch 0: " << warm_val.dump();
  EXPECT_NEAR(warm_val[0]["metrics"].value("validation_loss", -3.0), source_loss, 1e-9 * std::max(1.0, source_loss))
      << warm_val.dump();

  // The same from scratch differs (the weights did come from the source).
  std::string cold = Yaml(CheckpointDir(), 10, 10);
  cold.replace(cold.find("learning_rate: 0.01"), 19, "learning_rate: 0.0");
  const int colded = cluster_.CreateExperiment(cold, "cold", kSynthetic);
  ASSERT_TRUE(cluster_.WaitForState(colded, "STATE_COMPLETED", kLong));
  json cold_val = MetricRows(cluster_, Int(cluster_.Trials(colded)[0]["id"]), "validation");
  ASSERT_FALSE(cold_val.empty());
  EXPECT_NE(cold_val[0]["metrics"].value("validation_loss", -3.0), source_loss);

  // Unknown sources are INVALID_ARGUMENT naming the field.
  WriteFile(dir_ / "bad_uuid.yaml",
            Yaml(CheckpointDir(), 10, 10, "",
                 "  source_checkpoint_uuid: 00000000-0000-4000-8000-000000000000\n"));
  EXPECT_EQ(cluster_.Cli({"experiment", "create", dir_ / "bad_uuid.yaml", kSynthetic}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("searcher.source_checkpoint_uuid"));
  EXPECT_THAT(err, HasSubstr("INVALID_ARGUMENT"));
  WriteFile(dir_ / "bad_trial.yaml", Yaml(CheckpointDir(), 10, 10, "", "  source_trial_id: 4242\n"));
  EXPECT_EQ(cluster_.Cli({"experiment", "create", dir_ / "bad_trial.yaml", kSynthetic}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("searcher.source_trial_id"));
  // source_trial_id resolves to that trial's latest checkpoint.
  WriteFile(dir_ / "by_trial.yaml",
            Yaml(CheckpointDir(), 10, 10, "", absl::StrCat("  source_trial_id: ", parent_trial_id, "\n")));
  EXPECT_EQ(cluster_.Cli({"experiment", "create", dir_ / "by_trial.yaml", kSynthetic, "--paused"}, &out, &err), 0)
      << err;
  // While that experiment has not run, its source stays: the checkpoint
  // cannot be deleted, nor its experiment.
  const std::string parent_latest = cluster_.Trials(parent)[0].value("latest_checkpoint_uuid", "");
  ASSERT_FALSE(parent_latest.empty());
  EXPECT_NE(cluster_.Cli({"checkpoint", "delete", parent_latest, "--yes"}, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("warm-start source"));
  EXPECT_NE(cluster_.Cli({"experiment", "delete", std::to_string(parent), "--yes"}, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("warm-start source"));

  // A fork names an existing parent.
  int status = 0;
  json created = cluster_.Send("POST", "/api/v1/experiments",
                               json{{"config_yaml", Yaml(CheckpointDir(), 10, 10)},
                                    {"trial_so_sha256", Experiment(parent)["trial_so"].value("sha256", "")},
                                    {"parent_id", "777"}}
                                   .dump(),
                               &status);
  EXPECT_EQ(status, 404) << created.dump();
}

TEST_F(ForkContinueTest, ContinueTrainsACompletedTrialFurtherOnTheSameCurve) {
  StartAgent(1);
  const int id = cluster_.CreateExperiment(Yaml(CheckpointDir(), 40, 20), "cont", kSynthetic);
  ASSERT_GT(id, 0);
  ASSERT_TRUE(cluster_.WaitForState(id, "STATE_COMPLETED", kLong)) << cluster_.MasterLog();
  const int64_t trial = Int(cluster_.Trials(id)[0]["id"]);
  const json before = MetricRows(cluster_, trial, "training");
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(Batches(before).back(), 40);

  std::string out, err;
  EXPECT_EQ(cluster_.Cli({"experiment", "continue", std::to_string(id), "--max-length", "30"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("max_length"));
  // Another user may not continue it.
  const std::string other = OtherUserToken(cluster_, "mallory");
  ASSERT_FALSE(other.empty());
  auto refused = cluster_.Http("POST", absl::StrCat("/api/v1/experiments/", id, "/continue"),
                               {{"Authorization", "Bearer " + other}}, R"({"max_length": "80"})");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403) << refused->body;

  ASSERT_EQ(cluster_.Cli({"experiment", "continue", std::to_string(id), "--max-length", "80"}, &out, &err), 0)
      << out << err;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("trial(s) ", trial)));
  // Continuing a running experiment is refused.
  if (cluster_.ExperimentState(id) == "STATE_ACTIVE") {
    EXPECT_EQ(cluster_.Cli({"experiment", "continue", std::to_string(id), "--max-length", "90"}, &out, &err), 1);
  }
  ASSERT_TRUE(cluster_.WaitForState(id, "STATE_COMPLETED", kLong)) << cluster_.MasterLog();
  const json t = cluster_.Trials(id)[0];
  EXPECT_EQ(t.value("state", ""), "STATE_COMPLETED");
  EXPECT_EQ(Int(t["total_batches_processed"]), 80);
  const std::vector<int64_t> after = Batches(MetricRows(cluster_, trial, "training"));
  EXPECT_TRUE(StrictlyIncreasing(after)) << ::testing::PrintToString(after);
  EXPECT_EQ(after.back(), 80);
  // The earlier rows are kept and nothing was archived (no gap, no repeat).
  for (int64_t b : Batches(before)) EXPECT_NE(std::find(after.begin(), after.end(), b), after.end()) << b;
  EXPECT_EQ(Batches(MetricRows(cluster_, trial, "training", /*archived=*/true)), after);
  const std::vector<int64_t> vals = Batches(MetricRows(cluster_, trial, "validation"));
  EXPECT_EQ(vals, (std::vector<int64_t>{20, 40, 60, 80}));
}

TEST_F(ForkContinueTest, PausedTrialWaitsWhileItsSiblingTrainsThenResumesWhereItStopped) {
  StartAgent(2);
  const int id = cluster_.CreateExperiment(Yaml(CheckpointDir(), 300, 100, "", "", "random", 40), "pause-one",
                                           kSynthetic);
  ASSERT_GT(id, 0);
  auto batches_of = [&](int64_t trial_id) { return Int(cluster_.Get(absl::StrCat("/api/v1/trials/", trial_id))["trial"]["total_batches_processed"]); };
  ASSERT_TRUE(PollUntil(
      [&] {
        auto trials = cluster_.Trials(id);
        if (trials.size() != 2) return false;
        for (const auto& t : trials) {
          if (Int(t["total_batches_processed"]) < 20) return false;
        }
        return true;
      },
      kLong))
      << cluster_.Trials(id).dump();
  const int64_t paused = Int(cluster_.Trials(id)[0]["id"]);
  const int64_t sibling = Int(cluster_.Trials(id)[1]["id"]);

  // Another user may not pause it.
  const std::string other = OtherUserToken(cluster_, "mallory");
  ASSERT_FALSE(other.empty());
  auto refused = cluster_.Http("POST", absl::StrCat("/api/v1/trials/", paused, "/pause"),
                               {{"Authorization", "Bearer " + other}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403) << refused->body;

  std::string out, err;
  ASSERT_EQ(cluster_.Cli({"trial", "pause", std::to_string(paused)}, &out, &err), 0) << out << err;
  ASSERT_TRUE(PollUntil(
      [&] {
        auto t = cluster_.Get(absl::StrCat("/api/v1/trials/", paused))["trial"];
        return t.value("state", "") == "STATE_PAUSED" && t.value("allocation_id", "").empty();
      },
      std::chrono::seconds(60)))
      << cluster_.Trials(id).dump();
  const int64_t paused_at = batches_of(paused);
  const int64_t sibling_at = batches_of(sibling);
  ASSERT_LT(sibling_at, 300) << "the sibling finished too early for the test";
  ASSERT_TRUE(PollUntil([&] { return batches_of(sibling) >= sibling_at + 30; }, kLong));
  EXPECT_EQ(batches_of(paused), paused_at) << "a paused trial does not train";
  EXPECT_EQ(cluster_.ExperimentState(id), "STATE_ACTIVE");
  EXPECT_EQ(cluster_.Get(absl::StrCat("/api/v1/trials/", paused))["trial"].value("state", ""), "STATE_PAUSED");

  // Wrong states are refused.
  int status = 0;
  cluster_.Send("POST", absl::StrCat("/api/v1/trials/", sibling, "/activate"), "{}", &status);
  EXPECT_EQ(status, 200) << "activating an ACTIVE trial is a no-op";
  cluster_.Send("POST", absl::StrCat("/api/v1/trials/", paused, "/activate"), "{}", &status);
  EXPECT_EQ(status, 200);
  ASSERT_TRUE(cluster_.WaitForState(id, "STATE_COMPLETED", kLong)) << cluster_.Trials(id).dump() << cluster_.MasterLog();
  for (const auto& t : cluster_.Trials(id)) {
    EXPECT_EQ(t.value("state", ""), "STATE_COMPLETED") << t.dump();
    EXPECT_EQ(Int(t["total_batches_processed"]), 300);
    EXPECT_EQ(t.value("restarts", 0), 0) << "a pause is not a restart";
  }
  const std::vector<int64_t> rows = Batches(MetricRows(cluster_, paused, "training"));
  EXPECT_TRUE(StrictlyIncreasing(rows)) << "no duplicate batches: " << ::testing::PrintToString(rows);
  EXPECT_EQ(rows.back(), 300);
  EXPECT_EQ(Batches(MetricRows(cluster_, paused, "validation")), (std::vector<int64_t>{100, 200, 300}));
  cluster_.Send("POST", absl::StrCat("/api/v1/trials/", paused, "/pause"), "{}", &status);
  EXPECT_EQ(status, 409) << "a COMPLETED trial cannot be paused";
}

}  // namespace
}  // namespace det::testing
