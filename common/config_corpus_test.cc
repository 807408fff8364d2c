// Determined's own experiment configs run as they are: every config of the
// corpus under tests/data/configs/determined/<version>/, written in the
// shapes of Determined's published examples from 0.26 to 0.38, is accepted,
// and every warning names its field.
#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/config_fields.h"
#include "common/experiment_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kCorpus = fs::path(DET_SOURCE_DIR) / "tests/data/configs/determined";

std::vector<fs::path> CorpusFiles() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(kCorpus)) {
    if (entry.is_regular_file() && entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string Name(const fs::path& file) { return fs::relative(file, kCorpus).string(); }

TEST(ConfigCorpusTest, CoversDeterminedVersionsFrom026To038) {
  std::set<std::string> versions;
  std::vector<fs::path> files = CorpusFiles();
  for (const fs::path& f : files) versions.insert(f.parent_path().filename().string());
  EXPECT_GE(files.size(), 20u);
  EXPECT_THAT(versions, ::testing::IsSupersetOf({"0.26", "0.29", "0.32", "0.35", "0.38"}));
}

TEST(ConfigCorpusTest, EveryConfigIsAcceptedAndEveryWarningNamesItsField) {
  ParseOptions options;
  options.default_experiment_seed = 1;
  for (const fs::path& file : CorpusFiles()) {
    SCOPED_TRACE(Name(file));
    auto config = LoadExperimentConfigFile(file.string(), options);
    ASSERT_TRUE(config.ok()) << config.status();
    std::set<std::string> seen;
    for (const std::string& w : config->warnings) {
      // "field 'PATH' is accepted but not used: why".
      ASSERT_EQ(w.rfind("field '", 0), 0u) << w;
      std::string path = w.substr(7, w.find('\'', 7) - 7);
      const ConfigField* field = FindConfigField(path);
      ASSERT_NE(field, nullptr) << w;
      EXPECT_EQ(field->path, path) << w;
      EXPECT_FALSE(field->unused_reason.empty()) << w;
      EXPECT_THAT(w, HasSubstr(std::string(field->unused_reason))) << w;
      EXPECT_TRUE(seen.insert(path).second) << "two warnings for " << path;
    }
  }
}

// The refused-then fields of issue 17, each accepted with exactly its warning.
TEST(ConfigCorpusTest, LegacyFieldsWarnOncePerField) {
  auto config = LoadExperimentConfigFile((kCorpus / "0.35/legacy_fields.yaml").string());
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<std::string> paths;
  for (const std::string& w : config->warnings) paths.push_back(w.substr(7, w.find('\'', 7) - 7));
  EXPECT_THAT(paths, ::testing::UnorderedElementsAre(
                         "entrypoint", "checkpoint_storage.propagation", "checkpoint_storage.checkpoint_path",
                         "checkpoint_storage.tensorboard_path", "resources.slots", "resources.agent_label",
                         "environment.force_pull_image", "environment.ports", "tensorboard_storage", "data_layer",
                         "retention_policy", "security", "internal"));
  // Checkpoints still go to host_path; the deprecated container path is not used.
  EXPECT_EQ(config->checkpoint_storage->host_path, "/tmp/det-checkpoints");
  EXPECT_EQ(config->checkpoint_storage->storage_path, "");
}

constexpr char kMinimal[] = R"(hyperparameters:
  global_batch_size: 8
searcher:
  name: single
  metric: loss
  max_length: {batches: 10}
)";

absl::StatusOr<ExperimentConfig> Parse(const std::string& extra) {
  ParseOptions options;
  options.default_experiment_seed = 1;
  return ParseExperimentConfig(std::string(kMinimal) + extra, "config.yaml", options);
}

TEST(DeterminedFieldsTest, EntrypointIsAStringOrAListOfStrings) {
  auto list = Parse("entrypoint: [python3, train.py, --epochs, 1]\n");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->entrypoint, "python3 train.py --epochs 1");
  EXPECT_THAT(list->warnings, ::testing::ElementsAre(HasSubstr("field 'entrypoint' is accepted but not used")));
  auto bad = Parse("entrypoint: {python: train.py}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("field 'entrypoint' must be a string, got a map"));
  auto nested = Parse("entrypoint: [python3, [x]]\n");
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(nested.status().message(), HasSubstr("entrypoint[1]"));
}

TEST(DeterminedFieldsTest, CheckpointStorageWithoutTypeInheritsTheMastersStorage) {
  auto c = Parse("checkpoint_storage:\n  save_trial_best: 3\n  storage_path: exp\n");
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->checkpoint_storage.has_value());
  EXPECT_EQ(c->checkpoint_storage->host_path, "");  // the master's --checkpoint-root
  EXPECT_EQ(c->checkpoint_storage->storage_path, "exp");
  EXPECT_EQ(c->checkpoint_storage->save_trial_best, 3);
  EXPECT_TRUE(c->warnings.empty());
  // The stored JSON form parses back to the same storage.
  auto again = ParseExperimentConfigJson(ExperimentConfigToJson(*c), "stored");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->checkpoint_storage->host_path, "");
  EXPECT_EQ(again->checkpoint_storage->save_trial_best, 3);
  // With a type, host_path is still required; other types than shared_fs
  // and s3 are refused.
  auto typed = Parse("checkpoint_storage:\n  type: shared_fs\n");
  ASSERT_FALSE(typed.ok());
  EXPECT_THAT(typed.status().message(), HasSubstr("missing required field 'checkpoint_storage.host_path'"));
  auto gcs = Parse("checkpoint_storage:\n  type: gcs\n  bucket: b\n");
  ASSERT_FALSE(gcs.ok());
  EXPECT_THAT(gcs.status().message(), HasSubstr("must be shared_fs or s3, got 'gcs'"));
  // storage_path still may not leave the root.
  auto escape = Parse("checkpoint_storage:\n  storage_path: ../../etc\n");
  ASSERT_FALSE(escape.ok());
  EXPECT_THAT(escape.status().message(), HasSubstr("checkpoint_storage.storage_path"));
}

TEST(DeterminedFieldsTest, LogHyperparameterWithoutBaseUsesTen) {
  auto h = ParseExperimentConfig(
      "hyperparameters:\n  global_batch_size: 8\n  lr: {type: log, minval: -3, maxval: -1}\n"
      "searcher: {name: single, metric: loss, max_length: 10}\n",
      "config.yaml");
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->hyperparameters.at("lr").base, 10);
}

TEST(DeterminedFieldsTest, FieldsThatDoNotApplyAreAcceptedWithOneWarningEach) {
  auto c = Parse(
      "resources:\n  slots: 2\nenvironment:\n  ports: {tensorboard: 6006}\ndata_layer: {type: shared_fs}\n"
      "retention_policy: {log_retention_days: 7}\nsecurity: {kerberos: {config_file: /etc/krb5.conf}}\n"
      "internal: {native: null}\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->warnings,
              ::testing::UnorderedElementsAre(
                  "field 'resources.slots' is accepted but not used: Determined's slot count for commands and "
                  "notebooks; experiments use slots_per_trial",
                  "field 'environment.ports' is accepted but not used: det-cpp trials expose no ports",
                  HasSubstr("field 'data_layer' is accepted but not used: "),
                  HasSubstr("field 'retention_policy' is accepted but not used: "),
                  HasSubstr("field 'security' is accepted but not used: "),
                  HasSubstr("field 'internal' is accepted but not used: ")));
  // Still strict about everything else.
  auto typo = Parse("resources:\n  slotz: 2\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(typo.status().message(), HasSubstr("unknown field 'resources.slotz'"));
}

}  // namespace
}  // namespace det
