// libFuzzer target: the experiment-config reader (common/experiment_config.cc,
// config_reader.cc, hparams.cc, length.cc) on arbitrary bytes as YAML.
//
// Any input must give a config or an InvalidArgument error, never a crash,
// sanitizer report or hang. For a config that parses, checks the documented
// round trip (ParseExperimentConfigJson(ExperimentConfigToJson(c)) is the
// same config) and that sampling and grid enumeration of its hyperparameters
// work.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>

#include "common/config_reader.h"
#include "common/experiment_config.h"
#include "common/hparams.h"

namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "experiment_config_fuzzer: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);

  // The YAML layer alone (also reached by inputs the config checks reject).
  det::ConfigSource source{"fuzz.yaml", {}};
  auto json = det::ParseYamlToJson(text, &source);
  if (!json.ok() && json.status().code() != absl::StatusCode::kInvalidArgument) {
    Fail("ParseYamlToJson returned " + json.status().ToString());
  }

  det::ParseOptions options;
  options.default_experiment_seed = 1;
  auto config = det::ParseExperimentConfig(text, "fuzz.yaml", options);
  if (!config.ok()) {
    if (config.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("ParseExperimentConfig returned " + config.status().ToString());
    }
    return 0;
  }

  const nlohmann::json canonical = det::ExperimentConfigToJson(*config);
  auto again = det::ParseExperimentConfigJson(canonical, "round-trip", options);
  if (!again.ok()) {
    Fail("the canonical JSON of a valid config does not parse: " + again.status().ToString() + "\n" +
         canonical.dump());
  }
  const nlohmann::json canonical2 = det::ExperimentConfigToJson(*again);
  if (canonical2.dump() != canonical.dump()) {
    Fail("round trip changed the config:\n" + canonical.dump() + "\n" + canonical2.dump());
  }

  std::mt19937_64 rng(7);
  nlohmann::json sample = det::SampleHParams(config->hyperparameters, rng);
  (void)det::GlobalBatchSize(sample);
  (void)det::FirstHParams(config->hyperparameters, 7);
  auto points = det::ValidateGridSpace(config->hyperparameters);
  if (points.ok() && *points <= 256) {
    auto grid = det::GridHParams(config->hyperparameters);
    if (!grid.ok()) Fail("GridHParams failed after ValidateGridSpace passed: " + grid.status().ToString());
    if (grid->size() > *points) Fail("GridHParams returned more points than ValidateGridSpace counted");
  }
  return 0;
}
