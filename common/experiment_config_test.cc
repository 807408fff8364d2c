#include "common/experiment_config.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_replace.h"
#include "common/config_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// Line numbers matter: tests below name them.
constexpr char kMinimal[] = R"(hyperparameters:
  global_batch_size: 32
searcher:
  name: single
  metric: validation_loss
  max_length:
    batches: 100
)";

ParseOptions FixedSeed() {
  ParseOptions o;
  o.default_experiment_seed = 42;
  return o;
}

absl::StatusOr<ExperimentConfig> Parse(const std::string& text) {
  return ParseExperimentConfig(text, "config.yaml", FixedSeed());
}

// The error message of parsing `text`, which must fail with InvalidArgument.
std::string ErrorOf(const std::string& text) {
  auto c = Parse(text);
  if (c.ok()) return "<parsed OK>";
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  return std::string(c.status().message());
}

std::string Replace(const std::string& text, const std::string& from, const std::string& to) {
  EXPECT_NE(text.find(from), std::string::npos) << from;
  return absl::StrReplaceAll(text, {{from, to}});
}

TEST(ExperimentConfigTest, MinimalConfigGetsDefaults) {
  auto c = Parse(kMinimal);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "experiment");
  EXPECT_EQ(c->description, "");
  EXPECT_TRUE(c->labels.empty());
  EXPECT_FALSE(c->entrypoint.has_value());
  ASSERT_EQ(c->hyperparameters.size(), 1u);
  EXPECT_EQ(c->hyperparameters.at("global_batch_size"), Hyperparameter::Const(32));
  EXPECT_EQ(c->searcher.name, SearcherName::kSingle);
  EXPECT_EQ(c->searcher.metric, "validation_loss");
  EXPECT_TRUE(c->searcher.smaller_is_better);
  EXPECT_EQ(c->searcher.max_length, (Length{Length::Unit::kBatches, 100}));
  EXPECT_EQ(c->searcher.max_trials, 1);
  EXPECT_EQ(c->searcher.max_concurrent_trials, 0);
  EXPECT_EQ(c->searcher.divisor, 4);
  EXPECT_EQ(c->searcher.max_rungs, 5);
  EXPECT_EQ(c->searcher.mode, AshaMode::kStandard);
  EXPECT_FALSE(c->searcher.stop_once);
  EXPECT_EQ(c->records_per_epoch, 0);
  EXPECT_FALSE(c->min_validation_period.has_value());
  EXPECT_FALSE(c->min_checkpoint_period.has_value());
  EXPECT_EQ(c->scheduling_unit, 100);
  EXPECT_FALSE(c->perform_initial_validation);
  EXPECT_EQ(c->checkpoint_policy, CheckpointPolicy::kBest);
  EXPECT_FALSE(c->checkpoint_storage.has_value());
  EXPECT_EQ(c->resources.slots_per_trial, 1);
  EXPECT_EQ(c->resources.resource_pool, "default");
  EXPECT_EQ(c->resources.weight, 1);
  EXPECT_FALSE(c->resources.priority.has_value());
  EXPECT_FALSE(c->resources.max_slots.has_value());
  EXPECT_EQ(c->max_restarts, 5);
  EXPECT_EQ(c->reproducibility.experiment_seed, 42u);  // from ParseOptions
  EXPECT_FALSE(c->reproducibility.experiment_seed_given);
  EXPECT_EQ(c->data, json::object());
  EXPECT_TRUE(c->environment.environment_variables.empty());
  EXPECT_FALSE(c->debug);
  EXPECT_FALSE(c->workspace.has_value());
  EXPECT_FALSE(c->project.has_value());
  EXPECT_TRUE(c->warnings.empty());
  EXPECT_EQ(c->yaml_text, kMinimal);
  EXPECT_EQ(c->source_name, "config.yaml");
  EXPECT_EQ(c->raw, json::parse(R"({"hyperparameters": {"global_batch_size": 32},
      "searcher": {"name": "single", "metric": "validation_loss", "max_length": {"batches": 100}}})"));
}

TEST(ExperimentConfigTest, MissingSeedComesFromTheClockOnlyWhenAbsent) {
  auto c = ParseExperimentConfig(kMinimal, "config.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->reproducibility.experiment_seed.has_value());
  EXPECT_FALSE(c->reproducibility.experiment_seed_given);

  auto given = Parse(std::string(kMinimal) + "reproducibility:\n  experiment_seed: 4294967295\n");
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->reproducibility.experiment_seed, 4294967295u);
  EXPECT_TRUE(given->reproducibility.experiment_seed_given);

  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "reproducibility:\n  experiment_seed: 4294967296\n"),
            "config.yaml:9: field 'reproducibility.experiment_seed' must be between 0 and 4294967295, got "
            "4294967296");
}

constexpr char kFull[] = R"(name: mnist-asha
description: "an ASHA search"
labels: [mnist, asha]
entrypoint: model_def:MnistTrial
workspace: ws
project: proj
debug: true
hyperparameters:
  global_batch_size: 64
  lr:
    type: log
    minval: -4
    maxval: -1
  units: {type: int, minval: 16, maxval: 128, count: 3}
  dropout: {type: double, minval: 0.1, maxval: 0.5}
  activation: {type: categorical, vals: [relu, tanh]}
  optimizer:
    name: adam
    beta: {type: const, val: 0.9}
searcher:
  name: adaptive_asha
  metric: accuracy
  smaller_is_better: false
  max_length: {epochs: 4}
  max_trials: 16
  max_concurrent_trials: 4
  divisor: 3
  max_rungs: 4
  mode: aggressive
  bracket_rungs: [3, 2]
  stop_once: true
records_per_epoch: 60000
min_validation_period: {records: 6400}
min_checkpoint_period: 500
scheduling_unit: 50
perform_initial_validation: true
checkpoint_policy: all
checkpoint_storage:
  type: shared_fs
  host_path: /tmp/ckpt
  storage_path: det
  save_experiment_best: 2
  save_trial_best: 0
  save_trial_latest: 3
resources:
  slots_per_trial: 2
  resource_pool: gpu
  weight: 0.5
  priority: 10
  max_slots: 8
max_restarts: 0
reproducibility:
  experiment_seed: 7
data:
  url: "https://example.com/mnist"
  n: 10
  ratio: 1.5e-1
  flag: false
  nothing: ~
  quoted: "123"
  list: [1, two, 3.0]
environment:
  environment_variables:
    - NCCL_DEBUG=INFO
    - EMPTY=
    - EQ=a=b
)";

TEST(ExperimentConfigTest, FullConfig) {
  auto c = Parse(kFull);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "mnist-asha");
  EXPECT_EQ(c->description, "an ASHA search");
  EXPECT_THAT(c->labels, ElementsAre("mnist", "asha"));
  EXPECT_EQ(c->entrypoint, "model_def:MnistTrial");
  EXPECT_EQ(c->workspace, "ws");
  EXPECT_EQ(c->project, "proj");
  EXPECT_TRUE(c->debug);
  const HyperparameterSpace& h = c->hyperparameters;
  EXPECT_EQ(h.at("lr"), Hyperparameter::Log(-4, -1));
  EXPECT_EQ(h.at("units"), Hyperparameter::Int(16, 128, 3));
  EXPECT_EQ(h.at("dropout"), Hyperparameter::Double(0.1, 0.5));
  EXPECT_EQ(h.at("activation"), Hyperparameter::Categorical({"relu", "tanh"}));
  EXPECT_EQ(h.at("optimizer"), Hyperparameter::Object({{"name", Hyperparameter::Const("adam")},
                                                       {"beta", Hyperparameter::Const(0.9)}}));
  const SearcherConfig& s = c->searcher;
  EXPECT_EQ(s.name, SearcherName::kAdaptiveAsha);
  EXPECT_EQ(s.metric, "accuracy");
  EXPECT_FALSE(s.smaller_is_better);
  EXPECT_EQ(s.max_length, (Length{Length::Unit::kEpochs, 4}));
  EXPECT_EQ(s.max_trials, 16);
  EXPECT_EQ(s.max_concurrent_trials, 4);
  EXPECT_EQ(s.divisor, 3);
  EXPECT_EQ(s.max_rungs, 4);
  EXPECT_EQ(s.mode, AshaMode::kAggressive);
  EXPECT_THAT(s.bracket_rungs, ElementsAre(3, 2));
  EXPECT_TRUE(s.stop_once);
  EXPECT_EQ(c->records_per_epoch, 60000);
  EXPECT_EQ(c->min_validation_period, (Length{Length::Unit::kRecords, 6400}));
  EXPECT_EQ(c->min_checkpoint_period, (Length{Length::Unit::kBatches, 500}));
  EXPECT_EQ(c->scheduling_unit, 50);
  EXPECT_TRUE(c->perform_initial_validation);
  EXPECT_EQ(c->checkpoint_policy, CheckpointPolicy::kAll);
  ASSERT_TRUE(c->checkpoint_storage.has_value());
  EXPECT_EQ(c->checkpoint_storage->type, "shared_fs");
  EXPECT_EQ(c->checkpoint_storage->host_path, "/tmp/ckpt");
  EXPECT_EQ(c->checkpoint_storage->storage_path, "det");
  EXPECT_EQ(c->checkpoint_storage->save_experiment_best, 2);
  EXPECT_EQ(c->checkpoint_storage->save_trial_best, 0);
  EXPECT_EQ(c->checkpoint_storage->save_trial_latest, 3);
  EXPECT_EQ(c->resources.slots_per_trial, 2);
  EXPECT_EQ(c->resources.resource_pool, "gpu");
  EXPECT_EQ(c->resources.weight, 0.5);
  EXPECT_EQ(c->resources.priority, 10);
  EXPECT_EQ(c->resources.max_slots, 8);
  EXPECT_EQ(c->max_restarts, 0);
  EXPECT_EQ(c->reproducibility.experiment_seed, 7u);
  EXPECT_TRUE(c->reproducibility.experiment_seed_given);
  EXPECT_EQ(c->data, json::parse(R"({"url": "https://example.com/mnist", "n": 10, "ratio": 0.15, "flag": false,
      "nothing": null, "quoted": "123", "list": [1, "two", 3.0]})"));
  EXPECT_TRUE(c->data["n"].is_number_integer());
  EXPECT_TRUE(c->data["list"][2].is_number_float());
  EXPECT_THAT(c->environment.environment_variables,
              ElementsAre(Pair("NCCL_DEBUG", "INFO"), Pair("EMPTY", ""), Pair("EQ", "a=b")));
  EXPECT_TRUE(c->raw.contains("data"));
  EXPECT_EQ(c->raw["searcher"]["bracket_rungs"], json::parse("[3, 2]"));
}

TEST(ExperimentConfigTest, ToJsonFillsDefaultsAndRoundTrips) {
  for (const char* text : {kMinimal, kFull}) {
    auto c = Parse(text);
    ASSERT_TRUE(c.ok()) << c.status();
    json j = ExperimentConfigToJson(*c);
    auto again = ParseExperimentConfigJson(j, "stored", FixedSeed());
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << j.dump(2);
    EXPECT_EQ(ExperimentConfigToJson(*again), j);
    // JSON is YAML, so the stored text parses too.
    auto from_text = ParseExperimentConfig(again->yaml_text, "stored.json", FixedSeed());
    ASSERT_TRUE(from_text.ok()) << from_text.status();
    EXPECT_EQ(ExperimentConfigToJson(*from_text), j);
  }
  json j = ExperimentConfigToJson(*Parse(kMinimal));
  EXPECT_EQ(j["name"], "experiment");
  EXPECT_EQ(j["scheduling_unit"], 100);
  EXPECT_EQ(j["max_restarts"], 5);
  EXPECT_EQ(j["checkpoint_policy"], "best");
  EXPECT_EQ(j["searcher"]["name"], "single");
  EXPECT_EQ(j["searcher"]["smaller_is_better"], true);
  EXPECT_EQ(j["searcher"]["max_length"], json::parse(R"({"batches": 100})"));
  EXPECT_EQ(j["resources"], json::parse(R"({"slots_per_trial": 1, "resource_pool": "default", "weight": 1.0,
      "priority": null, "max_slots": null})"));
  EXPECT_EQ(j["reproducibility"]["experiment_seed"], 42);
  EXPECT_EQ(j["hyperparameters"]["global_batch_size"], json::parse(R"({"type": "const", "val": 32})"));
  EXPECT_TRUE(j["min_validation_period"].is_null());
  EXPECT_TRUE(j["checkpoint_storage"].is_null());
}

// --- Errors: each names the source, the line and the field path. ---

TEST(ExperimentConfigErrorTest, UnknownField) {
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  max_length:", "  max_lenght:")),
            "config.yaml:6: unknown field 'searcher.max_lenght' (did you mean 'max_length'?)");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "frobnicate: 1\n"), "config.yaml:8: unknown field 'frobnicate'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "    batches: 100", "    steps: 100")),
            "config.yaml:7: unknown field 'searcher.max_length.steps'");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "resources:\n  slot_per_trial: 2\n"),
            "config.yaml:9: unknown field 'resources.slot_per_trial' (did you mean 'slots_per_trial'?)");
}

TEST(ExperimentConfigErrorTest, WrongType) {
  std::string text = std::string(kMinimal) + "scheduling_unit: often\n";
  EXPECT_EQ(ErrorOf(text), "config.yaml:8: field 'scheduling_unit' must be an integer, got 'often'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  name: single\n", "  name: random\n  max_trials: abc\n")),
            "config.yaml:5: field 'searcher.max_trials' must be an integer, got 'abc'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  name: single\n", "  name: random\n  max_trials: \"5\"\n")),
            "config.yaml:5: field 'searcher.max_trials' must be an integer, got '5' (a quoted string)");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "perform_initial_validation: yes\n"),
            "config.yaml:8: field 'perform_initial_validation' must be a boolean (true or false), got 'yes'");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "resources: [1]\n"),
            "config.yaml:8: field 'resources' must be a map, got a list");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "labels: {a: b}\n"),
            "config.yaml:8: field 'labels' must be a list of strings, got a map");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "checkpoint_policy: some\n"),
            "config.yaml:8: field 'checkpoint_policy' must be one of best, all, none, got 'some'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  name: single", "  name: hyperband")),
            "config.yaml:4: field 'searcher.name' must be one of single, random, grid, adaptive_asha, "
            "async_halving, pbt, tpe, got 'hyperband'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  name: single", "  name: pbt")),
            "config.yaml: missing required field 'searcher.population_size'");
}

TEST(ExperimentConfigErrorTest, OutOfRange) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "resources:\n  priority: 100\n"),
            "config.yaml:9: field 'resources.priority' must be between 1 and 99, got 100");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "resources:\n  slots_per_trial: 0\n"),
            "config.yaml:9: field 'resources.slots_per_trial' must be between 1 and 1024, got 0");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "resources:\n  weight: 0\n"),
            "config.yaml:9: field 'resources.weight' must be a positive number, got '0'");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "max_restarts: -1\n"),
            "config.yaml:8: field 'max_restarts' must be >= 0, got -1");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "scheduling_unit: 0\n"),
            "config.yaml:8: field 'scheduling_unit' must be >= 1, got 0");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "batches: 100", "batches: 0")),
            "config.yaml:7: field 'searcher.max_length.batches' must be >= 1, got 0");
}

// The caps of the security issue: each refused naming the field and the cap.
TEST(ExperimentConfigErrorTest, CapsNameTheFieldAndTheLimit) {
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "name: single", "name: random\n  max_trials: 1000000000")),
            "config.yaml:5: field 'searcher.max_trials' must be between 1 and 10000, got 1000000000");
  EXPECT_TRUE(Parse(Replace(kMinimal, "name: single", "name: random\n  max_trials: 10000")).ok());
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "name: single", "name: random\n  max_trials: 2\n  max_concurrent_trials: 10001")),
            "config.yaml:6: field 'searcher.max_concurrent_trials' must be between 0 and 10000, got 10001");
  // 2^32 used to become a 0-slot allocation (truncated to int).
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "resources:\n  slots_per_trial: 4294967296\n"),
            "config.yaml:9: field 'resources.slots_per_trial' must be between 1 and 1024, got 4294967296");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "resources:\n  slots_per_trial: 1025\n"),
            "config.yaml:9: field 'resources.slots_per_trial' must be between 1 and 1024, got 1025");
  EXPECT_TRUE(Parse(std::string(kMinimal) + "resources:\n  slots_per_trial: 1024\n").ok());
  // Beyond 64 bits an integer is read as a double: a type error, not a wrap.
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "resources:\n  slots_per_trial: 18446744073709551617\n"),
            "config.yaml:9: field 'resources.slots_per_trial' must be an integer, got '1.8446744073709552e+19'");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "resources:\n  max_slots: 18446744073709551615\n"),
            "config.yaml:9: field 'resources.max_slots' must be an integer, got '18446744073709551615'");
  std::string asha = Replace(kMinimal, "name: single", "name: adaptive_asha\n  max_trials: 4");
  EXPECT_EQ(ErrorOf(Replace(asha, "max_trials: 4", "max_trials: 4\n  bracket_rungs: [65]")),
            "config.yaml:6: field 'searcher.bracket_rungs[0]' must be between 1 and 64, got 65");
  std::string many = "[1";
  for (int i = 0; i < 64; ++i) many += ", 1";
  EXPECT_EQ(ErrorOf(Replace(asha, "max_trials: 4", "max_trials: 4\n  bracket_rungs: " + many + "]")),
            "config.yaml:6: field 'searcher.bracket_rungs' must have at most 64 entries, got 65");
  // A 10^6-point grid (six 10-point axes).
  std::string axes;
  for (const char* k : {"a", "b", "c", "d", "e", "f"}) {
    axes += std::string("  ") + k + ": {type: int, minval: 1, maxval: 10, count: 10}\n";
  }
  std::string grid = Replace(Replace(kMinimal, "  global_batch_size: 32\n", "  global_batch_size: 32\n" + axes),
                             "name: single", "name: grid");
  EXPECT_EQ(ErrorOf(grid), "config.yaml: the grid of 'hyperparameters' has more than 10000 points (the limit); "
                           "lower some counts");
}

TEST(ExperimentConfigErrorTest, MissingRequiredField) {
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  metric: validation_loss\n", "")),
            "config.yaml: missing required field 'searcher.metric'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  name: single\n", "")),
            "config.yaml: missing required field 'searcher.name'");
  // single may leave the length to the trial's data (one epoch); ASHA may not.
  EXPECT_EQ(ErrorOf(Replace(Replace(kMinimal, "  max_length:\n    batches: 100\n", "  max_trials: 4\n"),
                            "name: single", "name: adaptive_asha")),
            "config.yaml: missing required field 'searcher.max_length' (or 'searcher.time_metric' + "
            "'searcher.max_time'): adaptive searchers need a training length");
  EXPECT_EQ(ErrorOf("hyperparameters:\n  global_batch_size: 32\n"),
            "config.yaml: missing required field 'searcher'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "hyperparameters:\n  global_batch_size: 32\n", "")),
            "config.yaml: missing required field 'hyperparameters'");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "checkpoint_storage:\n  type: shared_fs\n"),
            "config.yaml: missing required field 'checkpoint_storage.host_path'");
}

TEST(ExperimentConfigErrorTest, MaxLengthShapes) {
  auto epochs = Parse(Replace(kMinimal, "    batches: 100", "    epochs: 2"));
  ASSERT_TRUE(epochs.ok()) << epochs.status();
  EXPECT_EQ(epochs->searcher.max_length, (Length{Length::Unit::kEpochs, 2}));
  auto plain = Parse(Replace(kMinimal, "  max_length:\n    batches: 100", "  max_length: 250"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->searcher.max_length, (Length{Length::Unit::kBatches, 250}));
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "    batches: 100", "    batches: 100\n    epochs: 1")),
            "config.yaml:8: field 'searcher.max_length' must have exactly one of batches, records or epochs, got "
            "batches and epochs");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  max_length:\n    batches: 100", "  max_length: {}")),
            "config.yaml:6: field 'searcher.max_length' must have exactly one of batches, records or epochs");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  max_length:\n    batches: 100", "  max_length: long")),
            "config.yaml:6: field 'searcher.max_length' must be a map with exactly one of batches, records or "
            "epochs (or an integer number of batches), got 'long'");
}

TEST(ExperimentConfigErrorTest, YamlSyntaxError) {
  std::string err = ErrorOf("name: x\nsearcher:\n  name: [single\n  metric: loss\n");
  EXPECT_THAT(err, HasSubstr("config.yaml:"));
  EXPECT_THAT(err, HasSubstr("invalid YAML"));
  EXPECT_EQ(ErrorOf("name: x\nhyperparameters:\n\tglobal_batch_size: 1\n").substr(0, 14), "config.yaml:3:");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "name: a\nname: b\n"), "config.yaml:9: duplicate field 'name'");
  EXPECT_EQ(ErrorOf(""), "config.yaml: the config is empty");
  EXPECT_EQ(ErrorOf("- a\n- b\n"), "config.yaml: the config must be a map, got a list");
}

TEST(ExperimentConfigErrorTest, HyperparameterErrors) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "  ") , "<parsed OK>");  // trailing whitespace is fine
  std::string bad_range = Replace(kMinimal, "  global_batch_size: 32\n",
                                  "  global_batch_size: 32\n  units:\n    type: int\n    minval: 64\n    maxval: 8\n");
  EXPECT_EQ(ErrorOf(bad_range), "config.yaml:5: field 'hyperparameters.units.minval' must be <= maxval, got 64 > 8");
  // global_batch_size is optional (Determined 0.38); when given it is checked.
  EXPECT_TRUE(Parse(Replace(kMinimal, "  global_batch_size: 32\n", "  lr: 0.1\n")).ok());
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "global_batch_size: 32", "global_batch_size: 0")),
            "config.yaml:2: field 'hyperparameters.global_batch_size' must be a positive integer, got '0'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "global_batch_size: 32", "global_batch_size: 32.5")),
            "config.yaml:2: field 'hyperparameters.global_batch_size' must be a positive integer, got '32.5'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "global_batch_size: 32", "global_batch_size: {type: double, minval: 1, "
                                                                "maxval: 2}")),
            "config.yaml:2: field 'hyperparameters.global_batch_size' must be a positive integer (a const, int or "
            "categorical hyperparameter), got a double hyperparameter");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "global_batch_size: 32", "global_batch_size: {type: categorical, vals: [16, "
                                                                "-1]}")),
            "config.yaml:2: field 'hyperparameters.global_batch_size.vals[1]' must be a positive integer, got '-1'");
  // A search over batch sizes is fine.
  EXPECT_TRUE(Parse(Replace(kMinimal, "global_batch_size: 32", "global_batch_size: {type: int, minval: 16, "
                                                               "maxval: 64}"))
                  .ok());
}

TEST(ExperimentConfigErrorTest, SearcherCrossFieldConstraints) {
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "name: single", "name: random")),
            "config.yaml: missing required field 'searcher.max_trials' (required by searcher 'random')");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "name: single", "name: adaptive_asha")),
            "config.yaml: missing required field 'searcher.max_trials' (required by searcher 'adaptive_asha')");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "name: single", "name: random\n  max_trials: 0")),
            "config.yaml:5: field 'searcher.max_trials' must be between 1 and 10000, got 0");
  std::string grid = Replace(kMinimal, "  global_batch_size: 32\n",
                             "  global_batch_size: 32\n  lr:\n    type: double\n    minval: 0.1\n    maxval: 0.2\n");
  EXPECT_EQ(ErrorOf(Replace(grid, "name: single", "name: grid")),
            "config.yaml:3: grid search requires field 'hyperparameters.lr.count' for double hyperparameter "
            "'hyperparameters.lr'");
  auto with_count = Parse(Replace(Replace(grid, "name: single", "name: grid"), "maxval: 0.2", "maxval: 0.2\n    count: 3"));
  ASSERT_TRUE(with_count.ok()) << with_count.status();
  EXPECT_EQ(with_count->searcher.max_trials, 0);
  EXPECT_EQ(GridHParams(with_count->hyperparameters)->size(), 3u);
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "name: single", "name: adaptive_asha\n  max_trials: 4\n  time_metric: t")),
            "config.yaml:6: field 'searcher.time_metric' requires field 'searcher.max_time'");
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "name: single", "name: adaptive_asha\n  max_trials: 4\n  divisor: 1")),
            "config.yaml:6: field 'searcher.divisor' must be a number greater than 1, got '1'");
}

TEST(ExperimentConfigErrorTest, CheckpointStorage) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "checkpoint_storage:\n  type: azure\n  container: b\n"),
            "config.yaml:9: field 'checkpoint_storage.type' must be shared_fs or s3, got 'azure' (det-cpp supports "
            "shared_fs and S3-compatible checkpoint storage)");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "checkpoint_storage:\n  type: shared_fs\n  host_path: /x\n  "
                                            "save_trial_best: -1\n"),
            "config.yaml:11: field 'checkpoint_storage.save_trial_best' must be >= 0, got -1");
}

TEST(ExperimentConfigTest, EnvironmentVariableForms) {
  auto map = Parse(std::string(kMinimal) + "environment:\n  environment_variables:\n    A: 1\n    B: x\n");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_THAT(map->environment.environment_variables, ElementsAre(Pair("A", "1"), Pair("B", "x")));
  auto per_device = Parse(std::string(kMinimal) +
                          "environment:\n  environment_variables:\n    cuda: [C=2]\n    cpu: [A=1]\n");
  ASSERT_TRUE(per_device.ok()) << per_device.status();
  EXPECT_THAT(per_device->environment.environment_variables, ElementsAre(Pair("A", "1"), Pair("C", "2")));
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "environment:\n  environment_variables:\n    - A=1\n    - NOVALUE\n"),
            "config.yaml:11: field 'environment.environment_variables[1]' must be 'KEY=VALUE', got 'NOVALUE'");
}

TEST(ExperimentConfigTest, IgnoredDeterminedFieldsWarn) {
  auto c = Parse(std::string(kMinimal) +
                 "bind_mounts: []\nenvironment:\n  image: pytorch\nresources:\n  shm_size: 1000\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->warnings, UnorderedElementsAre(HasSubstr("'bind_mounts'"), HasSubstr("'resources.shm_size'"),
                                       HasSubstr("'environment.image'")));
}

TEST(ExperimentConfigTest, NullMeansDefault) {
  auto c = Parse(std::string(kMinimal) + "name:\nresources:\nmax_restarts: ~\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "experiment");
  EXPECT_EQ(c->max_restarts, 5);
}

TEST(ExperimentConfigTest, LoadFile) {
  auto missing = LoadExperimentConfigFile("/nonexistent/dir/config.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/dir/config.yaml"));

  std::string path = ::testing::TempDir() + "/det_common_config_test.yaml";
  {
    std::ofstream out(path);
    out << Replace(kMinimal, "  max_length:", "  max_lenght:");
  }
  auto bad = LoadExperimentConfigFile(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr(path + ":6: unknown field 'searcher.max_lenght'"));
  {
    std::ofstream out(path);
    out << kMinimal;
  }
  auto good = LoadExperimentConfigFile(path, FixedSeed());
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->source_name, path);
  EXPECT_EQ(good->yaml_text, kMinimal);
  std::remove(path.c_str());
}

// The shape of the configs det-trial's local mode tests use.
constexpr char kSynthetic[] = R"(name: synthetic-test
hyperparameters:
  global_batch_size: 32
  learning_rate: 0.01
  hidden_size: 32
  dropout: 0.1
searcher:
  name: single
  metric: validation_loss
  smaller_is_better: true
  max_length:
    batches: 100
min_validation_period:
  batches: 50
scheduling_unit: 10
reproducibility:
  experiment_seed: 7
data:
  train_size: 1000
)";

TEST(ExperimentConfigTest, SyntheticLocalModeConfig) {
  auto c = Parse(kSynthetic);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(FirstHParams(c->hyperparameters, *c->reproducibility.experiment_seed),
            json::parse(R"({"global_batch_size": 32, "learning_rate": 0.01, "hidden_size": 32, "dropout": 0.1})"));
  EXPECT_EQ(c->min_validation_period, (Length{Length::Unit::kBatches, 50}));
  EXPECT_EQ(ErrorOf(Replace(kSynthetic, "  max_length:", "  max_lenght:")),
            "config.yaml:11: unknown field 'searcher.max_lenght' (did you mean 'max_length'?)");
  EXPECT_EQ(ErrorOf(Replace(kSynthetic, "scheduling_unit: 10", "scheduling_unit: often")),
            "config.yaml:15: field 'scheduling_unit' must be an integer, got 'often'");
}

TEST(ConfigReaderTest, ScalarResolution) {
  EXPECT_EQ(ResolvePlainYamlScalar("12"), json(12));
  EXPECT_EQ(ResolvePlainYamlScalar("-7"), json(-7));
  EXPECT_EQ(ResolvePlainYamlScalar("0x1F"), json(31));
  EXPECT_EQ(ResolvePlainYamlScalar("0o17"), json(15));
  EXPECT_TRUE(ResolvePlainYamlScalar("1e-3").is_number_float());
  EXPECT_DOUBLE_EQ(ResolvePlainYamlScalar("1e-3").get<double>(), 1e-3);
  EXPECT_DOUBLE_EQ(ResolvePlainYamlScalar(".5").get<double>(), 0.5);
  EXPECT_TRUE(ResolvePlainYamlScalar("3.").is_number_float());
  EXPECT_TRUE(std::isinf(ResolvePlainYamlScalar("-.inf").get<double>()));
  EXPECT_EQ(ResolvePlainYamlScalar("true"), json(true));
  EXPECT_EQ(ResolvePlainYamlScalar("False"), json(false));
  EXPECT_EQ(ResolvePlainYamlScalar("~"), json(nullptr));
  EXPECT_EQ(ResolvePlainYamlScalar("yes"), json("yes"));
  EXPECT_EQ(ResolvePlainYamlScalar("1.2.3"), json("1.2.3"));
  EXPECT_EQ(ResolvePlainYamlScalar("e5"), json("e5"));
  EXPECT_TRUE(ResolvePlainYamlScalar("18446744073709551615").is_number_unsigned());
  EXPECT_TRUE(ResolvePlainYamlScalar("-99999999999999999999").is_number_float());
}

// Inputs found by fuzz/experiment_config_fuzzer: each must be a clear
// InvalidArgument, never an exception or crash.
TEST(ExperimentConfigFuzzRegressionTest, InvalidUtf8IsAnError) {
  // A key with a stray continuation byte used to parse, then throw from
  // nlohmann::json::dump (type_error.316) when the config was serialized.
  EXPECT_EQ(ErrorOf(Replace(kMinimal, "  global_batch_size: 32\n", "  global_batch_size: 32\n  lr\x97: 1\n")),
            "config.yaml:3: a key of field 'hyperparameters' is not valid UTF-8");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "description: \"caf\xc3\"\n"),
            "config.yaml:8: field 'description' is not valid UTF-8");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "labels: [ok, \xed\xa0\x80]\n"),  // a UTF-16 surrogate
            "config.yaml:8: field 'labels[1]' is not valid UTF-8");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "description: \xc0\xaf\n"),  // overlong '/'
            "config.yaml:8: field 'description' is not valid UTF-8");
  // Valid multi-byte UTF-8 is fine.
  auto c = Parse(std::string(kMinimal) + "description: \"caf\xc3\xa9 \xf0\x9f\x9a\x80\"\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->description, "caf\xc3\xa9 \xf0\x9f\x9a\x80");
  EXPECT_NO_THROW(ExperimentConfigToJson(*c).dump());
}

// profiling (issue 48): read, with defaults, and each bad key named.
TEST(ExperimentConfigTest, ProfilingIsReadWithDefaults) {
  auto off = Parse(kMinimal);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->profiling.enabled);
  EXPECT_EQ(off->profiling.begin_on_batch, 0);
  EXPECT_FALSE(off->profiling.end_after_batch.has_value());
  EXPECT_TRUE(off->profiling.sync_timings);
  auto on = Parse(std::string(kMinimal) +
                  "profiling:\n  enabled: true\n  begin_on_batch: 5\n  end_after_batch: 50\n  sync_timings: false\n");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->profiling.enabled);
  EXPECT_EQ(on->profiling.begin_on_batch, 5);
  EXPECT_EQ(on->profiling.end_after_batch, 50);
  EXPECT_FALSE(on->profiling.sync_timings);
  EXPECT_TRUE(on->warnings.empty()) << "profiling is no longer an unused field";
  auto again = ParseExperimentConfigJson(ExperimentConfigToJson(*on), "json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->profiling.end_after_batch, 50);
  EXPECT_FALSE(again->profiling.sync_timings);
  // Determined's null end_after_batch: to the end.
  auto null_end = Parse(std::string(kMinimal) + "profiling:\n  enabled: true\n  end_after_batch: null\n");
  ASSERT_TRUE(null_end.ok()) << null_end.status();
  EXPECT_FALSE(null_end->profiling.end_after_batch.has_value());
}

TEST(ExperimentConfigErrorTest, ProfilingErrorsNameTheKeyAndTheFix) {
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "profiling:\n  enabeld: true\n"),
            "config.yaml:9: unknown field 'profiling.enabeld' (did you mean 'enabled'?)");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "profiling:\n  enabled: 1\n"),
            "config.yaml:9: field 'profiling.enabled' must be a boolean (true or false), got '1'");
  EXPECT_THAT(ErrorOf(std::string(kMinimal) + "profiling:\n  begin_on_batch: -1\n"),
              HasSubstr("'profiling.begin_on_batch' must be >= 0"));
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "profiling:\n  begin_on_batch: 10\n  end_after_batch: 10\n"),
            "config.yaml:10: field 'profiling.end_after_batch' must be greater than 'profiling.begin_on_batch' (10), "
            "got 10; leave it out to profile to the end of training");
  EXPECT_EQ(ErrorOf(std::string(kMinimal) + "profiling: true\n"),
            "config.yaml:8: field 'profiling' must be a map, got 'true'");
}

}  // namespace
}  // namespace det
