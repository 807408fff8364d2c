// The experiment configuration: Determined's YAML experiment config (field
// names, defaults and validation), parsed into typed structs.
//
//   absl::StatusOr<ExperimentConfig> config = LoadExperimentConfigFile("config.yaml");
//
// Errors are InvalidArgument with one message naming the source, the line
// and the dotted field path:
//   config.yaml:7: unknown field 'searcher.max_lenght' (did you mean 'max_length'?)
//   config.yaml:3: field 'searcher.max_trials' must be an integer, got 'abc'
//   config.yaml: missing required field 'searcher.metric'
//   config.yaml:4: invalid YAML: ...
// Fields of Determined that det-cpp does not use (bind_mounts, optimizations,
// environment.image, ...) are accepted and reported in `warnings`.
#ifndef DET_COMMON_EXPERIMENT_CONFIG_H_
#define DET_COMMON_EXPERIMENT_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/hparams.h"
#include "common/length.h"
#include "common/search_options.h"
#include "nlohmann/json.hpp"

namespace det {

enum class SearcherName { kSingle, kRandom, kGrid, kAdaptiveAsha, kAsyncHalving, kPbt, kTpe };
enum class AshaMode { kAggressive, kStandard, kConservative };
enum class CheckpointPolicy { kBest, kAll, kNone };

// "single", "random", "grid", "adaptive_asha", "async_halving", "pbt", "tpe".
std::string_view SearcherNameToString(SearcherName name);
// adaptive_asha and async_halving: the successive-halving searchers (rungs,
// divisor, sampler).
inline bool IsSuccessiveHalving(SearcherName name) {
  return name == SearcherName::kAdaptiveAsha || name == SearcherName::kAsyncHalving;
}
// "aggressive", "standard", "conservative".
std::string_view AshaModeToString(AshaMode mode);
// "best", "all", "none".
std::string_view CheckpointPolicyToString(CheckpointPolicy policy);

// Caps on what one config may ask for (each an InvalidArgument naming the
// field and the cap): a user gets an error, not a master that expands a
// billion trials. Grid points are capped by kMaxGridPoints (hparams.h), the
// YAML itself by YamlLimits (yaml_limits.h).
inline constexpr int64_t kMaxSearcherTrials = 10000;  // searcher.max_trials, max_concurrent_trials
inline constexpr int64_t kMaxSlotsPerTrial = 1024;    // resources.slots_per_trial
inline constexpr int64_t kMaxBracketRungs = 64;       // searcher.bracket_rungs: entries and each value
inline constexpr size_t kMaxTimeMetricChars = 128;    // searcher.time_metric

struct SearcherConfig {
  SearcherName name = SearcherName::kSingle;  // required
  std::string metric;                         // required
  bool smaller_is_better = true;
  // The training length: exactly one of max_length (value >= 1), or
  // time_metric + max_time (Determined 0.38). Read it through
  // SearcherLengthOf (common/batch_lengths.h). single, random and grid may
  // give neither (Determined 0.38 leaves it to the training code): then
  // max_length is 1 epoch and length_from_data is set.
  Length max_length;
  bool length_from_data = false;
  // Required (1..kMaxSearcherTrials) for random, adaptive_asha and
  // async_halving; 1 for single; for grid 0 unless given (the grid decides).
  int64_t max_trials = 0;
  int64_t max_concurrent_trials = 0;  // 0: unlimited; <= kMaxSearcherTrials
  double divisor = 4;                 // adaptive_asha, async_halving; > 1
  int64_t max_rungs = 5;              // adaptive_asha; >= 1
  AshaMode mode = AshaMode::kStandard;
  std::vector<int64_t> bracket_rungs;  // adaptive_asha; each 1..64, at most 64 entries
  bool stop_once = false;
  // batches, records, epochs or a training metric name (see
  // kMaxTimeMetricChars); set iff max_time is.
  std::optional<std::string> time_metric;
  std::optional<int64_t> max_time;  // >= 1
  int64_t num_rungs = 5;            // async_halving; >= 1
  std::optional<int64_t> source_trial_id;
  std::optional<std::string> source_checkpoint_uuid;
  // pbt, tpe, ASHA's sampler and rung_metric (common/search_options.h).
  SearchOptions options;
};

// checkpoint_storage: type shared_fs (a directory every agent mounts) or s3
// (an S3-compatible bucket; docs/operations/checkpoint-storage.md). A config
// never holds credentials: with s3 it names a profile of the master's S3
// credentials file (--s3-credentials-file).
struct CheckpointStorageConfig {
  std::string type = "shared_fs";  // "shared_fs" | "s3"
  // shared_fs only.
  std::string host_path;     // required with type; empty: the master's checkpoint root
  std::string storage_path;  // empty: none (checkpoints go directly under host_path)
  // s3 only.
  std::string bucket;        // required; an S3 bucket name
  std::string prefix;        // <= 512 bytes, no leading/trailing '/', no empty/"."/".." segment
  std::string endpoint_url;  // http(s)://host[:port]; empty: the profile's (else AWS's)
  std::string region;        // [a-z0-9-]{1,32}; empty: the profile's, else us-east-1
  std::string profile = "default";      // [A-Za-z0-9_.-]{1,64}
  std::string addressing_style = "auto";  // auto | path | virtual (auto: virtual on AWS, path with an endpoint)
  int64_t save_experiment_best = 0;
  int64_t save_trial_best = 1;
  int64_t save_trial_latest = 1;
};

struct ResourcesConfig {
  int64_t slots_per_trial = 1;  // 1..kMaxSlotsPerTrial
  std::string resource_pool = "default";
  // Whether the config set resource_pool (else the master picks its default
  // compute or aux pool; master/core/resource_pools.h).
  bool resource_pool_given = false;
  double weight = 1;                // > 0
  std::optional<int64_t> priority;  // 1..99
  std::optional<int64_t> max_slots;  // 1..kMaxSlotsPerTrial * kMaxSearcherTrials
};

struct ReproducibilityConfig {
  // Always set after parsing: the config's value, or, only when the config
  // has none, one derived from the current time (or ParseOptions).
  std::optional<uint32_t> experiment_seed;
  bool experiment_seed_given = false;  // whether the config set it
};

struct EnvironmentConfig {
  // In config order. Accepted forms: a list of "KEY=VALUE" strings, a map
  // KEY: VALUE, or Determined's per-device map {cpu: [...], cuda: [...],
  // rocm: [...]} (cpu, then cuda, then rocm entries).
  std::vector<std::pair<std::string, std::string>> environment_variables;
};

// profiling: the trial profiler (docs/guides/profiling.md). Batches are
// counted as total batches trained (0-based: the first batch is batch 0).
struct ProfilingConfig {
  bool enabled = false;
  int64_t begin_on_batch = 0;                // >= 0: the first profiled batch
  std::optional<int64_t> end_after_batch;    // > begin_on_batch; unset: to the end
  bool sync_timings = true;                  // CUDA: synchronize before each stamp (no-op on CPU)
};

struct ExperimentConfig {
  std::string name = "experiment";
  std::string description;
  std::vector<std::string> labels;
  std::optional<std::string> entrypoint;  // kept, not used by the runtime
  HyperparameterSpace hyperparameters;     // required; global_batch_size optional
  SearcherConfig searcher;                 // required
  int64_t records_per_epoch = 0;           // 0: an epoch is one pass of the training data loader
  std::optional<Length> min_validation_period;
  std::optional<Length> min_checkpoint_period;
  int64_t scheduling_unit = 100;  // batches per workload; > 0
  bool perform_initial_validation = false;
  CheckpointPolicy checkpoint_policy = CheckpointPolicy::kBest;
  std::optional<CheckpointStorageConfig> checkpoint_storage;
  ResourcesConfig resources;
  int64_t max_restarts = 5;  // >= 0
  ReproducibilityConfig reproducibility;
  nlohmann::json data = nlohmann::json::object();  // free-form, for the trial
  EnvironmentConfig environment;
  bool debug = false;
  std::optional<std::string> workspace;
  std::optional<std::string> project;
  ProfilingConfig profiling;

  // Accepted but unused fields, one message each.
  std::vector<std::string> warnings;
  // The whole document as JSON, exactly as written (no defaults).
  nlohmann::json raw;
  // The text parsed (for JSON input, its JSON text).
  std::string yaml_text;
  // The source name given to the parser (for messages).
  std::string source_name;
};

struct ParseOptions {
  // The experiment seed when the config has none; unset: derived from the
  // current time.
  std::optional<uint32_t> default_experiment_seed;
};

// Parses and validates a YAML config. `source_name` prefixes error messages.
// InvalidArgument on any error (see above). Pure apart from reading the clock
// for a missing experiment seed; thread-safe.
absl::StatusOr<ExperimentConfig> ParseExperimentConfig(std::string_view yaml_text, std::string_view source_name,
                                                       const ParseOptions& options = {});

// As ParseExperimentConfig, for a config already in JSON form (e.g. the
// output of ExperimentConfigToJson or a stored `raw`); messages carry no lines.
absl::StatusOr<ExperimentConfig> ParseExperimentConfigJson(const nlohmann::json& config,
                                                           std::string_view source_name,
                                                           const ParseOptions& options = {});

// Reads and parses the file at `path` (named `path` in messages). NotFound
// naming the path when it cannot be read.
absl::StatusOr<ExperimentConfig> LoadExperimentConfigFile(const std::string& path, const ParseOptions& options = {});

// The config with every default filled in, in Determined's shape (optional
// fields unset are null). ParseExperimentConfigJson of the result yields an
// equal config (apart from raw/yaml_text/warnings).
nlohmann::json ExperimentConfigToJson(const ExperimentConfig& config);

}  // namespace det

#endif  // DET_COMMON_EXPERIMENT_CONFIG_H_
