// Determined config fields honoured on a real cluster (issue 17, part E):
// checkpoint_policy all|none|best decides which validations are followed by
// a checkpoint, perform_initial_validation validates before any training,
// debug: true raises the trial's log level, a checkpoint_storage without
// type uses the master's storage, and fields that do not apply reach the
// user as one warning each from det-cli experiment create.
#include <filesystem>
#include <optional>
#include <regex>
#include <sstream>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

int64_t Int(const json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());  // int64 in protobuf's JSON mapping
  if (v.is_number()) return v.get<int64_t>();
  return 0;
}

// A one-trial synthetic experiment of 40 batches validating every 10, with
// `extra` appended (top-level fields).
std::string Config(const std::string& name, const std::string& extra) {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.05
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 40
min_validation_period:
  batches: 10
scheduling_unit: 5
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
)",
                      extra);
}

std::string Storage(const TempDir& dir) {
  return absl::StrCat("checkpoint_storage:\n  type: shared_fs\n  host_path: ", std::string(dir / "checkpoints"),
                      "\n  save_trial_latest: 100\n  save_trial_best: 100\n");
}

TestClusterOptions Options() {
  return TestClusterOptions().set_cli_timeout(std::chrono::minutes(3)).set_http_read_timeout(std::chrono::seconds(30));
}

int OnlyTrial(TestCluster& cluster, int exp) {
  json trials = cluster.Trials(exp);
  EXPECT_EQ(trials.size(), 1u) << trials.dump();
  return trials.empty() ? 0 : static_cast<int>(Int(trials[0]["id"]));
}

// total_batches of the experiment's checkpoints, sorted.
std::vector<int64_t> CheckpointBatches(TestCluster& cluster, int exp) {
  json cps = cluster.Get(absl::StrCat("/api/v1/experiments/", exp, "/checkpoints"));
  std::vector<int64_t> out;
  if (cps.is_object() && cps.contains("checkpoints")) {
    for (const json& c : cps["checkpoints"]) out.push_back(Int(c["total_batches"]));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> ValidationBatches(TestCluster& cluster, int trial) {
  std::vector<int64_t> out;
  for (const json& m : cluster.Metrics(trial, "validation")) out.push_back(Int(m["total_batches"]));
  return out;
}

class ConfigPoliciesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(dir_, Options());
    cluster_->StartAgent("a", AgentOptions().set_slots(3));
    ASSERT_TRUE(PollUntil([&] { return cluster_->ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  }
  int Completed(const std::string& yaml, const std::string& name) {
    const int exp = cluster_->CreateExperiment(yaml, name);
    EXPECT_GT(exp, 0);
    return exp;
  }
  void Wait(int exp) {
    EXPECT_TRUE(cluster_->WaitForState(exp, "STATE_COMPLETED", std::chrono::minutes(3)))
        << cluster_->ExperimentState(exp) << "\n" << cluster_->MasterLog();
  }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
};

// checkpoint_policy on the cluster: all checkpoints after every validation,
// none only at the end, best after each validation that beat every earlier
// one of the experiment (and at the end).
TEST_F(ConfigPoliciesTest, CheckpointPolicyDecidesWhichValidationsCheckpoint) {
  const int all = Completed(Config("policy-all", Storage(dir_) + "checkpoint_policy: all\n"), "all");
  const int none = Completed(Config("policy-none", Storage(dir_) + "checkpoint_policy: none\n"), "none");
  const int best = Completed(Config("policy-best", Storage(dir_) + "checkpoint_policy: best\n"), "best");
  Wait(all);
  Wait(none);
  Wait(best);

  EXPECT_THAT(ValidationBatches(*cluster_, OnlyTrial(*cluster_, all)), ElementsAre(10, 20, 30, 40));
  EXPECT_THAT(CheckpointBatches(*cluster_, all), ElementsAre(10, 20, 30, 40));
  EXPECT_THAT(CheckpointBatches(*cluster_, none), ElementsAre(40));

  // best: from the validation history, which ones improved on all before.
  std::set<int64_t> expected = {40};
  std::optional<double> so_far;
  for (const json& m : cluster_->Metrics(OnlyTrial(*cluster_, best), "validation")) {
    const double v = m["metrics"]["validation_loss"].get<double>();
    if (!so_far || v < *so_far) {
      so_far = v;
      expected.insert(Int(m["total_batches"]));
    }
  }
  EXPECT_TRUE(expected.count(10)) << "the first validation is the best so far";
  const std::vector<int64_t> got = CheckpointBatches(*cluster_, best);
  EXPECT_EQ(std::set<int64_t>(got.begin(), got.end()), expected);
  EXPECT_EQ(got.size(), expected.size()) << "one checkpoint per batch count";
}

// perform_initial_validation: true validates at total_batches 0, before any
// training; without it the first validation comes after the first period.
TEST_F(ConfigPoliciesTest, PerformInitialValidationOnTheCluster) {
  const int with = Completed(Config("initial", Storage(dir_) + "perform_initial_validation: true\n"), "initial");
  const int without = Completed(Config("no-initial", Storage(dir_)), "no-initial");
  Wait(with);
  Wait(without);
  const int trial = OnlyTrial(*cluster_, with);
  EXPECT_THAT(ValidationBatches(*cluster_, trial), ElementsAre(0, 10, 20, 30, 40));
  json first = cluster_->Metrics(trial, "validation")[0];
  EXPECT_TRUE(first["metrics"].contains("validation_loss")) << first.dump();
  json training = cluster_->Metrics(trial, "training");
  ASSERT_FALSE(training.empty());
  EXPECT_GT(Int(training[0]["total_batches"]), 0);
  EXPECT_THAT(ValidationBatches(*cluster_, OnlyTrial(*cluster_, without)), ElementsAre(10, 20, 30, 40));
  // No checkpoint of an untrained model: the initial validation is not a reason to save.
  EXPECT_THAT(CheckpointBatches(*cluster_, with), Not(::testing::Contains(0)));
}

// debug: true raises the trial process's log level: the agent passes it
// (DET_DEBUG=1) so det-trial logs at debug level from its first line, and
// its debug lines (one per operation the master hands out) reach the
// trial's logs; without it none do.
TEST_F(ConfigPoliciesTest, DebugRaisesTheTrialsLogLevel) {
  const int debug = Completed(Config("debug", Storage(dir_) + "debug: true\n"), "debug");
  const int quiet = Completed(Config("quiet", Storage(dir_)), "quiet");
  Wait(debug);
  Wait(quiet);
  std::string out, err;
  const std::string debug_trial = std::to_string(OnlyTrial(*cluster_, debug));
  ASSERT_TRUE(PollUntil(
      [&] {
        cluster_->Cli({"trial", "logs", debug_trial}, &out, &err);
        return out.find("[det-trial] operation") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << out << err;
  EXPECT_THAT(out, HasSubstr("[debug] [det-trial] debug logging on (DET_DEBUG=1 from the agent)"));
  EXPECT_THAT(out, HasSubstr("[debug] [det-trial] debug logging on (config debug: true)"));
  EXPECT_THAT(out, HasSubstr("OPERATION_KIND_TRAIN"));
  ASSERT_EQ(cluster_->Cli({"trial", "logs", std::to_string(OnlyTrial(*cluster_, quiet))}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("[det-trial] validation"));
  EXPECT_THAT(out, Not(HasSubstr("[debug]")));
}

// A Determined config with fields det-cpp does not use and a
// checkpoint_storage without type: det-cli prints one warning per field and
// the checkpoints go to the master's own storage.
TEST_F(ConfigPoliciesTest, WarningsReachTheUserAndUntypedStorageIsTheMasters) {
  const fs::path file = dir_ / "determined.yaml";
  WriteFile(file.string(), R"(name: determined-fields
entrypoint: [python3, train.py]
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.05
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 20
  divisor: 3
min_validation_period:
  batches: 10
checkpoint_storage:
  storage_path: untyped
  save_trial_latest: 100
resources:
  slots: 1
environment:
  ports: {tensorboard: 6006}
  environment_variables:
    - OMP_NUM_THREADS=1
retention_policy:
  log_retention_days: 30
data:
  train_size: 256
  val_size: 64
)");
  std::string out, err;
  ASSERT_EQ(cluster_->Cli({"experiment", "create", file.string(), kTestSyntheticTrial}, &out, &err), 0) << out << err;
  EXPECT_THAT(err, HasSubstr("det-cli: warning: field 'entrypoint' is accepted but not used: "));
  EXPECT_THAT(err, HasSubstr("det-cli: warning: field 'resources.slots' is accepted but not used: "));
  EXPECT_THAT(err, HasSubstr("det-cli: warning: field 'environment.ports' is accepted but not used: det-cpp trials "
                             "expose no ports"));
  EXPECT_THAT(err, HasSubstr("det-cli: warning: field 'retention_policy' is accepted but not used: "));
  EXPECT_THAT(err, HasSubstr("det-cli: warning: field 'searcher.divisor' is accepted but not used by searcher "
                             "'single' (it is read by adaptive_asha and async_halving)"));
  const int exp = std::stoi(out.substr(out.find("Created experiment ") + 19));
  Wait(exp);
  json cps = cluster_->Get(absl::StrCat("/api/v1/experiments/", exp, "/checkpoints"));
  ASSERT_TRUE(cps.contains("checkpoints") && !cps["checkpoints"].empty()) << cps.dump();
  const std::string path = cps["checkpoints"][0]["storage_path"];
  EXPECT_EQ(path.rfind(dir_ / "master/checkpoints/untyped/", 0), 0u) << path;
  EXPECT_TRUE(fs::exists(fs::path(path) / "metadata.json")) << path;
}

// Local mode (det-trial --local) follows checkpoint_policy too; the trial's
// own best (the experiment is that one trial) decides for best.
TEST(LocalConfigPoliciesTest, CheckpointPolicyInLocalMode) {
  TempDir dir;
  auto run = [&](const std::string& policy) {
    const std::string out_dir = dir / ("out-" + policy);
    WriteFile(dir / (policy + ".yaml"), Config("local-" + policy, "checkpoint_policy: " + policy + "\n"));
    std::string out, err;
    EXPECT_EQ(RunProcess({std::string(DET_BIN_DIR) + "/det-trial", "--local", dir / (policy + ".yaml"),
                          kTestSyntheticTrial, "--output-dir", out_dir},
                         &out, &err),
              0)
        << out << err;
    std::vector<int64_t> checkpoints;
    static const std::regex re(R"(\[det-trial\] checkpoint batches (\d+))");
    for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
      checkpoints.push_back(std::stoll((*it)[1].str()));
    }
    // Validation losses in order, from metrics.csv ("validation,BATCHES,EPOCHS,NAME,VALUE").
    std::vector<std::pair<int64_t, double>> losses;
    std::istringstream csv(ReadFile(out_dir + "/metrics.csv"));
    for (std::string line; std::getline(csv, line);) {
      std::vector<std::string> f = absl::StrSplit(line, ',');
      if (f.size() == 5 && f[0] == "validation" && f[3] == "validation_loss") {
        losses.emplace_back(std::stoll(f[1]), std::stod(f[4]));
      }
    }
    return std::make_pair(checkpoints, losses);
  };
  EXPECT_THAT(run("all").first, ElementsAre(10, 20, 30, 40));
  EXPECT_THAT(run("none").first, ElementsAre(40));
  auto [best, losses] = run("best");
  std::vector<int64_t> expected;
  std::optional<double> so_far;
  for (const auto& [batches, loss] : losses) {
    if (batches < 40 && (!so_far || loss < *so_far)) expected.push_back(batches);
    if (!so_far || loss < *so_far) so_far = loss;
  }
  expected.push_back(40);
  ASSERT_EQ(losses.size(), 4u);
  EXPECT_EQ(best, expected);
}

}  // namespace
}  // namespace det::testing
