// End-to-end tests of the cluster: a real det-master and two det-agents on
// loopback running trials of the synthetic example through det-cli and REST.
#include <regex>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";

std::string RandomSearchConfig(const std::string& checkpoint_dir) {
  return absl::StrCat(R"(name: random-synthetic
hyperparameters:
  global_batch_size: 32
  learning_rate:
    type: log
    minval: -3
    maxval: -1
  hidden_size:
    type: categorical
    vals: [16, 32]
  dropout: 0.1
searcher:
  name: random
  metric: validation_loss
  smaller_is_better: true
  max_trials: 4
  max_concurrent_trials: 2
  max_length:
    batches: 60
min_validation_period:
  batches: 30
scheduling_unit: 10
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoint_dir, R"(
reproducibility:
  experiment_seed: 11
data:
  train_size: 512
  val_size: 128
)");
}

// The options of every test's cluster: det-cli runs get 5 minutes (a whole
// --follow search), REST calls httplib's default 5 s read timeout.
TestClusterOptions Options() {
  return TestClusterOptions().set_cli_timeout(std::chrono::minutes(5)).set_http_read_timeout(std::chrono::seconds(5));
}

// Must show 1: a random search of 4 trials over two agents completes, and
// every trial has validation metrics in det-cli and in the REST API.
TEST(ClusterTest, RandomSearchCompletesOnTwoAgents) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a");
  cluster.StartAgent("b");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 2; }, std::chrono::seconds(30)));
  WriteFile(dir / "random.yaml", RandomSearchConfig(dir / "checkpoints"));

  std::string out, err;
  int rc = cluster.Cli({"experiment", "create", dir / "random.yaml", kSynthetic, "--follow"}, &out, &err);
  ASSERT_EQ(rc, 0) << out << err << cluster.MasterLog();
  EXPECT_THAT(out, HasSubstr("Created experiment 1"));

  auto trials = cluster.Get("/api/v1/experiments/1/trials");
  ASSERT_TRUE(trials.contains("trials")) << trials.dump();
  ASSERT_EQ(trials["trials"].size(), 4u) << trials.dump();
  for (const auto& t : trials["trials"]) {
    EXPECT_EQ(t["state"], "STATE_COMPLETED") << t.dump();
    int id = t["id"].get<int>();
    auto metrics = cluster.Get(absl::StrCat("/api/v1/trials/", id, "/metrics?group=validation"));
    ASSERT_TRUE(metrics.contains("metrics")) << metrics.dump();
    ASSERT_GE(metrics["metrics"].size(), 2u) << metrics.dump();  // at 30 and 60 batches
    // protobuf's JSON mapping writes int64 as a string.
    EXPECT_EQ(metrics["metrics"].back()["total_batches"], 60);
    EXPECT_TRUE(metrics["metrics"].back()["metrics"].contains("validation_loss"));

    std::string cli_out;
    ASSERT_EQ(cluster.Cli({"trial", "metrics", std::to_string(id), "--group", "validation", "--json"}, &cli_out, &err),
              0)
        << err;
    EXPECT_THAT(cli_out, HasSubstr("validation_loss"));
    EXPECT_THAT(cli_out, HasSubstr("\"total_batches\""));
  }
  auto exp = cluster.Get("/api/v1/experiments/1");
  EXPECT_EQ(exp["experiment"]["state"], "STATE_COMPLETED") << exp.dump();
  EXPECT_EQ(exp["experiment"]["num_trials"], 4);
}

// Must show 3: bad requests get clear errors and the master keeps running.
TEST(ClusterTest, BadRequestsGetClearErrorsAndTheMasterKeepsRunning) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  std::string out, err;

  // Unknown experiment id: gRPC through det-cli, and REST.
  EXPECT_EQ(cluster.Cli({"experiment", "describe", "999"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("experiment 999 not found"));
  int status = 0;
  auto body = cluster.Get("/api/v1/experiments/999", &status);
  EXPECT_EQ(status, 404);
  EXPECT_THAT(body.value("message", ""), HasSubstr("experiment 999 not found"));

  // Malformed config.
  WriteFile(dir / "bad.yaml", "name: x\nhyperparameters:\n  global_batch_size: 8\nsearcher:\n  name: single\n"
                              "  metric: loss\n  max_lenght: 10\n");
  EXPECT_NE(cluster.Cli({"experiment", "create", dir / "bad.yaml", kSynthetic}, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("unknown field 'searcher.max_lenght'"));

  // A trial.so that is not a shared library.
  WriteFile(dir / "good.yaml", RandomSearchConfig(dir / "checkpoints"));
  WriteFile(dir / "fake.so", "#!/bin/sh\necho not a library\n");
  EXPECT_NE(cluster.Cli({"experiment", "create", dir / "good.yaml", dir / "fake.so"}, &out, &err), 0);
  EXPECT_THAT(err, HasSubstr("not a shared library"));
  // A shared library without DET_REGISTER_TRIAL: refused at create (read
  // from its ELF symbol table), not scheduled to fail on an agent.
  EXPECT_NE(cluster.Cli({"experiment", "create", dir / "good.yaml", std::string(DET_TRIALS_DIR) + "/no_entry_trial.so"}, &out, &err),
            0);
  EXPECT_THAT(err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(err, HasSubstr("has no entry symbol 'det_trial_plugin_entry'"));
  EXPECT_EQ(cluster.Get("/api/v1/experiments")["experiments"].size(), 0u);

  // An agent whose id is taken.
  Subprocess& dup = cluster.StartAgent("a");
  int rc = dup.Wait(std::chrono::seconds(30));
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1);
  EXPECT_THAT(dup.Stderr() + dup.Stdout(), HasSubstr("already connected"));

  // The master is still up and serving.
  EXPECT_EQ(cluster.Get("/api/v1/master", &status).value("cluster_name", ""), "det-cpp");
  EXPECT_EQ(status, 200);
  EXPECT_EQ(cluster.Cli({"master", "info"}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr("8.0 MiB")) << out;  // max request (--max-message-mib); trial.so goes by UploadArtifact
  EXPECT_THAT(out, HasSubstr("Trial ABI version: 1")) << out;
  EXPECT_THAT(out, ::testing::ContainsRegex("Master ID: +[0-9a-f]{32}")) << out;
  EXPECT_EQ(cluster.ConnectedAgents(), 1);
  EXPECT_EQ(cluster.master().Wait(std::chrono::milliseconds(1)), -1);  // still running
}


// Issue 4, must show 2: preview-search of the Fashion-MNIST ASHA config
// (max_trials 16, divisor 4, max_rungs 5, max_length 937 batches, standard).
TEST(ClusterTest, PreviewSearchShowsAshaBracketsAndRungs) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"preview-search", std::string(DET_SOURCE_DIR) + "/examples/fashion_mnist/adaptive.yaml"},
                        &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("Searcher: adaptive_asha, max_length 937 batches"));
  EXPECT_THAT(out, HasSubstr("Bracket 1: 3 rungs, 12 trials\n"
                             "  Rung  Trials  Batches per trial\n"
                             "     0      12                 58\n"));
  EXPECT_THAT(out, HasSubstr("                234\n"));
  EXPECT_THAT(out, HasSubstr("Bracket 2: 2 rungs, 4 trials\n"
                             "  Rung  Trials  Batches per trial\n"
                             "     0       4                234\n"));
  EXPECT_THAT(out, HasSubstr("                937\n"));
  EXPECT_EQ(err, "");
  // A searcher field the searcher does not read is previewed with a warning,
  // as experiment create gives.
  WriteFile(dir / "pbt_field.yaml",
            absl::StrReplaceAll(ReadFile(std::string(DET_SOURCE_DIR) + "/examples/fashion_mnist/adaptive.yaml"),
                                {{"  max_rungs: 5\n", "  max_rungs: 5\n  population_size: 8\n"}}));
  ASSERT_EQ(cluster.Cli({"preview-search", dir / "pbt_field.yaml"}, &out, &err), 0) << err;
  EXPECT_THAT(err, HasSubstr("det-cli: warning: field 'searcher.population_size' is accepted but not used by "
                             "searcher 'adaptive_asha' (it is read by pbt)"));
  EXPECT_THAT(out, HasSubstr("Bracket 2: 2 rungs, 4 trials\n"));
  // A bad config is an error naming the field.
  WriteFile(dir / "bad.yaml", "name: x\nhyperparameters:\n  global_batch_size: 8\nsearcher:\n  name: adaptive_asha\n"
                              "  metric: loss\n  max_length:\n    batches: 10\n  max_trials: 0\n");
  EXPECT_EQ(cluster.Cli({"preview-search", dir / "bad.yaml"}, &out, &err), 1);
  EXPECT_THAT(err, HasSubstr("max_trials"));
}

// Adaptive ASHA end to end: trials stop at the first rung or are promoted and
// resume from their checkpoints to the full length.
TEST(ClusterTest, AdaptiveAshaPromotesFromCheckpointsAndCompletes) {
  TempDir dir;
  TestCluster cluster(dir, Options());
  cluster.StartAgent("a");
  cluster.StartAgent("b");
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 2; }, std::chrono::seconds(30)));
  std::string config = ReadFile(std::string(DET_SOURCE_DIR) + "/examples/synthetic/adaptive.yaml");
  config += absl::StrCat("checkpoint_storage:\n  type: shared_fs\n  host_path: ", std::string(dir / "checkpoints"), "\n");
  WriteFile(dir / "adaptive.yaml", config);
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"experiment", "create", dir / "adaptive.yaml", kSynthetic, "--follow"}, &out, &err), 0)
      << out << err;
  auto trials = cluster.Get("/api/v1/experiments/1/trials");
  ASSERT_EQ(trials["trials"].size(), 8u) << trials.dump();
  int full = 0, stopped = 0;
  for (const auto& t : trials["trials"]) {
    EXPECT_EQ(t["state"], "STATE_COMPLETED") << t.dump();
    auto metrics = cluster.Get(absl::StrCat("/api/v1/trials/", t["id"].get<int>(), "/metrics?group=validation"));
    ASSERT_GE(metrics["metrics"].size(), 1u) << metrics.dump();
    EXPECT_EQ(metrics["metrics"][0]["total_batches"], 40) << metrics.dump();
    const int64_t last = metrics["metrics"].back()["total_batches"];
    if (last == 160) {
      ++full;
    } else {
      EXPECT_EQ(last, 40) << metrics.dump();
      ++stopped;
    }
  }
  // Preview (results in creation order): 2 of 8 promoted to 160. Which and
  // how many depends on the order results arrive in (a new best is promoted
  // at once), but most trials stop at the first rung.
  EXPECT_GE(full, 2);
  EXPECT_GE(stopped, 4);
  EXPECT_EQ(full + stopped, 8);
}

}  // namespace
}  // namespace det::testing
