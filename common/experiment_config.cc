#include "common/experiment_config.h"

#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/batch_lengths.h"
#include "common/checkpoint_storage_config.h"
#include "common/config_fields.h"
#include "common/config_reader.h"
#include "common/safe_path.h"
#include "common/searcher_fields.h"
#include "common/status_macros.h"

namespace det {
namespace {

using json = nlohmann::json;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// A Length: a bare integer (batches) or a map with exactly one of batches,
// records or epochs, each value >= min_value.
absl::StatusOr<Length> ParseLength(const ConfigSource& source, const json& v, const std::string& path,
                                   int64_t min_value) {
  if (v.is_number_integer() || v.is_number_unsigned()) {
    DET_ASSIGN_OR_RETURN(int64_t n, ConfigMapReader::CheckInt(source, v, path, min_value, kInt64Max));
    return Length{Length::Unit::kBatches, n};
  }
  if (!v.is_object()) {
    return source.Error(path, absl::StrCat("field '", path,
                                           "' must be a map with exactly one of batches, records or epochs (or an "
                                           "integer number of batches), got ",
                                           DescribeValue(v)));
  }
  DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, v, path));
  DET_RETURN_IF_ERROR(r.CheckKeys({"batches", "records", "epochs"}));
  std::optional<Length> length;
  for (Length::Unit unit : {Length::Unit::kBatches, Length::Unit::kRecords, Length::Unit::kEpochs}) {
    std::string_view key = UnitName(unit);
    const json* value = r.Find(key);
    if (value == nullptr) continue;
    if (length.has_value()) {
      return r.Error(key, absl::StrCat("field '", path, "' must have exactly one of batches, records or epochs, got ",
                                       std::string(UnitName(length->unit)), " and ", std::string(key)));
    }
    DET_ASSIGN_OR_RETURN(int64_t n, ConfigMapReader::CheckInt(source, *value, r.PathOf(key), min_value, kInt64Max));
    length = Length{unit, n};
  }
  if (!length.has_value()) {
    return source.Error(path, absl::StrCat("field '", path, "' must have exactly one of batches, records or epochs"));
  }
  return *length;
}

absl::Status ParseOptionalLength(const ConfigMapReader& r, std::string_view key, int64_t min_value,
                                 std::optional<Length>* out) {
  const json* v = r.Find(key);
  if (v == nullptr) return absl::OkStatus();
  DET_ASSIGN_OR_RETURN(*out, ParseLength(r.source(), *v, r.PathOf(key), min_value));
  return absl::OkStatus();
}

absl::StatusOr<SearcherName> ParseSearcherName(std::string_view s) {
  for (SearcherName n : {SearcherName::kSingle, SearcherName::kRandom, SearcherName::kGrid,
                         SearcherName::kAdaptiveAsha, SearcherName::kAsyncHalving, SearcherName::kPbt,
                         SearcherName::kTpe}) {
    if (SearcherNameToString(n) == s) return n;
  }
  return absl::InvalidArgumentError("unknown searcher");
}

// A time_metric: batches, records, epochs or a training metric's name
// (letters, digits, '_', '-', '.', '/'; at most kMaxTimeMetricChars).
bool ValidTimeMetric(const std::string& name) {
  if (name.empty() || name.size() > kMaxTimeMetricChars) return false;
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_' && ch != '-' && ch != '.' && ch != '/') {
      return false;
    }
  }
  return true;
}

// The searcher's length: exactly one of max_length, or time_metric + max_time
// (Determined 0.38's form).
absl::Status ParseSearcherLength(const ConfigMapReader& r, SearcherConfig* s) {
  DET_RETURN_IF_ERROR(r.GetString("time_metric", &s->time_metric));
  DET_RETURN_IF_ERROR(r.GetInt("max_time", &s->max_time, 1, kInt64Max));
  if (s->time_metric.has_value() != s->max_time.has_value()) {
    std::string_view given = s->time_metric ? "time_metric" : "max_time";
    std::string_view other = s->time_metric ? "max_time" : "time_metric";
    return r.Error(given, absl::StrCat("field '", r.PathOf(given), "' requires field '", r.PathOf(other), "'"));
  }
  const bool has_max_length = r.Find("max_length") != nullptr;
  if (s->time_metric.has_value()) {
    if (has_max_length) {
      return r.Error("max_length", absl::StrCat("fields '", r.PathOf("max_length"), "' and '", r.PathOf("time_metric"),
                                                "' + '", r.PathOf("max_time"),
                                                "' both give the training length; use exactly one form"));
    }
    if (!ValidTimeMetric(*s->time_metric)) {
      return r.TypeError("time_metric", absl::StrCat("batches, records, epochs or a training metric name (letters, "
                                                     "digits, '_', '-', '.', '/'; at most ",
                                                     kMaxTimeMetricChars, " characters)"));
    }
    return absl::OkStatus();
  }
  if (!has_max_length) {
    // Determined 0.38's single/random/grid configs may leave the length to
    // the training code: here that is one pass over the trial's training
    // data loader. ASHA needs a length to place its rungs.
    if (s->name == SearcherName::kSingle || s->name == SearcherName::kRandom || s->name == SearcherName::kGrid) {
      s->max_length = Length{Length::Unit::kEpochs, 1};
      s->length_from_data = true;
      return absl::OkStatus();
    }
    return r.source().Error("", absl::StrCat("missing required field '", r.PathOf("max_length"), "' (or '",
                                             r.PathOf("time_metric"), "' + '", r.PathOf("max_time"),
                                             "'): adaptive searchers need a training length"));
  }
  DET_ASSIGN_OR_RETURN(s->max_length, ParseLength(r.source(), *r.Find("max_length"), r.PathOf("max_length"), 1));
  return absl::OkStatus();
}

absl::Status ParseSearcher(const ConfigMapReader& r, SearcherConfig* s) {
  std::vector<std::string_view> keys = {"name", "metric", "smaller_is_better", "max_length", "max_trials",
                                        "max_concurrent_trials", "divisor", "max_rungs", "mode", "bracket_rungs",
                                        "stop_once", "time_metric", "max_time", "num_rungs", "source_trial_id",
                                        "source_checkpoint_uuid"};
  keys.insert(keys.end(), SearchOptionKeys().begin(), SearchOptionKeys().end());
  DET_RETURN_IF_ERROR(r.CheckKeys(keys));
  if (r.Find("name") == nullptr) return r.Missing("name");
  std::string name;
  DET_RETURN_IF_ERROR(
      r.GetEnum("name", {"single", "random", "grid", "adaptive_asha", "async_halving", "pbt", "tpe"}, &name));
  DET_ASSIGN_OR_RETURN(s->name, ParseSearcherName(name));

  if (r.Find("metric") == nullptr) return r.Missing("metric");
  DET_RETURN_IF_ERROR(r.GetString("metric", &s->metric));
  if (s->metric.empty()) return r.TypeError("metric", "a non-empty string");
  DET_RETURN_IF_ERROR(r.GetBool("smaller_is_better", &s->smaller_is_better));

  DET_RETURN_IF_ERROR(ParseSearcherLength(r, s));

  DET_RETURN_IF_ERROR(r.GetInt("max_trials", &s->max_trials, 1, kMaxSearcherTrials));
  DET_RETURN_IF_ERROR(r.GetInt("max_concurrent_trials", &s->max_concurrent_trials, 0, kMaxSearcherTrials));
  DET_RETURN_IF_ERROR(r.GetDouble("divisor", &s->divisor));
  if (!(s->divisor > 1) || s->divisor > 1e9) return r.TypeError("divisor", "a number greater than 1");
  DET_RETURN_IF_ERROR(r.GetInt("max_rungs", &s->max_rungs, 1, kInt64Max));
  std::string mode;
  DET_RETURN_IF_ERROR(r.GetEnum("mode", {"aggressive", "standard", "conservative"}, &mode));
  if (mode == "aggressive") s->mode = AshaMode::kAggressive;
  if (mode == "conservative") s->mode = AshaMode::kConservative;
  DET_RETURN_IF_ERROR(r.GetIntList("bracket_rungs", &s->bracket_rungs, 1, kMaxBracketRungs));
  if (static_cast<int64_t>(s->bracket_rungs.size()) > kMaxBracketRungs) {
    return r.Error("bracket_rungs", absl::StrCat("field '", r.PathOf("bracket_rungs"), "' must have at most ",
                                                 kMaxBracketRungs, " entries, got ", s->bracket_rungs.size()));
  }
  DET_RETURN_IF_ERROR(r.GetBool("stop_once", &s->stop_once));
  DET_RETURN_IF_ERROR(r.GetInt("num_rungs", &s->num_rungs, 1, kInt64Max));
  DET_RETURN_IF_ERROR(r.GetInt("source_trial_id", &s->source_trial_id, 1, kInt64Max));
  DET_RETURN_IF_ERROR(r.GetString("source_checkpoint_uuid", &s->source_checkpoint_uuid));
  DET_RETURN_IF_ERROR(ParseSearchOptions(r, s->name == SearcherName::kPbt, &s->options));

  switch (s->name) {
    case SearcherName::kSingle:
      s->max_trials = 1;
      break;
    case SearcherName::kRandom:
    case SearcherName::kAdaptiveAsha:
    case SearcherName::kAsyncHalving:
    case SearcherName::kTpe:
      if (r.Find("max_trials") == nullptr) {
        return r.source().Error("", absl::StrCat("missing required field '", r.PathOf("max_trials"),
                                                 "' (required by searcher '", name, "')"));
      }
      break;
    case SearcherName::kGrid:
    case SearcherName::kPbt:
      break;
  }
  return absl::OkStatus();
}

absl::Status ParseResources(const ConfigMapReader& r, ResourcesConfig* c) {
  DET_RETURN_IF_ERROR(r.CheckKeys({"slots_per_trial", "resource_pool", "weight", "priority", "max_slots"},
                                  {"shm_size", "agent_label", "devices", "native_parallel", "is_single_node", "slots"}));
  DET_RETURN_IF_ERROR(r.GetInt("slots_per_trial", &c->slots_per_trial, 1, kMaxSlotsPerTrial));
  DET_RETURN_IF_ERROR(r.GetString("resource_pool", &c->resource_pool));
  if (c->resource_pool.empty()) return r.TypeError("resource_pool", "a non-empty string");
  c->resource_pool_given = r.Find("resource_pool") != nullptr;
  DET_RETURN_IF_ERROR(r.GetDouble("weight", &c->weight));
  if (!(c->weight > 0) || !std::isfinite(c->weight)) return r.TypeError("weight", "a positive number");
  DET_RETURN_IF_ERROR(r.GetInt("priority", &c->priority, 1, 99));
  DET_RETURN_IF_ERROR(r.GetInt("max_slots", &c->max_slots, 1, kMaxSlotsPerTrial * kMaxSearcherTrials));
  return absl::OkStatus();
}

absl::Status AddEnvironmentVariable(const ConfigSource& source, const json& item, const std::string& path,
                                    EnvironmentConfig* env) {
  DET_ASSIGN_OR_RETURN(std::string s, ConfigMapReader::CheckString(source, item, path));
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0) {
    return source.Error(path, absl::StrCat("field '", path, "' must be 'KEY=VALUE', got '", s, "'"));
  }
  env->environment_variables.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  return absl::OkStatus();
}

absl::Status AddEnvironmentList(const ConfigSource& source, const json& list, const std::string& path,
                                EnvironmentConfig* env) {
  if (!list.is_array()) {
    return source.Error(path, absl::StrCat("field '", path, "' must be a list of 'KEY=VALUE' strings, got ",
                                           DescribeValue(list)));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    DET_RETURN_IF_ERROR(AddEnvironmentVariable(source, list[i], absl::StrCat(path, "[", i, "]"), env));
  }
  return absl::OkStatus();
}

absl::Status ParseEnvironment(const ConfigMapReader& r, EnvironmentConfig* env) {
  DET_RETURN_IF_ERROR(r.CheckKeys({"environment_variables"},
                                  {"image", "force_pull_image", "pod_spec", "registry_auth", "add_capabilities",
                                   "drop_capabilities", "proxy_ports", "ports"}));
  const json* vars = r.Find("environment_variables");
  if (vars == nullptr) return absl::OkStatus();
  std::string path = r.PathOf("environment_variables");
  if (vars->is_array()) return AddEnvironmentList(r.source(), *vars, path, env);
  if (!vars->is_object()) {
    return r.TypeError("environment_variables", "a list of 'KEY=VALUE' strings or a map");
  }
  bool per_device = false;
  for (auto it = vars->begin(); it != vars->end(); ++it) per_device |= it->is_array();
  if (per_device) {
    DET_ASSIGN_OR_RETURN(ConfigMapReader devices, ConfigMapReader::Create(r.source(), *vars, path));
    DET_RETURN_IF_ERROR(devices.CheckKeys({"cpu", "cuda", "rocm"}));
    for (const char* device : {"cpu", "cuda", "rocm"}) {
      const json* list = devices.Find(device);
      if (list != nullptr) DET_RETURN_IF_ERROR(AddEnvironmentList(r.source(), *list, devices.PathOf(device), env));
    }
    return absl::OkStatus();
  }
  for (auto it = vars->begin(); it != vars->end(); ++it) {
    std::string value;
    if (!it->is_null()) {
      DET_ASSIGN_OR_RETURN(value, ConfigMapReader::CheckString(r.source(), *it, JoinPath(path, it.key())));
    }
    if (it.key().empty() || it.key().find('=') != std::string::npos) {
      return r.source().Error(JoinPath(path, it.key()),
                              absl::StrCat("field '", path, "' has an invalid variable name '", it.key(), "'"));
    }
    env->environment_variables.emplace_back(it.key(), std::move(value));
  }
  return absl::OkStatus();
}

// profiling: enabled, begin_on_batch, end_after_batch (> begin_on_batch, or
// null/absent: to the end) and sync_timings.
absl::Status ParseProfiling(const ConfigMapReader& r, ProfilingConfig* p) {
  DET_RETURN_IF_ERROR(r.CheckKeys({"enabled", "begin_on_batch", "end_after_batch", "sync_timings"}));
  DET_RETURN_IF_ERROR(r.GetBool("enabled", &p->enabled));
  DET_RETURN_IF_ERROR(r.GetInt("begin_on_batch", &p->begin_on_batch, 0, kInt64Max));
  DET_RETURN_IF_ERROR(r.GetInt("end_after_batch", &p->end_after_batch, 0, kInt64Max));
  DET_RETURN_IF_ERROR(r.GetBool("sync_timings", &p->sync_timings));
  if (p->end_after_batch && *p->end_after_batch <= p->begin_on_batch) {
    return r.Error("end_after_batch",
                   absl::StrCat("field '", r.PathOf("end_after_batch"), "' must be greater than '",
                                r.PathOf("begin_on_batch"), "' (", p->begin_on_batch, "), got ", *p->end_after_batch,
                                "; leave it out to profile to the end of training"));
  }
  return absl::OkStatus();
}

// Determined's entrypoint: a string or a list of strings (joined by spaces).
absl::Status ParseEntrypoint(const ConfigMapReader& r, std::optional<std::string>* out) {
  const json* v = r.Find("entrypoint");
  if (v == nullptr || !v->is_array()) return r.GetString("entrypoint", out);
  std::vector<std::string> parts;
  DET_RETURN_IF_ERROR(r.GetStringList("entrypoint", &parts));
  *out = absl::StrJoin(parts, " ");
  return absl::OkStatus();
}

// global_batch_size, when given, must be a positive integer (or a search over them).
absl::Status CheckGlobalBatchSize(const ConfigSource& source, const HyperparameterSpace& space) {
  const std::string path = "hyperparameters.global_batch_size";
  auto it = space.find("global_batch_size");
  // Optional: only trials that ask their context for a batch size, and
  // lengths in records or epochs, need it.
  if (it == space.end()) return absl::OkStatus();
  auto positive_int = [](const json& v) {
    return (v.is_number_integer() && v.get<int64_t>() > 0) || (v.is_number_unsigned() && v.get<uint64_t>() > 0);
  };
  const Hyperparameter& h = it->second;
  switch (h.type) {
    case Hyperparameter::Type::kConst:
      if (!positive_int(h.val)) {
        return source.Error(path, absl::StrCat("field '", path, "' must be a positive integer, got ",
                                               DescribeValue(h.val)));
      }
      return absl::OkStatus();
    case Hyperparameter::Type::kInt:
      if (h.minval < 1) {
        return source.Error(JoinPath(path, "minval"),
                            absl::StrCat("field '", path, ".minval' must be >= 1, got ",
                                         static_cast<int64_t>(h.minval)));
      }
      return absl::OkStatus();
    case Hyperparameter::Type::kCategorical:
      for (size_t i = 0; i < h.vals.size(); ++i) {
        if (!positive_int(h.vals[i])) {
          std::string item = absl::StrCat(path, ".vals[", i, "]");
          return source.Error(item, absl::StrCat("field '", item, "' must be a positive integer, got ",
                                                 DescribeValue(h.vals[i])));
        }
      }
      return absl::OkStatus();
    default:
      return source.Error(path, absl::StrCat("field '", path,
                                             "' must be a positive integer (a const, int or categorical "
                                             "hyperparameter), got a ",
                                             std::string(HyperparameterTypeName(h.type)), " hyperparameter"));
  }
}

uint32_t SeedFromClock() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(now).count());
}

absl::StatusOr<ExperimentConfig> ParseFromJson(json raw, const ConfigSource& source, const ParseOptions& options) {
  ExperimentConfig c;
  c.source_name = source.name;
  if (raw.is_null()) return source.Error("", "the config is empty");
  DET_ASSIGN_OR_RETURN(ConfigMapReader top, ConfigMapReader::Create(source, raw, ""));
  DET_RETURN_IF_ERROR(top.CheckKeys(
      {"name", "description", "labels", "entrypoint", "hyperparameters", "searcher", "records_per_epoch",
       "min_validation_period", "min_checkpoint_period", "scheduling_unit", "perform_initial_validation",
       "checkpoint_policy", "checkpoint_storage", "resources", "max_restarts", "reproducibility", "data",
       "environment", "debug", "workspace", "project", "profiling"},
      {"bind_mounts", "optimizations", "tensorboard_storage", "integrations", "slurm", "pbs",
       "log_policies", "preemption_timeout", "data_layer", "retention_policy", "security", "internal"}));

  DET_RETURN_IF_ERROR(top.GetString("name", &c.name));
  if (c.name.empty()) return top.TypeError("name", "a non-empty string");
  DET_RETURN_IF_ERROR(top.GetString("description", &c.description));
  DET_RETURN_IF_ERROR(top.GetStringList("labels", &c.labels));
  DET_RETURN_IF_ERROR(ParseEntrypoint(top, &c.entrypoint));

  // hyperparameters
  const json* hparams = top.Find("hyperparameters");
  if (hparams == nullptr) return top.Missing("hyperparameters");
  DET_ASSIGN_OR_RETURN(c.hyperparameters, HyperparameterSpaceFromJson(*hparams, &source, "hyperparameters"));

  // searcher
  const json* searcher = top.Find("searcher");
  if (searcher == nullptr) return top.Missing("searcher");
  DET_ASSIGN_OR_RETURN(ConfigMapReader searcher_reader, ConfigMapReader::Create(source, *searcher, "searcher"));
  DET_RETURN_IF_ERROR(ParseSearcher(searcher_reader, &c.searcher));

  DET_RETURN_IF_ERROR(top.GetInt("records_per_epoch", &c.records_per_epoch, 0, kInt64Max));
  DET_RETURN_IF_ERROR(ParseOptionalLength(top, "min_validation_period", 0, &c.min_validation_period));
  DET_RETURN_IF_ERROR(ParseOptionalLength(top, "min_checkpoint_period", 0, &c.min_checkpoint_period));
  DET_RETURN_IF_ERROR(top.GetInt("scheduling_unit", &c.scheduling_unit, 1, kInt64Max));
  DET_RETURN_IF_ERROR(top.GetBool("perform_initial_validation", &c.perform_initial_validation));
  std::string policy;
  DET_RETURN_IF_ERROR(top.GetEnum("checkpoint_policy", {"best", "all", "none"}, &policy));
  if (policy == "all") c.checkpoint_policy = CheckpointPolicy::kAll;
  if (policy == "none") c.checkpoint_policy = CheckpointPolicy::kNone;

  if (const json* storage = top.Find("checkpoint_storage")) {
    DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, *storage, "checkpoint_storage"));
    c.checkpoint_storage.emplace();
    DET_RETURN_IF_ERROR(ParseCheckpointStorage(r, &*c.checkpoint_storage));
  }
  if (const json* resources = top.Find("resources")) {
    DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, *resources, "resources"));
    DET_RETURN_IF_ERROR(ParseResources(r, &c.resources));
  }
  DET_RETURN_IF_ERROR(top.GetInt("max_restarts", &c.max_restarts, 0, kInt64Max));

  if (const json* repro = top.Find("reproducibility")) {
    DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, *repro, "reproducibility"));
    DET_RETURN_IF_ERROR(r.CheckKeys({"experiment_seed"}));
    std::optional<int64_t> seed;
    DET_RETURN_IF_ERROR(r.GetInt("experiment_seed", &seed, 0, std::numeric_limits<uint32_t>::max()));
    if (seed.has_value()) {
      c.reproducibility.experiment_seed = static_cast<uint32_t>(*seed);
      c.reproducibility.experiment_seed_given = true;
    }
  }
  if (!c.reproducibility.experiment_seed_given) {
    c.reproducibility.experiment_seed =
        options.default_experiment_seed.has_value() ? *options.default_experiment_seed : SeedFromClock();
  }

  if (const json* data = top.Find("data")) c.data = *data;
  if (const json* env = top.Find("environment")) {
    DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, *env, "environment"));
    DET_RETURN_IF_ERROR(ParseEnvironment(r, &c.environment));
  }
  DET_RETURN_IF_ERROR(top.GetBool("debug", &c.debug));
  DET_RETURN_IF_ERROR(top.GetString("workspace", &c.workspace));
  DET_RETURN_IF_ERROR(top.GetString("project", &c.project));
  if (const json* profiling = top.Find("profiling")) {
    DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, *profiling, "profiling"));
    DET_RETURN_IF_ERROR(ParseProfiling(r, &c.profiling));
  }

  // Cross-field constraints.
  DET_RETURN_IF_ERROR(CheckGlobalBatchSize(source, c.hyperparameters));
  if (c.searcher.name == SearcherName::kGrid) {
    DET_RETURN_IF_ERROR(ValidateGridSpace(c.hyperparameters, &source, "hyperparameters").status());
  }

  // One line for each field that does not apply here (config_fields.h).
  c.warnings = UnusedFieldWarnings(raw);
  // And one for each searcher field its searcher does not read (searcher_fields.h).
  if (raw.is_object() && raw.contains("searcher")) {
    for (std::string& w : SearcherFieldWarnings(c.searcher, raw["searcher"])) c.warnings.push_back(std::move(w));
  }
  if (auto w = PbtExploreWarning(c)) c.warnings.push_back(*std::move(w));
  c.raw = std::move(raw);
  return c;
}

json OptionalToJson(const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); }
json OptionalToJson(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }
json OptionalToJson(const std::optional<Length>& v) { return v ? LengthToJson(*v) : json(nullptr); }

}  // namespace

std::string_view SearcherNameToString(SearcherName name) {
  switch (name) {
    case SearcherName::kSingle:
      return "single";
    case SearcherName::kRandom:
      return "random";
    case SearcherName::kGrid:
      return "grid";
    case SearcherName::kAdaptiveAsha:
      return "adaptive_asha";
    case SearcherName::kAsyncHalving:
      return "async_halving";
    case SearcherName::kPbt:
      return "pbt";
    case SearcherName::kTpe:
      return "tpe";
  }
  return "single";
}

std::string_view AshaModeToString(AshaMode mode) {
  switch (mode) {
    case AshaMode::kAggressive:
      return "aggressive";
    case AshaMode::kStandard:
      return "standard";
    case AshaMode::kConservative:
      return "conservative";
  }
  return "standard";
}

std::string_view CheckpointPolicyToString(CheckpointPolicy policy) {
  switch (policy) {
    case CheckpointPolicy::kBest:
      return "best";
    case CheckpointPolicy::kAll:
      return "all";
    case CheckpointPolicy::kNone:
      return "none";
  }
  return "best";
}

absl::StatusOr<ExperimentConfig> ParseExperimentConfig(std::string_view yaml_text, std::string_view source_name,
                                                       const ParseOptions& options) {
  ConfigSource source;
  source.name = std::string(source_name);
  DET_ASSIGN_OR_RETURN(json raw, ParseYamlToJson(yaml_text, &source));
  DET_ASSIGN_OR_RETURN(ExperimentConfig config, ParseFromJson(std::move(raw), source, options));
  config.yaml_text = std::string(yaml_text);
  return config;
}

absl::StatusOr<ExperimentConfig> ParseExperimentConfigJson(const nlohmann::json& config_json,
                                                           std::string_view source_name,
                                                           const ParseOptions& options) {
  ConfigSource source;
  source.name = std::string(source_name);
  DET_ASSIGN_OR_RETURN(ExperimentConfig config, ParseFromJson(config_json, source, options));
  config.yaml_text = config_json.dump(2);
  return config;
}

absl::StatusOr<ExperimentConfig> LoadExperimentConfigFile(const std::string& path, const ParseOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read experiment config '", path, "'"));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat("cannot read experiment config '", path, "'"));
  return ParseExperimentConfig(text.str(), path, options);
}

nlohmann::json ExperimentConfigToJson(const ExperimentConfig& c) {
  const SearcherConfig& s = c.searcher;
  json searcher = {
      {"name", std::string(SearcherNameToString(s.name))},
      {"metric", s.metric},
      {"smaller_is_better", s.smaller_is_better},
      {"source_trial_id", OptionalToJson(s.source_trial_id)},
      {"source_checkpoint_uuid", OptionalToJson(s.source_checkpoint_uuid)},
  };
  // The length in the form the config used (exactly one form parses back).
  if (s.time_metric) {
    searcher["time_metric"] = *s.time_metric;
    searcher["max_time"] = OptionalToJson(s.max_time);
  } else {
    searcher["max_length"] = LengthToJson(s.max_length);
  }
  if (s.name != SearcherName::kSingle) {
    searcher["max_trials"] = s.max_trials;
    searcher["max_concurrent_trials"] = s.max_concurrent_trials;
  }
  const bool asha = IsSuccessiveHalving(s.name);
  if (asha) {
    searcher["divisor"] = s.divisor;
    searcher["stop_once"] = s.stop_once;
  }
  if (s.name == SearcherName::kAdaptiveAsha) {
    searcher["max_rungs"] = s.max_rungs;
    searcher["mode"] = std::string(AshaModeToString(s.mode));
    searcher["bracket_rungs"] = s.bracket_rungs;
    searcher["bracket_order"] = s.options.bracket_order == BracketOrder::kParallel ? "parallel" : "aggressive_first";
  }
  if (s.name == SearcherName::kAsyncHalving) searcher["num_rungs"] = s.num_rungs;
  const SearchOptions& o = s.options;
  if (s.name == SearcherName::kPbt) {
    searcher.erase("max_trials");
    searcher["population_size"] = o.pbt.population_size;
    searcher["perturb_period"] = o.pbt.perturb_period;
    searcher["burn_in_period"] = BurnInOrDefault(o.pbt, SearcherLengthOf(s).max);
    searcher["truncate_fraction"] = o.pbt.truncate_fraction;
    searcher["resample_probability"] = o.pbt.resample_probability;
    searcher["perturb_factors"] = o.pbt.perturb_factors;
    searcher["explore"] = o.pbt.explore;
  }
  if (asha) {
    searcher["sampler"] = o.sampler == HParamSampler::kTpe ? "tpe" : "random";
    searcher["rung_metric"] = o.rung_metric == RungMetric::kBest ? "best" : "latest";
  }
  if (s.name == SearcherName::kAdaptiveAsha && o.sampler == HParamSampler::kTpe) {
    searcher["tpe_brackets"] = o.tpe_brackets == TpeBrackets::kAll ? "all" : "after_first";
  }
  if (asha && o.sampler == HParamSampler::kTpe) {
    searcher["model_promotions"] = ModelPromotionsOrDefault(o.model_promotions) && !s.stop_once;
  }
  if (s.name == SearcherName::kTpe || (asha && o.sampler == HParamSampler::kTpe)) {
    searcher["n_startup_trials"] = o.tpe.n_startup_trials;
    searcher["gamma"] = o.tpe.gamma;
    searcher["n_ei_candidates"] = o.tpe.n_ei_candidates;
    searcher["random_fraction"] = RandomFractionOrDefault(o.tpe, s.name != SearcherName::kTpe);
    searcher["multivariate"] = MultivariateOrDefault(o.tpe, s.name != SearcherName::kTpe);
  }
  if (s.name == SearcherName::kGrid && s.max_trials == 0) searcher.erase("max_trials");

  json storage = nullptr;
  if (c.checkpoint_storage) storage = CheckpointStorageToJson(*c.checkpoint_storage);
  json env = json::array();
  for (const auto& [k, v] : c.environment.environment_variables) env.push_back(absl::StrCat(k, "=", v));
  json seed = c.reproducibility.experiment_seed ? json(*c.reproducibility.experiment_seed) : json(nullptr);

  return json{
      {"name", c.name},
      {"description", c.description},
      {"labels", c.labels},
      {"entrypoint", OptionalToJson(c.entrypoint)},
      {"hyperparameters", HParamsToJson(c.hyperparameters)},
      {"searcher", std::move(searcher)},
      {"records_per_epoch", c.records_per_epoch},
      {"min_validation_period", OptionalToJson(c.min_validation_period)},
      {"min_checkpoint_period", OptionalToJson(c.min_checkpoint_period)},
      {"scheduling_unit", c.scheduling_unit},
      {"perform_initial_validation", c.perform_initial_validation},
      {"checkpoint_policy", std::string(CheckpointPolicyToString(c.checkpoint_policy))},
      {"checkpoint_storage", std::move(storage)},
      {"resources",
       {{"slots_per_trial", c.resources.slots_per_trial},
        {"resource_pool", c.resources.resource_pool},
        {"weight", c.resources.weight},
        {"priority", OptionalToJson(c.resources.priority)},
        {"max_slots", OptionalToJson(c.resources.max_slots)}}},
      {"max_restarts", c.max_restarts},
      {"reproducibility", {{"experiment_seed", std::move(seed)}}},
      {"data", c.data},
      {"environment", {{"environment_variables", std::move(env)}}},
      {"debug", c.debug},
      {"workspace", OptionalToJson(c.workspace)},
      {"project", OptionalToJson(c.project)},
      {"profiling",
       {{"enabled", c.profiling.enabled},
        {"begin_on_batch", c.profiling.begin_on_batch},
        {"end_after_batch", OptionalToJson(c.profiling.end_after_batch)},
        {"sync_timings", c.profiling.sync_timings}}},
  };
}

}  // namespace det
