// det-cli trial profile end to end (issue 48): a profiled synthetic trial's
// profile lists every phase, its shares add up to the profiled wall time
// within 5%, and batches/s and samples/s are positive (table and --json);
// a trial without profiling says how to enable it; an unknown trial is the
// master's NOT_FOUND.
#include <chrono>
#include <string>

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
using namespace std::chrono_literals;

const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";

// One synthetic trial of 40 batches (a validation and a checkpoint every
// 20), `extra` appended (the profiling section or nothing).
std::string Config(const std::string& name, const std::string& checkpoint_dir, const std::string& extra) {
  return absl::StrCat("name: ", name,
                      "\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 8\n"
                      "  dropout: 0.0\n  batch_delay_ms: 10\n"
                      "searcher:\n  name: single\n  metric: validation_loss\n  smaller_is_better: true\n"
                      "  max_length:\n    batches: 40\n"
                      "min_validation_period:\n  batches: 20\nmin_checkpoint_period:\n  batches: 20\n"
                      "scheduling_unit: 10\nmax_restarts: 0\n"
                      "checkpoint_storage:\n  type: shared_fs\n  host_path: ",
                      checkpoint_dir,
                      "\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
                      "data:\n  train_size: 256\n  val_size: 64\n",
                      extra);
}

// Runs the experiment to COMPLETED and returns its only trial's id (0 and a
// test failure otherwise).
int64_t CompletedTrial(TestCluster& cluster, const std::string& yaml, const std::string& name) {
  const int exp = cluster.CreateExperiment(yaml, name, kSynthetic);
  if (exp <= 0) return 0;
  if (!cluster.WaitForState(exp, "STATE_COMPLETED", 120s)) {
    ADD_FAILURE() << "experiment " << exp << " is " << cluster.ExperimentState(exp) << "\n"
                  << cluster.MasterLog() << cluster.AgentLogs();
    return 0;
  }
  json trials = cluster.Trials(exp);
  if (trials.size() != 1) {
    ADD_FAILURE() << "experiment " << exp << " trials: " << trials.dump();
    return 0;
  }
  const json& id = trials[0]["id"];
  return id.is_string() ? std::stoll(id.get<std::string>()) : id.get<int64_t>();
}

class TrialProfileCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(dir_);
    cluster_->StartAgent("a");
  }
  std::string Checkpoints() const { return dir_ / "checkpoints"; }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
};

TEST_F(TrialProfileCliTest, AProfiledTrialsProfileListsEveryPhaseAndItsSharesAddUpToTheWallTime) {
  const int64_t trial = CompletedTrial(*cluster_, Config("profiled", Checkpoints(), "profiling:\n  enabled: true\n"),
                                       "profiled");
  ASSERT_GT(trial, 0);
  std::string out, err;
  ASSERT_EQ(cluster_->Cli({"trial", "profile", std::to_string(trial)}, &out, &err), 0) << out << err;
  for (const char* label : {"data loader", "forward", "backward", "all-reduce", "optimizer step", "checkpoint",
                            "validation", "runtime", "unattributed", "batches/s", "samples/s", "System ("}) {
    EXPECT_THAT(out, HasSubstr(label));
  }

  out.clear();
  ASSERT_EQ(cluster_->Cli({"trial", "profile", std::to_string(trial), "--json"}, &out, &err), 0) << out << err;
  const json p = json::parse(out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(p.is_object()) << out;
  EXPECT_EQ(p["trial_id"], trial);
  EXPECT_GT(p["windows"].get<int64_t>(), 0);
  EXPECT_GT(p["wall_seconds"].get<double>(), 0);
  // The 8 measured phases and the unattributed remainder.
  ASSERT_EQ(p["phases"].size(), 9u) << out;
  double shares = 0;
  for (const auto& phase : p["phases"]) shares += phase["share"].get<double>();
  EXPECT_NEAR(shares, 1.0, 0.05) << out;
  // Trained 40 batches of 16 samples, all inside the profiled range.
  EXPECT_EQ(p["batches"].get<double>(), 40) << out;
  EXPECT_EQ(p["samples"].get<double>(), 40 * 16) << out;
  EXPECT_GT(p["batches_per_second"].get<double>(), 0) << out;
  EXPECT_GT(p["samples_per_second"].get<double>(), 0) << out;
  EXPECT_GT(p["system"]["samples"].get<int64_t>(), 0) << out;
  EXPECT_GT(p["system"]["rss_bytes_max"].get<double>(), 0) << out;
}

TEST_F(TrialProfileCliTest, ATrialWithoutProfilingSaysHowToEnableItAndAnUnknownTrialIsNotFound) {
  const int64_t trial = CompletedTrial(*cluster_, Config("unprofiled", Checkpoints(), ""), "unprofiled");
  ASSERT_GT(trial, 0);
  std::string out, err;
  EXPECT_EQ(cluster_->Cli({"trial", "profile", std::to_string(trial)}, &out, &err), 1) << out << err;
  EXPECT_THAT(err, HasSubstr(absl::StrCat("trial ", trial,
                                          " has no profile: set profiling.enabled: true in the experiment config")));
  EXPECT_EQ(out, "");
  err.clear();
  EXPECT_EQ(cluster_->Cli({"trial", "profile", "987654"}, &out, &err), 1) << out << err;
  EXPECT_THAT(err, HasSubstr("NOT_FOUND"));
}

}  // namespace
}  // namespace det::testing
