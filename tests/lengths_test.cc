// Training lengths end to end (issue 17, part D), on a real master and agent
// with the synthetic trial:
//  - an ASHA search over global_batch_size with lengths in epochs: each
//    trial trains epochs x ceil(records_per_epoch / ITS OWN batch size)
//    batches (must-show 2);
//  - time_metric: tokens (the trial reports a cumulative `tokens` training
//    metric): each trial stops at the first scheduling unit where its tokens
//    reach the searcher's target (must-show 3);
//  - a Determined 0.38 config (time_metric: batches, no max_length, no
//    global_batch_size) runs to completion;
//  - a time_metric the trial never reports fails the trial, naming it;
//  - preview-search shows the config's own unit (must-show 4).
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

TestClusterOptions Options() {
  return TestClusterOptions().set_cli_timeout(std::chrono::minutes(5)).set_http_read_timeout(std::chrono::seconds(5));
}

int64_t Int(const json& v) { return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>(); }

// The validation rows' total_batches of a trial, in order.
std::vector<int64_t> ValidationBatches(TestCluster& cluster, int64_t trial_id) {
  std::vector<int64_t> out;
  for (const auto& m : cluster.Metrics(static_cast<int>(trial_id), "validation")) out.push_back(Int(m["total_batches"]));
  return out;
}

constexpr char kEpochsAsha[] = R"(name: asha-epochs
hyperparameters:
  global_batch_size:
    type: int
    minval: 16
    maxval: 64
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
records_per_epoch: 320
searcher:
  name: async_halving
  metric: validation_loss
  max_trials: 4
  max_concurrent_trials: 2
  num_rungs: 2
  divisor: 2
  max_length:
    epochs: 4
scheduling_unit: 5
max_restarts: 0
reproducibility:
  experiment_seed: 3
data:
  train_size: 512
  val_size: 64
)";

// Must-show 2: lengths in epochs convert per trial with its own batch size.
TEST(LengthsTest, AshaInEpochsConvertsWithEachTrialsOwnBatchSize) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a", AgentOptions().set_slots(2));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  const int id = cluster.CreateExperiment(kEpochsAsha, "asha-epochs");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(cluster.WaitForState(id, "STATE_COMPLETED", std::chrono::minutes(5))) << cluster.MasterLog();
  json trials = cluster.Trials(id);
  ASSERT_EQ(trials.size(), 4u) << trials.dump();
  std::set<int64_t> batch_sizes;
  int full = 0;
  for (const auto& t : trials) {
    const int64_t gbs = Int(t["hparams"]["global_batch_size"]);
    batch_sizes.insert(gbs);
    const int64_t per_epoch = (320 + gbs - 1) / gbs;  // ceil(records_per_epoch / its batch size)
    std::vector<int64_t> validations = ValidationBatches(cluster, Int(t["id"]));
    ASSERT_FALSE(validations.empty()) << t.dump();
    // Rung 0 is 2 epochs, rung 1 (the full length) 4 epochs: in its own batches.
    EXPECT_EQ(validations.front(), 2 * per_epoch) << "batch size " << gbs << ": " << t.dump();
    const int64_t last = validations.back();
    EXPECT_TRUE(last == 2 * per_epoch || last == 4 * per_epoch) << "batch size " << gbs << ": " << last;
    EXPECT_EQ(Int(t["total_batches_processed"]), last) << t.dump();
    if (last == 4 * per_epoch) ++full;
  }
  EXPECT_GE(full, 1);
  EXPECT_GE(batch_sizes.size(), 2u) << "the sampled batch sizes should differ";
}

constexpr char kTokens[] = R"(name: tokens
hyperparameters:
  global_batch_size: 16
  tokens_per_record:
    type: int
    minval: 1
    maxval: 4
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: async_halving
  metric: validation_loss
  max_trials: 4
  max_concurrent_trials: 2
  num_rungs: 2
  divisor: 2
  time_metric: tokens
  max_time: 2000
scheduling_unit: 5
max_restarts: 0
reproducibility:
  experiment_seed: 8
data:
  train_size: 512
  val_size: 64
)";

// Must-show 3: time_metric tokens; rungs at 1000 and 2000 tokens.
TEST(LengthsTest, TimeMetricTokensStopsEachTrialAtTheSearchersTarget) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a", AgentOptions().set_slots(2));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  const int id = cluster.CreateExperiment(kTokens, "tokens");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(cluster.WaitForState(id, "STATE_COMPLETED", std::chrono::minutes(5))) << cluster.MasterLog();
  json trials = cluster.Trials(id);
  ASSERT_EQ(trials.size(), 4u) << trials.dump();
  int full = 0;
  for (const auto& t : trials) {
    const int64_t per_batch = 16 * Int(t["hparams"]["tokens_per_record"]);  // tokens(B) = B x per_batch
    std::vector<int64_t> validations = ValidationBatches(cluster, Int(t["id"]));
    ASSERT_FALSE(validations.empty()) << t.dump();
    const int64_t targets[] = {1000, 2000};
    for (size_t i = 0; i < validations.size() && i < 2; ++i) {
      const int64_t b = validations[i];
      // Stopped at the first scheduling unit whose tokens reach the target.
      EXPECT_EQ(b % 5, 0) << b;
      EXPECT_GE(b * per_batch, targets[i]) << "trial " << t["id"] << " rung " << i << " at batch " << b;
      EXPECT_LT((b - 5) * per_batch, targets[i]) << "trial " << t["id"] << " rung " << i << " at batch " << b;
    }
    // The tokens it reported last (cumulative: the last batch's value).
    json training = cluster.Metrics(Int(t["id"]), "training");
    ASSERT_FALSE(training.empty());
    const json& last = training.back();
    EXPECT_EQ(Int(last["total_batches"]), validations.back());
    EXPECT_DOUBLE_EQ(last["metrics"]["tokens"].get<double>(), static_cast<double>(validations.back() * per_batch))
        << last.dump();
    if (validations.size() == 2) ++full;
  }
  EXPECT_GE(full, 1);
}

// A Determined 0.38 config: time_metric + max_time, no max_length, no
// global_batch_size (the synthetic trial then takes data.batch_size).
TEST(LengthsTest, Determined038ConfigWithoutMaxLengthOrBatchSizeCompletes) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  const std::string config = R"(name: det-038
hyperparameters:
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  time_metric: batches
  max_time: 30
scheduling_unit: 10
max_restarts: 0
data:
  batch_size: 8
  train_size: 256
  val_size: 64
)";
  const int id = cluster.CreateExperiment(config, "det-038");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(cluster.WaitForState(id, "STATE_COMPLETED", std::chrono::minutes(3))) << cluster.MasterLog();
  json trials = cluster.Trials(id);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(Int(trials[0]["total_batches_processed"]), 30);
  EXPECT_EQ(ValidationBatches(cluster, Int(trials[0]["id"])), std::vector<int64_t>{30});

  // Records need a batch size: refused at creation, naming the field.
  WriteFile(dir / "records.yaml", absl::StrCat(config.substr(0, config.find("searcher:")),
                                               "searcher:\n  name: single\n  metric: validation_loss\n"
                                               "  time_metric: records\n  max_time: 300\n"));
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"experiment", "create", dir / "records.yaml", kTestSyntheticTrial}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("cannot convert 'searcher.max_time' (300 records) to batches: "
                             "hyperparameters.global_batch_size is not set"));
}

// Determined 0.38's const.yaml shape: a single searcher with no length at all
// (the training code decides there) and no records_per_epoch: the trial
// trains one pass over its training data loader (96 records / 8 per batch =
// 12 batches), counted by the runtime, and stops at the epoch's last batch
// rather than at a multiple of scheduling_unit.
TEST(LengthsTest, Determined038ConfigWithNoLengthTrainsOneEpochOfItsData) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  const std::string config = R"(name: det-038-const
hyperparameters:
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
entrypoint: python3 train.py --epochs 1
scheduling_unit: 5
max_restarts: 0
data:
  batch_size: 8
  train_size: 96
  val_size: 32
)";
  const int id = cluster.CreateExperiment(config, "det-038-const");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(cluster.WaitForState(id, "STATE_COMPLETED", std::chrono::minutes(3))) << cluster.MasterLog();
  json trials = cluster.Trials(id);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(Int(trials[0]["total_batches_processed"]), 12);
  EXPECT_EQ(ValidationBatches(cluster, Int(trials[0]["id"])), std::vector<int64_t>{12});
}

// Pausing a time_metric trial mid-way: it checkpoints (with the metric's last
// value), resumes from there when activated and still stops at its target.
TEST(LengthsTest, TimeMetricSurvivesPauseAndActivate) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  // 16 tokens a batch: 1600 tokens at batch 100 exactly.
  const std::string config = R"(name: tokens-pause
hyperparameters:
  global_batch_size: 16
  tokens_per_record: 1
  batch_delay_ms: 20
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  time_metric: tokens
  max_time: 1600
scheduling_unit: 5
max_restarts: 0
data:
  train_size: 256
  val_size: 64
)";
  const int id = cluster.CreateExperiment(config, "tokens-pause");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        json trials = cluster.Trials(id);
        return trials.size() == 1 && Int(trials[0].value("total_batches_processed", json(0))) >= 20;
      },
      std::chrono::minutes(2)));
  ASSERT_EQ(cluster.Cli({"experiment", "pause", std::to_string(id)}), 0);
  ASSERT_TRUE(PollUntil(
      [&] {
        json trials = cluster.Trials(id);
        return trials.size() == 1 && trials[0].value("state", "") == "STATE_PAUSED" && cluster.BusySlots() == 0;
      },
      std::chrono::minutes(1)))
      << cluster.Trials(id).dump();
  const int64_t paused_at = Int(cluster.Trials(id)[0]["total_batches_processed"]);
  EXPECT_LT(paused_at, 100);
  ASSERT_EQ(cluster.Cli({"experiment", "activate", std::to_string(id)}), 0);
  ASSERT_TRUE(cluster.WaitForState(id, "STATE_COMPLETED", std::chrono::minutes(3))) << cluster.MasterLog();
  json trial = cluster.Trials(id)[0];
  EXPECT_EQ(Int(trial["total_batches_processed"]), 100) << trial.dump();
  EXPECT_EQ(ValidationBatches(cluster, Int(trial["id"])), std::vector<int64_t>{100});
  json training = cluster.Metrics(Int(trial["id"]), "training");
  ASSERT_FALSE(training.empty());
  EXPECT_DOUBLE_EQ(training.back()["metrics"]["tokens"].get<double>(), 1600.0) << training.back().dump();
}

// Two ranks: the chief relays the metric and its target, and every rank
// stops at the same batch (a collective vote).
TEST(LengthsTest, TimeMetricWithTwoRanksStopsEveryRankTogether) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a", AgentOptions().set_slots(2));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  const std::string config = R"(name: tokens-2
hyperparameters:
  global_batch_size: 16
  tokens_per_record: 1
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  time_metric: tokens
  max_time: 700
resources:
  slots_per_trial: 2
scheduling_unit: 5
max_restarts: 0
data:
  train_size: 256
  val_size: 64
)";
  const int id = cluster.CreateExperiment(config, "tokens-2");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(cluster.WaitForState(id, "STATE_COMPLETED", std::chrono::minutes(3))) << cluster.MasterLog();
  json trial = cluster.Trials(id)[0];
  // 16 tokens a global batch: 700 is reached at batch 44, checked at 45.
  EXPECT_EQ(Int(trial["total_batches_processed"]), 45) << trial.dump();
  EXPECT_EQ(ValidationBatches(cluster, Int(trial["id"])), std::vector<int64_t>{45});
}

// A time_metric the trial never reports: the trial fails with an error naming
// it after kTimeMetricProbeUnits scheduling units, instead of training forever.
TEST(LengthsTest, TimeMetricNeverReportedFailsTheTrialNamingIt) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  const std::string config = R"(name: no-tokens
hyperparameters:
  global_batch_size: 16
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  time_metric: tokens
  max_time: 100000
scheduling_unit: 3
max_restarts: 0
data:
  train_size: 256
  val_size: 64
)";
  const int id = cluster.CreateExperiment(config, "no-tokens");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(cluster.WaitForState(id, "STATE_ERROR", std::chrono::minutes(3))) << cluster.MasterLog();
  json trials = cluster.Trials(id);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0]["state"], "STATE_ERROR");
  // 10 scheduling units of 3 batches, then the error.
  EXPECT_EQ(Int(trials[0]["total_batches_processed"]), 30) << trials.dump();
  std::string out, err;
  cluster.Cli({"trial", "logs", absl::StrCat(Int(trials[0]["id"]))}, &out, &err);
  EXPECT_THAT(trials[0].value("error_message", std::string()) + out,
              HasSubstr("the trial reported no training metric 'tokens' in 30 batches"));
}

// Local mode (det-trial --local) with time_metric: tokens and no
// global_batch_size: trains to the first scheduling unit whose tokens reach
// max_time, then validates and checkpoints.
TEST(LengthsTest, LocalModeStopsOnTokens) {
  TempDir dir;
  WriteFile(dir / "config.yaml", R"(name: local-tokens
hyperparameters:
  tokens_per_record: 2
  learning_rate: 0.01
  hidden_size: 16
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  time_metric: tokens
  max_time: 500
scheduling_unit: 5
data:
  batch_size: 8
  train_size: 256
  val_size: 64
)");
  std::string out, err;
  const int rc = RunProcess({std::string(DET_BIN_DIR) + "/det-trial", "--local", dir / "config.yaml",
                             kTestSyntheticTrial, "--output-dir", dir / "out", "--threads", "1"},
                            &out, &err);
  ASSERT_EQ(rc, 0) << out << err;
  // 16 tokens a batch: 500 is reached at batch 32, checked at 35.
  EXPECT_THAT(out, HasSubstr("completed 35 batches"));
  EXPECT_THAT(ReadFile(dir / "out/metrics.csv"), HasSubstr("training,35,1.09375,tokens,560\n"));
}

// Must-show 4: preview-search in the config's unit.
TEST(LengthsTest, PreviewSearchShowsEpochs) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  WriteFile(dir / "cifar.yaml", R"(name: cifar10-adaptive
hyperparameters:
  global_batch_size: 128
  learning_rate: {type: log, base: 10, minval: -4, maxval: -1}
records_per_epoch: 50000
searcher:
  name: adaptive_asha
  metric: validation_error
  max_trials: 16
  max_length:
    epochs: 32
)");
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"preview-search", dir / "cifar.yaml"}, &out, &err), 0) << err;
  std::printf("%s", out.c_str());  // the README's example
  EXPECT_THAT(out, HasSubstr("Searcher: adaptive_asha, max_length 32 epochs (12512 batches)\n"));
  EXPECT_THAT(out, HasSubstr("  Rung  Trials  Length per trial\n"));
  EXPECT_THAT(out, HasSubstr("2 epochs (782 batches)"));
  // A searched batch size: epochs only.
  WriteFile(dir / "searched.yaml", absl::StrCat(R"(name: cifar10-adaptive
hyperparameters:
  global_batch_size: {type: int, minval: 16, maxval: 64}
records_per_epoch: 50000
searcher:
  name: adaptive_asha
  metric: validation_error
  max_trials: 16
  max_length:
    epochs: 32
)"));
  ASSERT_EQ(cluster.Cli({"preview-search", dir / "searched.yaml"}, &out, &err), 0) << err;
  std::printf("%s", out.c_str());
  EXPECT_THAT(out, HasSubstr("max_length 32 epochs (batches differ per trial"));
  EXPECT_THAT(out, HasSubstr("  2 epochs\n"));
}

}  // namespace
}  // namespace det::testing
