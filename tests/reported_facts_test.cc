// End-to-end test that every reported fact is the measured one (issue 45,
// must-show 1): an adaptive_asha search of the synthetic example runs to its
// end on a real master and agent with the default checkpoint GC policy; then
// for every completed trial REST and det-cli show a best checkpoint that
// exists on disk, whose size_bytes is its files' total size there, with the
// batches, epochs and validation metrics it was taken with, and the best
// validation with its batch; the experiment names its best and latest
// checkpoints; list-checkpoints --best 1 and download --top-n 2 return the
// right ones.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
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

// A double (nlohmann's value() returns the default's type: NAN is a float).
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// 4 trials, rungs at 8 and 32 batches (divisor 4, 2 rungs), validation and
// a checkpoint every 8 batches; records_per_epoch 256 with global batch 32:
// an epoch is 8 batches. The default GC policy (best and latest per trial)
// deletes the other checkpoints of each trial once it ends.
std::string Config(const std::string& checkpoint_dir) {
  return absl::StrCat(R"(name: reported-facts
hyperparameters:
  global_batch_size: 32
  learning_rate:
    type: log
    base: 10
    minval: -3
    maxval: -0.5
  hidden_size: 16
  dropout: 0.1
searcher:
  name: adaptive_asha
  metric: validation_loss
  smaller_is_better: true
  max_trials: 4
  max_concurrent_trials: 2
  divisor: 4
  max_rungs: 2
  mode: aggressive
  max_length:
    batches: 32
records_per_epoch: 256
min_validation_period:
  batches: 8
min_checkpoint_period:
  batches: 8
scheduling_unit: 4
reproducibility:
  experiment_seed: 7
checkpoint_storage:
  type: shared_fs
  host_path: )", checkpoint_dir, R"(
environment:
  environment_variables:
    - OMP_NUM_THREADS=1
data:
  train_size: 256
  val_size: 64
  features: 16
  seed: 1
)");
}

// Total size of the regular files below `dir` (0 when it does not exist).
int64_t SizeOnDisk(const fs::path& dir) {
  int64_t total = 0;
  if (!fs::is_directory(dir)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

// The unarchived validation of `validations` at `batches` (null: none).
const nlohmann::json* ValidationAt(const nlohmann::json& validations, int64_t batches) {
  const nlohmann::json* found = nullptr;
  for (const auto& v : validations) {
    if (v.value("total_batches", int64_t{0}) == batches && !v.value("archived", false)) found = &v;
  }
  return found;
}

int64_t Int(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return 0;
  const auto& v = j[key];
  return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
}

// The value of `line`'s key in det-cli's "Key:   value" output ("" if absent).
std::string Field(const std::string& out, const std::string& key) {
  const std::string prefix = key + ":";
  size_t at = 0;
  while ((at = out.find(prefix, at)) != std::string::npos) {
    if (at == 0 || out[at - 1] == '\n') {
      size_t end = out.find('\n', at);
      std::string v = out.substr(at + prefix.size(), end == std::string::npos ? std::string::npos
                                                                              : end - at - prefix.size());
      v.erase(0, v.find_first_not_of(' '));
      return v;
    }
    at += prefix.size();
  }
  return "";
}

class ReportedFactsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = std::make_unique<TestCluster>(
        dir_, TestClusterOptions().set_cli_timeout(std::chrono::minutes(2)).set_http_read_timeout(
                  std::chrono::seconds(30)));
    cluster_->StartAgent("a", AgentOptions().set_slots(2));
    ASSERT_TRUE(PollUntil([&] { return cluster_->ConnectedAgents() == 1; }, std::chrono::seconds(30)));
    exp_ = cluster_->CreateExperiment(Config(dir_ / "checkpoints"), "facts");
    ASSERT_GT(exp_, 0);
    ASSERT_TRUE(cluster_->WaitForState(exp_, "STATE_COMPLETED", std::chrono::minutes(4))) << cluster_->MasterLog();
  }

  // Checks trial `t` (REST JSON) and returns its best checkpoint (REST).
  nlohmann::json CheckTrial(const nlohmann::json& t) {
    const int id = t["id"].get<int>();
    SCOPED_TRACE(absl::StrCat("trial ", id));
    const nlohmann::json validations = cluster_->Metrics(id, "validation");
    EXPECT_FALSE(validations.empty());

    // Best validation: its batch, the best loss of all the trial's validations.
    const nlohmann::json& best_val = t["best_validation"];
    const int64_t best_val_batches = Int(best_val, "total_batches");
    EXPECT_GT(best_val_batches, 0) << t.dump(1);
    double best_loss = std::numeric_limits<double>::infinity();
    int64_t best_loss_batches = 0;
    for (const auto& v : validations) {
      const double loss = v["metrics"]["validation_loss"].get<double>();
      if (loss < best_loss) best_loss = loss, best_loss_batches = Int(v, "total_batches");
    }
    EXPECT_EQ(best_val_batches, best_loss_batches) << validations.dump(1);
    EXPECT_DOUBLE_EQ(best_val["metrics"].value("validation_loss", kNaN), best_loss);

    // Best checkpoint: on disk, its size, its batches and epochs, its validation.
    const std::string uuid = t.value("best_checkpoint_uuid", "");
    EXPECT_FALSE(uuid.empty()) << t.dump(1);
    if (uuid.empty()) return nlohmann::json();
    int status = 0;
    nlohmann::json c = cluster_->Get("/api/v1/checkpoints/" + uuid, &status)["checkpoint"];
    EXPECT_EQ(status, 200);
    EXPECT_EQ(c.value("state", ""), "CHECKPOINT_STATE_COMPLETED") << c.dump(1);
    const fs::path path = c.value("storage_path", "");
    EXPECT_TRUE(fs::is_directory(path)) << path;
    EXPECT_GT(SizeOnDisk(path), 0);
    EXPECT_EQ(Int(c, "size_bytes"), SizeOnDisk(path)) << c.dump(1);
    int64_t resources = 0;
    for (const auto& [file, size] : c["resources"].items()) {
      resources += size.is_string() ? std::stoll(size.get<std::string>()) : size.get<int64_t>();
    }
    EXPECT_EQ(Int(c, "size_bytes"), resources);
    const int64_t batches = Int(c, "total_batches");
    EXPECT_GT(batches, 0);
    EXPECT_DOUBLE_EQ(c.value("total_epochs", 0.0), static_cast<double>(batches) / 8) << c.dump(1);
    EXPECT_EQ(Int(c, "total_records"), batches * 32);
    const nlohmann::json* v = ValidationAt(validations, batches);
    EXPECT_NE(v, nullptr) << "no validation at " << batches << ": " << validations.dump(1);
    if (v != nullptr) EXPECT_EQ(c["validation_metrics"], (*v)["metrics"]) << c.dump(1);
    EXPECT_DOUBLE_EQ(c.value("searcher_metric", kNaN), c["validation_metrics"].value("validation_loss", kNaN));
    // The best of the trial's completed checkpoints, which are all in storage.
    const nlohmann::json all = cluster_->Get(absl::StrCat("/api/v1/trials/", id, "/checkpoints"))["checkpoints"];
    for (const auto& other : all) {
      if (other.value("state", "") != "CHECKPOINT_STATE_COMPLETED") continue;
      EXPECT_TRUE(fs::is_directory(other.value("storage_path", ""))) << other.dump(1);
      if (other.contains("searcher_metric")) {
        EXPECT_LE(c.value("searcher_metric", kNaN), other["searcher_metric"].get<double>()) << other.dump(1);
      }
    }

    // det-cli says the same.
    std::string out, err;
    EXPECT_EQ(cluster_->Cli({"trial", "describe", std::to_string(id)}, &out, &err), 0) << err;
    EXPECT_EQ(Field(out, "Best checkpoint"), uuid) << out;
    EXPECT_THAT(Field(out, "Best validation"), HasSubstr(absl::StrCat("(batch ", best_val_batches, ")"))) << out;
    EXPECT_EQ(cluster_->Cli({"checkpoint", "describe", uuid}, &out, &err), 0) << err;
    EXPECT_EQ(Field(out, "Batches"), std::to_string(batches)) << out;
    EXPECT_NE(Field(out, "Epochs"), "0") << out;
    EXPECT_NE(Field(out, "Epochs"), "unknown") << out;
    EXPECT_NE(Field(out, "Size"), "0 B") << out;
    EXPECT_THAT(Field(out, "Validation"), HasSubstr("validation_loss")) << out;
    return c;
  }

  TempDir dir_;
  std::unique_ptr<TestCluster> cluster_;
  int exp_ = 0;
};

TEST_F(ReportedFactsTest, AdaptiveAshaReportsTheMeasuredFacts) {
  const nlohmann::json trials = cluster_->Trials(exp_);
  ASSERT_EQ(trials.size(), 4u) << trials.dump(1);
  std::optional<double> best_metric;
  std::string best_uuid;
  for (const auto& t : trials) {
    ASSERT_EQ(t.value("state", ""), "STATE_COMPLETED") << t.dump(1);
    nlohmann::json c = CheckTrial(t);
    if (c.is_object() && c.contains("searcher_metric") &&
        (!best_metric || c["searcher_metric"].get<double>() < *best_metric)) {
      best_metric = c["searcher_metric"].get<double>();
      best_uuid = c["uuid"];
    }
  }
  ASSERT_FALSE(best_uuid.empty());

  // The experiment: best checkpoint of all, latest checkpoint, progress done.
  const nlohmann::json e = cluster_->Get(absl::StrCat("/api/v1/experiments/", exp_))["experiment"];
  EXPECT_EQ(e.value("best_checkpoint_uuid", ""), best_uuid) << e.dump(1);
  EXPECT_FALSE(e.value("latest_checkpoint_uuid", "").empty()) << e.dump(1);
  EXPECT_DOUBLE_EQ(e.value("progress", 0.0), 1.0);
  std::string out, err;
  ASSERT_EQ(cluster_->Cli({"experiment", "describe", std::to_string(exp_)}, &out, &err), 0) << err;
  EXPECT_EQ(Field(out, "Best checkpoint"), best_uuid) << out;
  EXPECT_EQ(Field(out, "Latest checkpoint"), e.value("latest_checkpoint_uuid", "")) << out;
  EXPECT_EQ(Field(out, "Progress"), "100%") << out;

  // det-cli experiment list-checkpoints: the fact columns are filled.
  ASSERT_EQ(cluster_->Cli({"experiment", "list-checkpoints", std::to_string(exp_)}, &out, &err), 0) << err;
  EXPECT_THAT(out, HasSubstr(best_uuid));
  EXPECT_THAT(out, ::testing::Not(HasSubstr(" 0 B"))) << out;

  // --best 1 is the experiment's best checkpoint; download --top-n 2 writes
  // the two best, each the files in checkpoint storage.
  ASSERT_EQ(cluster_->Cli({"experiment", "list-checkpoints", std::to_string(exp_), "--best", "1", "--json"}, &out,
                          &err),
            0)
      << err;
  const nlohmann::json best1 = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(best1.is_object()) << out;
  ASSERT_EQ(best1["checkpoints"].size(), 1u) << out;
  EXPECT_EQ(best1["checkpoints"][0].value("uuid", ""), best_uuid);
  const nlohmann::json ranked = cluster_->Get(absl::StrCat("/api/v1/experiments/", exp_,
                                                           "/checkpoints?sort_by=searcher_metric&states=completed"));
  std::vector<std::string> top2;
  for (const auto& c : ranked["checkpoints"]) {
    if (top2.size() < 2 && c.contains("searcher_metric")) top2.push_back(c["uuid"]);
  }
  ASSERT_EQ(top2.size(), 2u) << ranked.dump(1);
  EXPECT_EQ(top2[0], best_uuid);
  const fs::path down = dir_ / "top2";
  ASSERT_EQ(cluster_->Cli({"experiment", "download", std::to_string(exp_), "--top-n", "2", "-o", down}, &out, &err),
            0)
      << out << err;
  std::vector<std::string> written;
  for (const auto& d : fs::directory_iterator(down)) written.push_back(d.path().filename());
  std::sort(written.begin(), written.end());
  std::vector<std::string> want = top2;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(written, want);
  for (const std::string& uuid : top2) {
    const nlohmann::json c = cluster_->Get("/api/v1/checkpoints/" + uuid)["checkpoint"];
    EXPECT_EQ(SizeOnDisk(down / uuid), SizeOnDisk(c.value("storage_path", ""))) << uuid;
  }
}

}  // namespace
}  // namespace det::testing
