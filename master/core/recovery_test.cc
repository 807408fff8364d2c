// What a restarted master resumes an experiment with: the resolved config
// stored at creation (config_json), not its YAML parsed again with the
// restarted master's defaults. An "older master" is played by editing the
// stored row between two MasterCores on the same SQLite file.
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "master/core/core_test_fixture.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace det::master {
namespace {

// A random search of 3 trials whose YAML leaves max_concurrent_trials to
// the default (0: no limit) and gives no experiment seed.
std::string RandomConfig(const std::string& checkpoint_dir) {
  return R"(name: recovery-test
hyperparameters:
  global_batch_size: 16
  learning_rate: {type: log, base: 10, minval: -4, maxval: -1}
searcher:
  name: random
  metric: validation_loss
  max_trials: 3
  max_length: {batches: 100}
checkpoint_storage:
  type: shared_fs
  host_path: )" + checkpoint_dir + "\n";
}

class RecoveryTest : public MasterCoreFixture {
 protected:
  // Created paused: its searcher has planned nothing yet.
  int64_t CreatePaused() {
    apiv1::CreateExperimentRequest req;
    req.set_config_yaml(RandomConfig(dir_ / "checkpoints"));
    req.set_trial_so(det::testing::FakeTrialSo());
    req.set_activate(false);
    auto resp = core_->CreateExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    return resp.ok() ? resp->experiment().id() : 0;
  }
  // Rewrites the stored resolved config as `edit` says (what an older
  // master would have stored).
  template <typename Edit>
  void EditStoredConfig(int64_t id, Edit edit) {
    auto row = core_->store()->GetExperiment(id);
    ASSERT_TRUE(row.ok()) << row.status();
    row->config_json = edit(row->config_json);
    ASSERT_TRUE(core_->store()->UpdateExperiment(*row).ok());
  }
  size_t TrialsAfterActivating(int64_t id) {
    apiv1::ActivateExperimentRequest req;
    req.set_experiment_id(id);
    auto resp = core_->ActivateExperiment(req);
    EXPECT_TRUE(resp.ok()) << resp.status();
    auto trials = core_->store()->ListTrials(id);
    EXPECT_TRUE(trials.ok()) << trials.status();
    return trials.ok() ? trials->size() : 0;
  }
  // Each trial's hparams and seed, in request order.
  std::vector<std::string> Draws(int64_t id) {
    std::vector<std::string> out;
    auto trials = core_->store()->ListTrials(id);
    EXPECT_TRUE(trials.ok()) << trials.status();
    if (!trials.ok()) return out;
    for (const auto& t : *trials) out.push_back(absl::StrCat(t.hparams_json, " seed ", t.seed));
    return out;
  }
};

TEST_F(RecoveryTest, RestartedMasterKeepsTheDefaultsTheExperimentWasCreatedWith) {
  const int64_t id = CreatePaused();
  ASSERT_GT(id, 0);
  // The master that created it had defaulted max_concurrent_trials to 1; the
  // YAML does not say so, and this master's default is "no limit".
  EditStoredConfig(id, [](const std::string& text) {
    nlohmann::json j = nlohmann::json::parse(text);
    EXPECT_EQ(j["searcher"]["max_concurrent_trials"], 0);
    j["searcher"]["max_concurrent_trials"] = 1;
    return j.dump();
  });
  Restart();
  EXPECT_EQ(TrialsAfterActivating(id), 1u) << "the search must run with the stored value, not a re-parsed YAML's";
}

TEST_F(RecoveryTest, ExperimentSeedDrawnAtCreationSurvivesARestart) {
  // The YAML has no experiment seed, so creation drew one (from the clock)
  // and stored it; 12345 plays that draw, which a restart in the same second
  // would draw again.
  const int64_t id = CreatePaused();
  ASSERT_GT(id, 0);
  const uint32_t seed = 12345;
  auto row = core_->store()->GetExperiment(id);
  ASSERT_TRUE(row.ok());
  nlohmann::json config = nlohmann::json::parse(row->config_json);
  ASSERT_TRUE(config["reproducibility"]["experiment_seed"].is_number_unsigned());
  config["reproducibility"]["experiment_seed"] = seed;
  row->config_json = config.dump();
  // A row without a searcher snapshot (an older master's) makes the
  // restarted master create the searcher from the config's seed.
  row->searcher_state_json = "";
  ASSERT_TRUE(core_->store()->UpdateExperiment(*row).ok());
  Restart();
  ASSERT_EQ(TrialsAfterActivating(id), 3u);
  // The same draws as a search given that seed in its YAML.
  apiv1::CreateExperimentRequest req;
  req.set_config_yaml(RandomConfig(dir_ / "checkpoints") +
                      absl::StrCat("reproducibility: {experiment_seed: ", seed, "}\n"));
  req.set_trial_so(det::testing::FakeTrialSo());
  req.set_activate(true);
  auto twin = core_->CreateExperiment(req);
  ASSERT_TRUE(twin.ok()) << twin.status();
  EXPECT_EQ(Draws(id), Draws(twin->experiment().id()));
}

TEST_F(RecoveryTest, UnparseableStoredConfigFallsBackToTheYamlAndLosesNothing) {
  const int64_t id = CreatePaused();
  ASSERT_GT(id, 0);
  EditStoredConfig(id, [](const std::string&) { return std::string("{\"searcher\": 7}"); });
  Restart();
  // Still loaded (not skipped): the YAML's search, with this master's
  // defaults.
  EXPECT_EQ(TrialsAfterActivating(id), 3u);
}

}  // namespace
}  // namespace det::master
