// No config field is parsed and then left unread (issue 17, must-show 5).
//
// How it works: ConfigKeyRecorder collects every dotted path the parser's
// ConfigMapReader::CheckKeys would accept while a config covering every
// section is parsed, so the test sees the parser's whole vocabulary without
// a second list to keep in step. Then:
//   1. every accepted path has a row in ExperimentConfigFields()
//      (common/config_fields.cc), and every row is a path the parser accepts;
//   2. a row names either a consumer (a source file outside the parser and a
//      token, containing the field's name, that occurs in it) or the reason
//      the field does not apply here (then the config gets one warning);
//   3. each consumer file, read from the source tree, does contain its token.
// So adding a field to the parser without a row, or with a row whose
// consumer does not read it, fails here; so does a consumer losing its read.
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/config_fields.h"
#include "common/config_reader.h"
#include "common/experiment_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

namespace fs = std::filesystem;

// Fields the parser itself enforces: their one accepted value is what the
// master implements, so nothing else needs to read them.
const std::set<std::string> kValidatedOnly = {"checkpoint_storage.type"};

// The parser's own files: not consumers.
const std::set<std::string> kParserFiles = {"common/experiment_config.cc", "common/config_reader.cc",
                                            "common/hparams.cc", "common/config_fields.cc"};

// A config that visits every map the parser reads (which keys each map
// accepts is recorded whether or not the config holds them).
constexpr char kEverySection[] = R"(
name: every-section
hyperparameters:
  global_batch_size: 32
  c: {type: const, val: 1}
  i: {type: int, minval: 1, maxval: 4}
  d: {type: double, minval: 0.1, maxval: 0.5}
  l: {type: log, minval: -3, maxval: -1, base: 10}
  k: {type: categorical, vals: [a, b]}
  nested: {inner: {type: int, minval: 1, maxval: 2}}
searcher:
  name: adaptive_asha
  metric: loss
  max_length: {batches: 100}
  max_trials: 4
records_per_epoch: 100
min_validation_period: {batches: 10}
min_checkpoint_period: {epochs: 1}
checkpoint_storage: {type: shared_fs, host_path: /tmp/x}
resources: {slots_per_trial: 1}
reproducibility: {experiment_seed: 1}
environment:
  environment_variables: {cpu: [A=1], cuda: [B=2]}
data: {any: thing}
profiling: {enabled: true}
)";

// checkpoint_storage's keys depend on its type: the s3 variant as well.
std::set<std::string> ParserPaths() {
  ConfigKeyRecorder recorder;
  auto config = ParseExperimentConfig(kEverySection, "every-section.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  std::string s3 = kEverySection;
  const std::string shared_fs = "{type: shared_fs, host_path: /tmp/x}";
  s3.replace(s3.find(shared_fs), shared_fs.size(), "{type: s3, bucket: b-1}");
  auto s3_config = ParseExperimentConfig(s3, "every-section-s3.yaml");
  EXPECT_TRUE(s3_config.ok()) << s3_config.status();
  return std::set<std::string>(recorder.paths().begin(), recorder.paths().end());
}

std::string ReadSource(std::string_view relative) {
  std::ifstream in(fs::path(DET_SOURCE_DIR) / std::string(relative));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string LastSegment(std::string_view path) {
  size_t dot = path.rfind('.');
  return std::string(dot == std::string_view::npos ? path : path.substr(dot + 1));
}

TEST(ConfigFieldsTest, TheRecorderSeesTheParsersVocabulary) {
  std::set<std::string> paths = ParserPaths();
  for (const char* p : {"name", "searcher.metric", "searcher.max_length.epochs", "checkpoint_storage.save_trial_best",
                        "resources.max_slots", "environment.ports", "hyperparameters.l.base", "bind_mounts"}) {
    EXPECT_EQ(paths.count(p), 1u) << p;
  }
}

TEST(ConfigFieldsTest, EveryPathTheParserAcceptsHasARow) {
  for (const std::string& path : ParserPaths()) {
    EXPECT_NE(FindConfigField(path), nullptr)
        << "config field '" << path << "' is parsed but has no row in common/config_fields.cc: name the code "
        << "that reads it, or the reason it does not apply (then configs holding it get a warning)";
  }
}

TEST(ConfigFieldsTest, EveryRowIsAPathTheParserAccepts) {
  std::set<std::string> paths = ParserPaths();
  for (const ConfigField& f : ExperimentConfigFields()) {
    EXPECT_EQ(paths.count(std::string(f.path)), 1u) << "row '" << f.path << "' is not a field the parser accepts";
  }
}

TEST(ConfigFieldsTest, EveryParsedFieldIsReadOutsideTheParserOrWarns) {
  for (const ConfigField& f : ExperimentConfigFields()) {
    const std::string path(f.path);
    SCOPED_TRACE(path);
    if (!f.unused_reason.empty()) {
      EXPECT_TRUE(f.consumer.empty()) << "a field with a consumer needs no warning";
      continue;
    }
    ASSERT_FALSE(f.consumer.empty()) << "no consumer and no reason: the field is parsed and never read";
    ASSERT_FALSE(f.token.empty());
    EXPECT_TRUE(kParserFiles.count(std::string(f.consumer)) == 0 || kValidatedOnly.count(path) > 0)
        << f.consumer << " is the parser, not a consumer";
    EXPECT_NE(std::string(f.token).find(LastSegment(f.path)), std::string::npos)
        << "token '" << f.token << "' does not name the field";
    const std::string source = ReadSource(f.consumer);
    ASSERT_FALSE(source.empty()) << "cannot read " << f.consumer;
    EXPECT_NE(source.find(f.token), std::string::npos)
        << f.consumer << " no longer contains '" << f.token << "': who reads " << path << " now?";
  }
}

TEST(ConfigFieldsTest, EachUnusedFieldGetsOneWarningNamingIt) {
  for (const ConfigField& f : ExperimentConfigFields()) {
    if (f.unused_reason.empty()) continue;
    nlohmann::json raw = nlohmann::json::object();
    nlohmann::json* node = &raw;
    std::string path(f.path);
    for (size_t start = 0;;) {
      size_t dot = path.find('.', start);
      node = &(*node)[path.substr(start, dot - start)];
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    *node = "x";
    EXPECT_THAT(UnusedFieldWarnings(raw), ::testing::ElementsAre("field '" + path + "' is accepted but not used: " +
                                                                  std::string(f.unused_reason)));
  }
}

}  // namespace
}  // namespace det
