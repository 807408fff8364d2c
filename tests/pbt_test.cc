// End-to-end tests of the pbt, tpe and ASHA+TPE searchers on real
// det-master, det-agent and det-trial processes running the synthetic
// example: a PBT child starts from its parent's checkpoint with the whole
// training state (its first metrics equal the parent's continuation), the
// lineage shows in the REST API and `det-cli trial describe`, and kill -9 of
// the master mid-search resumes every searcher.
#include <map>
#include <set>
#include <string>
#include <vector>

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
using json = nlohmann::json;

constexpr auto kLong = std::chrono::seconds(240);

int64_t Int(const json& v) {
  if (v.is_string()) return std::stoll(v.get<std::string>());  // int64 in protobuf's JSON mapping
  if (v.is_number()) return v.get<int64_t>();
  return 0;
}

// The synthetic trial under `searcher_block` (lines indented by two spaces).
std::string Yaml(const std::string& name, const std::string& searcher_block, int max_length, int delay_ms) {
  return absl::StrCat("name: ", name,
                      "\nhyperparameters:\n  global_batch_size: 16\n"
                      "  learning_rate:\n    type: log\n    minval: -3\n    maxval: -1\n"
                      "  hidden_size: 16\n  dropout: 0.1\n  batch_delay_ms: ",
                      delay_ms, "\nsearcher:\n", searcher_block,
                      "  metric: validation_loss\n  smaller_is_better: true\n  max_length:\n    batches: ", max_length,
                      "\nmin_validation_period:\n  batches: 20\nscheduling_unit: 10\n"
                      "reproducibility:\n  experiment_seed: 5\n"
                      "environment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
                      "data:\n  train_size: 256\n  val_size: 64\n");
}

// Metric rows of `group` by total_batches.
std::map<int64_t, json> MetricsByBatch(TestCluster& cluster, int64_t trial_id, const std::string& group) {
  std::map<int64_t, json> out;
  for (const json& r : cluster.Metrics(static_cast<int>(trial_id), group)) out[Int(r["total_batches"])] = r["metrics"];
  return out;
}

// Must show 2a: exploited trials resume from the donor's checkpoint. With
// perturb_factors [1.0] and no resampling a child has its parent's hparams,
// so its first metrics after the copy equal the parent's own continuation
// bit for bit (model, optimizer, RNG, data position all came along).
TEST(PbtTest, ChildrenStartFromTheParentsCheckpointWithItsWholeState) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a", AgentOptions().set_slots(4));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  int id = cluster.CreateExperiment(Yaml("pbt", "  name: pbt\n  population_size: 4\n  perturb_period: 20\n"
                                                "  burn_in_period: 0\n  truncate_fraction: 0.25\n"
                                                "  resample_probability: 0\n"
                                                "  perturb_factors: [1.0]\n",
                                         60, 2),
                                    "pbt");
  ASSERT_GT(id, 0);
  ASSERT_TRUE(cluster.WaitForState(id, "STATE_COMPLETED", kLong)) << cluster.Trials(id).dump() << cluster.MasterLog();
  json trials = cluster.Trials(id);
  // 4 trials, then one child per round boundary (20 and 40).
  ASSERT_EQ(trials.size(), 6u) << trials.dump();
  std::map<int64_t, json> by_id;
  for (const json& t : trials) by_id[Int(t["id"])] = t;
  int children = 0;
  for (const json& t : trials) {
    int64_t parent = Int(t.value("parent_trial_id", json(0)));
    if (parent == 0) continue;
    ++children;
    const int64_t child_id = Int(t["id"]);
    SCOPED_TRACE(absl::StrCat("child ", child_id, " of ", parent));
    ASSERT_TRUE(by_id.count(parent));
    EXPECT_EQ(t["hparams"], by_id[parent]["hparams"]);
    EXPECT_EQ(t["seed"], by_id[parent]["seed"]);
    const std::string uuid = t.value("parent_checkpoint_uuid", "");
    ASSERT_FALSE(uuid.empty()) << t.dump();
    json ck = cluster.Get("/api/v1/checkpoints/" + uuid)["checkpoint"];
    EXPECT_EQ(Int(ck["trial_id"]), parent) << ck.dump();
    const int64_t at = Int(ck["total_batches"]);
    EXPECT_TRUE(at == 20 || at == 40) << ck.dump();
    // The child trained from `at`: no metrics before it, and its first
    // training and validation rows equal the parent's at the same batches.
    std::map<int64_t, json> child_val = MetricsByBatch(cluster, child_id, "validation");
    std::map<int64_t, json> child_train = MetricsByBatch(cluster, child_id, "training");
    ASSERT_FALSE(child_val.empty());
    ASSERT_FALSE(child_train.empty());
    EXPECT_GT(child_train.begin()->first, at);
    EXPECT_EQ(child_val.begin()->first, at + 20);
    std::map<int64_t, json> parent_val = MetricsByBatch(cluster, parent, "validation");
    std::map<int64_t, json> parent_train = MetricsByBatch(cluster, parent, "training");
    ASSERT_TRUE(parent_val.count(at + 20)) << "the parent was exploited in the same round?";
    EXPECT_EQ(child_val.begin()->second, parent_val[at + 20]);
    EXPECT_EQ(child_train.begin()->second, parent_train[child_train.begin()->first]);
    std::string out, err;
    ASSERT_EQ(cluster.Cli({"trial", "describe", std::to_string(child_id)}, &out, &err), 0) << err;
    EXPECT_THAT(out, HasSubstr(absl::StrCat("trial ", parent, ", checkpoint ", uuid)));
  }
  EXPECT_EQ(children, 2);
  // preview-search shows the generations of examples/synthetic/pbt.yaml:
  // 4 trials + 1 child at each boundary after its burn-in (80 and 120; none
  // at 40), 4 x 160 batches trained.
  std::string out, err;
  ASSERT_EQ(cluster.Cli({"preview-search", std::string(DET_SOURCE_DIR) + "/examples/synthetic/pbt.yaml"}, &out, &err),
            0)
      << err;
  EXPECT_THAT(out, HasSubstr("Searcher: pbt"));
  EXPECT_THAT(out, HasSubstr("Total: 6 trials (2 stopped early), 640 batches")) << out;
}

// Must show 2b: kill -9 of the master mid-search; the restarted master
// resumes the pbt, tpe and ASHA-with-TPE-sampler searchers from SQLite and
// each experiment completes with exactly the trials its searcher plans (a
// searcher started over would create more).
// The attack: a child explored the model's width. It used to train its
// parent's width under hparams that said another (LibTorch's load took the
// checkpoint's shapes); now it errors, naming the tensor and both shapes.
// With `explore` leaving the width out, every child keeps its parent's and
// completes.
TEST(PbtTest, AChildOfAnotherWidthErrorsAndExploreKeepsTheParentsWidth) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a", AgentOptions().set_slots(4));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  auto yaml = [](const std::string& name, const std::string& explore) {
    return absl::StrReplaceAll(
        Yaml(name,
             "  name: pbt\n  population_size: 4\n  perturb_period: 20\n  truncate_fraction: 0.5\n"
             "  resample_probability: 1\n" + explore,
             40, 0),
        {{"  hidden_size: 16\n", "  hidden_size:\n    type: categorical\n    vals: [8, 16, 24, 32, 40, 48, 56, 64]\n"}});
  };
  int all = cluster.CreateExperiment(yaml("pbt-all", ""), "pbt-all");
  int kept = cluster.CreateExperiment(yaml("pbt-kept", "  explore: [learning_rate]\n"), "pbt-kept");
  ASSERT_GT(all, 0);
  ASSERT_GT(kept, 0);
  for (int id : {all, kept}) {
    ASSERT_TRUE(PollUntil(
        [&] {
          std::string state = cluster.ExperimentState(id);
          return state == "STATE_COMPLETED" || state == "STATE_ERROR";
        },
        kLong))
        << cluster.Trials(id).dump() << cluster.MasterLog();
  }
  auto children = [&](int id) {
    std::vector<std::pair<json, json>> out;  // (child, parent)
    json trials = cluster.Trials(id);
    std::map<int64_t, json> by_id;
    for (const json& t : trials) by_id[Int(t["id"])] = t;
    for (const json& t : trials) {
      int64_t parent = Int(t.value("parent_trial_id", json(0)));
      if (parent != 0) out.emplace_back(t, by_id[parent]);
    }
    return out;
  };
  int other_width = 0;
  for (const auto& [child, parent] : children(all)) {
    if (child["hparams"]["hidden_size"] == parent["hparams"]["hidden_size"]) continue;
    ++other_width;
    EXPECT_EQ(child["state"], "STATE_ERROR") << child.dump();
    json logs = cluster.Get(absl::StrCat("/api/v1/trials/", Int(child["id"]), "/logs"));
    EXPECT_THAT(logs.dump(), HasSubstr("has shape [")) << logs.dump();
    EXPECT_THAT(logs.dump(), HasSubstr("searcher.explore"));
  }
  EXPECT_GE(other_width, 1);  // the seed's draws give at least one
  auto kept_children = children(kept);
  ASSERT_EQ(kept_children.size(), 2u);
  for (const auto& [child, parent] : kept_children) {
    EXPECT_EQ(child["hparams"]["hidden_size"], parent["hparams"]["hidden_size"]) << child.dump();
    EXPECT_EQ(child["state"], "STATE_COMPLETED") << child.dump();
  }
  EXPECT_EQ(cluster.ExperimentState(kept), "STATE_COMPLETED");
}

TEST(PbtTest, MasterKillMidSearchResumesEverySearcher) {
  TempDir dir;
  TestCluster cluster(dir);
  cluster.StartAgent("a", AgentOptions().set_slots(4));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)));
  int pbt = cluster.CreateExperiment(
      Yaml("pbt",
           "  name: pbt\n  population_size: 3\n  perturb_period: 20\n  burn_in_period: 0\n"
           "  perturb_factors: [0.8, 1.25]\n",
           60, 10),
      "pbt");
  int tpe = cluster.CreateExperiment(
      Yaml("tpe", "  name: tpe\n  max_trials: 4\n  max_concurrent_trials: 1\n  n_startup_trials: 2\n", 20, 10), "tpe");
  int asha_tpe = cluster.CreateExperiment(Yaml("asha-tpe",
                                               "  name: adaptive_asha\n  sampler: tpe\n  n_startup_trials: 2\n"
                                               "  max_trials: 5\n  max_concurrent_trials: 1\n  max_rungs: 2\n"
                                               "  divisor: 2\n",
                                               40, 10),
                                          "asha-tpe");
  ASSERT_GT(pbt, 0);
  ASSERT_GT(tpe, 0);
  ASSERT_GT(asha_tpe, 0);
  // Mid-search: the pbt population has passed its first round.
  ASSERT_TRUE(PollUntil([&] { return cluster.Trials(pbt).size() >= 4; }, kLong)) << cluster.Trials(pbt).dump();
  cluster.KillMaster();
  cluster.RestartMaster();
  ASSERT_TRUE(cluster.WaitForState(pbt, "STATE_COMPLETED", kLong)) << cluster.Trials(pbt).dump() << cluster.MasterLog();
  ASSERT_TRUE(cluster.WaitForState(tpe, "STATE_COMPLETED", kLong)) << cluster.Trials(tpe).dump() << cluster.MasterLog();
  ASSERT_TRUE(cluster.WaitForState(asha_tpe, "STATE_COMPLETED", kLong))
      << cluster.Trials(asha_tpe).dump() << cluster.MasterLog();
  // pbt: 3 trials + 1 child at each of the 2 round boundaries; every child has its parent's checkpoint.
  json trials = cluster.Trials(pbt);
  EXPECT_EQ(trials.size(), 5u) << trials.dump();
  int lr_checked = 0;
  std::string lineage;  // each child's start and training rows, for a failure
  for (const json& t : trials) {
    EXPECT_EQ(t.value("state", ""), "STATE_COMPLETED") << t.dump();
    if (Int(t.value("parent_trial_id", json(0))) == 0) continue;
    std::string batches;
    for (const auto& [b, m] : MetricsByBatch(cluster, Int(t["id"]), "training")) absl::StrAppend(&batches, " ", b);
    absl::StrAppend(&lineage, "\ntrial ", Int(t["id"]), " parent ", Int(t["parent_trial_id"]), " training at",
                    batches, "\n", cluster.Get(absl::StrCat("/api/v1/trials/", Int(t["id"]), "/logs")).dump());
    EXPECT_FALSE(t.value("parent_checkpoint_uuid", "").empty()) << t.dump();
    // Explore took effect: the restored optimizer trains with the child's
    // own (perturbed) learning rate, not the parent's. (Its first rows
    // after batch 20 precede the LR scheduler's first step, at 50.)
    std::map<int64_t, json> train = MetricsByBatch(cluster, Int(t["id"]), "training");
    ASSERT_FALSE(train.empty());
    if (train.begin()->first != 30) continue;
    const double lr = t["hparams"]["learning_rate"].get<double>();
    EXPECT_NEAR(train.begin()->second["lr"].get<double>(), lr, lr * 1e-9) << t.dump();
    ++lr_checked;
  }
  EXPECT_EQ(lr_checked, 1) << lineage << cluster.MasterLog();  // the child of the first round
  EXPECT_EQ(cluster.Trials(tpe).size(), 4u);
  EXPECT_EQ(cluster.Trials(asha_tpe).size(), 5u) << cluster.Trials(asha_tpe).dump();
}

}  // namespace
}  // namespace det::testing
