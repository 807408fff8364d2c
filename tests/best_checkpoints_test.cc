// End-to-end test of the best model in one command (issue 45): two small
// grid searches of the synthetic example whose trials end with distinct
// validation losses, one ranked smaller-is-better and one larger-is-better;
// the REST ranking (sort_by=searcher_metric), det-cli experiment
// list-checkpoints --best and experiment download --top-n must name the
// checkpoints that the stored metrics make best, and the downloaded files
// must be those in checkpoint storage.
#include <algorithm>
#include <filesystem>
#include <map>
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

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Three trials (learning rates far apart), validation and a checkpoint every
// 10 batches, 20 batches each: six checkpoints with a searcher metric.
std::string Config(const std::string& name, const std::string& checkpoint_dir, bool smaller_is_better) {
  return absl::StrCat("name: ", name, R"(
hyperparameters:
  global_batch_size: 16
  learning_rate:
    type: categorical
    vals: [0.001, 0.03, 0.3]
  hidden_size: 16
  dropout: 0.1
searcher:
  name: grid
  metric: validation_loss
  smaller_is_better: )", smaller_is_better ? "true" : "false", R"(
  max_length:
    batches: 20
min_validation_period:
  batches: 10
min_checkpoint_period:
  batches: 10
scheduling_unit: 5
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoint_dir, R"(
  save_trial_latest: 100
  save_trial_best: 100
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
)");
}

// The uuids of the experiment's COMPLETED checkpoints, best first, computed
// here from the stored metrics: by searcher metric in the experiment's
// sense, ties by uuid; those without a metric are left out.
std::vector<std::string> ExpectedRanking(const nlohmann::json& checkpoints, bool smaller_is_better) {
  std::vector<std::pair<double, std::string>> scored;
  for (const auto& c : checkpoints) {
    if (c.value("state", "") != "CHECKPOINT_STATE_COMPLETED" || !c.contains("searcher_metric")) continue;
    scored.emplace_back(c["searcher_metric"].get<double>(), c["uuid"].get<std::string>());
  }
  std::sort(scored.begin(), scored.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return smaller_is_better ? a.first < b.first : a.first > b.first;
    return a.second < b.second;
  });
  std::vector<std::string> out;
  for (const auto& [metric, uuid] : scored) out.push_back(uuid);
  return out;
}

std::vector<std::string> Uuids(const nlohmann::json& checkpoints) {
  std::vector<std::string> out;
  for (const auto& c : checkpoints) out.push_back(c["uuid"]);
  return out;
}

// The storage path of checkpoint `uuid` in `checkpoints`.
std::string StoragePath(const nlohmann::json& checkpoints, const std::string& uuid) {
  for (const auto& c : checkpoints) {
    if (c["uuid"] == uuid) return c["storage_path"];
  }
  return "";
}

TEST(BestCheckpointsTest, BestOverRestListAndDownloadTopNInBothSenses) {
  TempDir dir;
  TestCluster cluster(dir, TestClusterOptions().set_cli_timeout(std::chrono::minutes(2)).set_http_read_timeout(
                               std::chrono::seconds(30)));
  cluster.StartAgent("a", AgentOptions().set_slots(2));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  const int smaller = cluster.CreateExperiment(Config("best-smaller", dir / "checkpoints", true), "smaller");
  const int larger = cluster.CreateExperiment(Config("best-larger", dir / "checkpoints", false), "larger");
  ASSERT_GT(smaller, 0);
  ASSERT_GT(larger, 0);
  ASSERT_TRUE(cluster.WaitForState(smaller, "STATE_COMPLETED", std::chrono::minutes(3))) << cluster.MasterLog();
  ASSERT_TRUE(cluster.WaitForState(larger, "STATE_COMPLETED", std::chrono::minutes(3))) << cluster.MasterLog();

  for (const auto& [exp, smaller_is_better] : {std::pair<int, bool>{smaller, true}, {larger, false}}) {
    SCOPED_TRACE(absl::StrCat("experiment ", exp, " smaller_is_better ", smaller_is_better));
    const std::string base = absl::StrCat("/api/v1/experiments/", exp, "/checkpoints");
    const nlohmann::json all = cluster.Get(base)["checkpoints"];
    const std::vector<std::string> want = ExpectedRanking(all, smaller_is_better);
    ASSERT_GE(want.size(), 3u) << all.dump(1);
    std::vector<double> metrics;
    for (const auto& c : all) {
      if (c.contains("searcher_metric")) metrics.push_back(c["searcher_metric"]);
    }
    std::sort(metrics.begin(), metrics.end());
    ASSERT_EQ(std::unique(metrics.begin(), metrics.end()), metrics.end()) << "metrics must differ: " << all.dump(1);

    // REST: the lower-case sort_by name, a limit.
    const nlohmann::json top = cluster.Get(base + "?sort_by=searcher_metric&states=completed&limit=2");
    EXPECT_EQ(Uuids(top["checkpoints"]), std::vector<std::string>(want.begin(), want.begin() + 2)) << top.dump(1);
    EXPECT_EQ(top["pagination"].value("total", 0), static_cast<int>(all.size()));
    int status = 0;
    const nlohmann::json bad = cluster.Get(base + "?sort_by=best", &status);
    EXPECT_EQ(status, 400);
    EXPECT_THAT(bad.value("message", ""), HasSubstr("sort_by: not a value of"));
    EXPECT_THAT(bad.value("message", ""), HasSubstr("allowed: uuid, trial_id, total_batches, end_time, state, "
                                                    "searcher_metric"));

    // det-cli experiment list-checkpoints --best 1 (JSON and the table).
    std::string out, err;
    ASSERT_EQ(cluster.Cli({"experiment", "list-checkpoints", std::to_string(exp), "--best", "1", "--json"}, &out,
                          &err),
              0)
        << err;
    const nlohmann::json listed = nlohmann::json::parse(out, nullptr, false);
    ASSERT_TRUE(listed.is_object()) << out;
    EXPECT_EQ(Uuids(listed["checkpoints"]), std::vector<std::string>{want[0]}) << out;
    ASSERT_EQ(cluster.Cli({"experiment", "list-checkpoints", std::to_string(exp), "--best", "1"}, &out, &err), 0)
        << err;
    EXPECT_THAT(out, HasSubstr(absl::StrCat("Best 1 of ", all.size(), " completed checkpoints of experiment ", exp,
                                            " by validation_loss (", smaller_is_better ? "smaller" : "larger",
                                            " is better):")));
    EXPECT_THAT(out, HasSubstr(want[0]));
    EXPECT_EQ(out.find(want[1]), std::string::npos) << out;

    // det-cli experiment download --top-n 2: DIR/<uuid>/ for the two best,
    // byte-identical to storage, nothing else.
    const fs::path got = fs::path(dir.path()) / absl::StrCat("top-", exp);
    ASSERT_EQ(cluster.Cli({"experiment", "download", std::to_string(exp), "--top-n", "2", "-o", got.string()}, &out,
                          &err),
              0)
        << out << err;
    std::vector<std::string> written;
    for (const auto& e : fs::directory_iterator(got)) written.push_back(e.path().filename().string());
    std::sort(written.begin(), written.end());
    std::vector<std::string> best_two(want.begin(), want.begin() + 2);
    std::vector<std::string> sorted_two = best_two;
    std::sort(sorted_two.begin(), sorted_two.end());
    EXPECT_EQ(written, sorted_two);
    for (size_t i = 0; i < best_two.size(); ++i) {
      const auto stored = FilesUnder(StoragePath(all, best_two[i]));
      EXPECT_FALSE(stored.empty()) << best_two[i];
      EXPECT_TRUE(FilesUnder(got / best_two[i]) == stored) << best_two[i];
      EXPECT_THAT(out, HasSubstr(absl::StrCat("#", i + 1, " trial ")));
      EXPECT_THAT(out, HasSubstr(absl::StrCat(best_two[i], " -> ", (got / best_two[i]).string())));
    }
    // Again into the same DIR: refused, nothing overwritten.
    EXPECT_EQ(cluster.Cli({"experiment", "download", std::to_string(exp), "--top-n", "2", "-o", got.string()}, &out,
                          &err),
              1);
    EXPECT_THAT(err, HasSubstr("already exists: not overwriting it"));
  }
  // Bounds: named flag, usage exit code.
  std::string out, err;
  EXPECT_EQ(cluster.Cli({"experiment", "list-checkpoints", std::to_string(smaller), "--best", "0"}, &out, &err), 2);
  EXPECT_THAT(err, HasSubstr("--best: must be a whole number from 1 to 1000"));
}

}  // namespace
}  // namespace det::testing
