#include "common/config_fields.h"

#include "absl/strings/str_cat.h"

namespace det {
namespace {

// A field read by `consumer` (where `token` occurs).
ConfigField Read(std::string_view path, std::string_view consumer, std::string_view token) {
  return ConfigField{path, false, consumer, token, {}};
}
// As Read, for a field with free-form or structured content below it.
ConfigField ReadTree(std::string_view path, std::string_view consumer, std::string_view token) {
  return ConfigField{path, true, consumer, token, {}};
}
// A Determined field that does not apply here (anything below it included).
ConfigField Unused(std::string_view path, std::string_view reason) { return ConfigField{path, true, {}, {}, reason}; }

constexpr std::string_view kExperiments = "master/core/experiments.cc";
constexpr std::string_view kTrialCalls = "master/core/trial_calls.cc";
constexpr std::string_view kAllocations = "master/core/allocations.cc";
constexpr std::string_view kSearcher = "master/search/searcher.cc";
constexpr std::string_view kAsha = "master/search/asha.cc";
constexpr std::string_view kAshaLayout = "master/search/asha_layout.cc";
constexpr std::string_view kRuntimeMain = "trial_runtime/runtime/main.cc";
constexpr std::string_view kCheckpointGc = "master/core/checkpoint_gc.cc";
constexpr std::string_view kS3Profiles = "master/core/s3_profiles.cc";
constexpr std::string_view kJobKnobs = "master/core/core_state.h";  // SetJobKnobsFromConfig
constexpr std::string_view kProfiler = "trial_runtime/runtime/profiler.cc";
constexpr std::string_view kValidationPolicy = "common/validation_policy.cc";

std::vector<ConfigField> MakeTable() {
  return {
      Read("name", kExperiments, "config.name"),
      Read("description", kExperiments, "config.description"),
      Read("labels", kExperiments, "config.labels"),
      Unused("entrypoint", "det-cpp runs the trial.so given to 'experiment create', not a Python entrypoint"),
      ReadTree("hyperparameters", kSearcher, "config.hyperparameters"),
      Read("searcher", kSearcher, "config.searcher"),
      Read("searcher.name", kAshaLayout, "sc.name"),
      Read("searcher.metric", kTrialCalls, "searcher.metric"),
      Read("searcher.smaller_is_better", kTrialCalls, "searcher.smaller_is_better"),
      ReadTree("searcher.max_length", "common/batch_lengths.cc", "searcher.max_length"),
      Read("searcher.max_trials", kSearcher, "sc.max_trials"),
      Read("searcher.max_concurrent_trials", kSearcher, "sc.max_concurrent_trials"),
      Read("searcher.divisor", kAshaLayout, "sc.divisor"),
      Read("searcher.max_rungs", kAshaLayout, "sc.max_rungs"),
      Read("searcher.mode", kAshaLayout, "sc.mode"),
      Read("searcher.bracket_rungs", kAshaLayout, "sc.bracket_rungs"),
      Read("searcher.stop_once", kAshaLayout, "sc.stop_once"),
      Read("searcher.time_metric", "common/batch_lengths.cc", "searcher.time_metric"),
      Read("searcher.max_time", "common/batch_lengths.cc", "searcher.max_time"),
      Read("searcher.num_rungs", kAshaLayout, "sc.num_rungs"),
      Read("searcher.source_trial_id", "master/core/experiment_fork.cc", ".source_trial_id"),
      Read("searcher.source_checkpoint_uuid", "master/core/experiment_fork.cc", ".source_checkpoint_uuid"),
      Read("searcher.population_size", "master/search/pbt.cc", "o.population_size"),
      Read("searcher.perturb_period", "master/search/pbt.cc", "options_.perturb_period"),
      Read("searcher.burn_in_period", "master/search/pbt.cc", "options_.burn_in_period"),
      Read("searcher.truncate_fraction", "master/search/pbt.cc", "options_.truncate_fraction"),
      Read("searcher.resample_probability", "master/search/pbt.cc", "o.resample_probability"),
      Read("searcher.perturb_factors", "master/search/pbt.cc", "o.perturb_factors"),
      Read("searcher.explore", "master/search/pbt.cc", "o.explore"),
      Read("searcher.sampler", kAsha, "options.sampler"),
      Read("searcher.rung_metric", kAsha, "options.rung_metric"),
      Read("searcher.bracket_order", kAshaLayout, "options.bracket_order"),
      Read("searcher.tpe_brackets", kAsha, "options.tpe_brackets"),
      Read("searcher.model_promotions", kAsha, "options.model_promotions"),
      Read("searcher.n_startup_trials", "master/search/tpe.cc", "options_.n_startup_trials"),
      Read("searcher.gamma", "master/search/tpe.cc", "options_.gamma"),
      Read("searcher.n_ei_candidates", "master/search/tpe.cc", "options_.n_ei_candidates"),
      Read("searcher.random_fraction", "master/search/tpe.cc", "options_.random_fraction"),
      Read("searcher.multivariate", "master/search/tpe.cc", "options_.multivariate"),
      Read("records_per_epoch", "common/batch_lengths.cc", "config.records_per_epoch"),
      ReadTree("min_validation_period", "common/batch_lengths.cc", "min_validation_period"),
      ReadTree("min_checkpoint_period", "common/batch_lengths.cc", "min_checkpoint_period"),
      Read("scheduling_unit", kTrialCalls, "config.scheduling_unit"),
      Read("perform_initial_validation", kValidationPolicy, "config.perform_initial_validation"),
      Read("checkpoint_policy", kValidationPolicy, "config.checkpoint_policy"),
      Read("checkpoint_storage", kExperiments, "config.checkpoint_storage"),
      Read("checkpoint_storage.type", kExperiments, "checkpoint_storage->type == \"s3\""),
      Read("checkpoint_storage.host_path", kExperiments, "->host_path"),
      Read("checkpoint_storage.storage_path", kExperiments, "->storage_path"),
      Read("checkpoint_storage.bucket", kS3Profiles, "storage.bucket"),
      Read("checkpoint_storage.prefix", kS3Profiles, "storage.prefix"),
      Read("checkpoint_storage.endpoint_url", kS3Profiles, "storage.endpoint_url"),
      Read("checkpoint_storage.region", kS3Profiles, "storage.region"),
      Read("checkpoint_storage.profile", kS3Profiles, "storage.profile"),
      Read("checkpoint_storage.addressing_style", kS3Profiles, "storage.addressing_style"),
      Read("checkpoint_storage.save_experiment_best", kCheckpointGc, "c.save_experiment_best"),
      Read("checkpoint_storage.save_trial_best", kCheckpointGc, "c.save_trial_best"),
      Read("checkpoint_storage.save_trial_latest", kCheckpointGc, "c.save_trial_latest"),
      Unused("checkpoint_storage.container_path", "det-cpp runs no containers; checkpoints go to host_path"),
      Unused("checkpoint_storage.propagation", "det-cpp runs no containers, so there is no mount to propagate"),
      Unused("checkpoint_storage.checkpoint_path",
             "Determined's deprecated container path; checkpoints go to host_path/storage_path"),
      Unused("checkpoint_storage.tensorboard_path", "det-cpp writes no TensorBoard files"),
      Read("resources", kAllocations, "config.resources"),
      Read("resources.slots_per_trial", kAllocations, "resources.slots_per_trial"),
      Read("resources.resource_pool", "master/core/resource_pools.cc", "resources.resource_pool"),
      Read("resources.weight", kJobKnobs, "config.resources.weight"),
      Read("resources.priority", kJobKnobs, "config.resources.priority"),
      Read("resources.max_slots", kJobKnobs, "config.resources.max_slots"),
      Unused("resources.slots", "Determined's slot count for commands and notebooks; experiments use slots_per_trial"),
      Unused("resources.shm_size", "det-cpp runs no containers, so there is no /dev/shm to size"),
      Unused("resources.agent_label", "Determined's pre-pool agent labels; use resources.resource_pool"),
      Unused("resources.devices", "det-cpp runs no containers, so there are no devices to mount"),
      Unused("resources.native_parallel", "Determined's removed native parallelism; use slots_per_trial"),
      Unused("resources.is_single_node", "a det-cpp trial may always span agents, as the scheduler decides"),
      Read("max_restarts", kAllocations, "config.max_restarts"),
      Read("reproducibility", kSearcher, "config.reproducibility"),
      Read("reproducibility.experiment_seed", kSearcher, "reproducibility.experiment_seed"),
      ReadTree("data", "trial_runtime/sdk/context.cc", "find(\"data\")"),
      Read("environment", kAllocations, "config.environment"),
      ReadTree("environment.environment_variables", kAllocations, "environment.environment_variables"),
      Unused("environment.image", "det-cpp runs trials as processes, not in container images"),
      Unused("environment.force_pull_image", "det-cpp pulls no container images"),
      Unused("environment.registry_auth", "det-cpp pulls no container images"),
      Unused("environment.pod_spec", "det-cpp does not run on Kubernetes"),
      Unused("environment.add_capabilities", "det-cpp runs no containers"),
      Unused("environment.drop_capabilities", "det-cpp runs no containers"),
      Unused("environment.proxy_ports", "det-cpp trials expose no ports"),
      Unused("environment.ports", "det-cpp trials expose no ports"),
      Read("debug", "trial_runtime/runtime/managed_mode.cc", "config_.debug"),
      Read("workspace", "master/core/workspaces.cc", "config.workspace"),
      Read("project", "master/core/workspaces.cc", "config.project"),
      Unused("bind_mounts", "det-cpp runs no containers; trials see the agent's file system"),
      Unused("optimizations", "Horovod's aggregation, fusion and compression settings; det-cpp uses torch.distributed"),
      Read("profiling", "trial_runtime/runtime/trial_controller.cc", "plan_.profiling"),
      Read("profiling.enabled", kProfiler, "config_.enabled"),
      Read("profiling.begin_on_batch", kProfiler, "config_.begin_on_batch"),
      Read("profiling.end_after_batch", kProfiler, "config_.end_after_batch"),
      Read("profiling.sync_timings", "trial_runtime/runtime/trial_controller.cc", "profiling.sync_timings"),
      Unused("tensorboard_storage", "det-cpp writes no TensorBoard files"),
      Unused("integrations", "det-cpp has no Pachyderm integration"),
      Unused("slurm", "det-cpp does not run on Slurm"),
      Unused("pbs", "det-cpp does not run on PBS"),
      Unused("log_policies", "det-cpp matches no log patterns"),
      Unused("preemption_timeout", "det-cpp waits --stop-timeout-s (a master flag) for a preempted trial"),
      Unused("data_layer", "Determined's removed data layer cache; read data in the trial"),
      Unused("retention_policy", "det-cpp keeps trial logs within --max-trial-log-mib instead of by age"),
      Unused("security", "det-cpp has no Kerberos support"),
      Unused("internal", "Determined's internal settings"),
  };
}

bool Covers(const ConfigField& f, std::string_view path) {
  if (path == f.path) return true;
  if (!f.subtree || path.size() <= f.path.size() || path.substr(0, f.path.size()) != f.path) return false;
  char next = path[f.path.size()];
  return next == '.' || next == '[';
}

// The value at dotted `path` in `raw`, or nullptr (absent or null).
const nlohmann::json* At(const nlohmann::json& raw, std::string_view path) {
  const nlohmann::json* node = &raw;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    const std::string part(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!node->is_object()) return nullptr;
    auto it = node->find(part);
    if (it == node->end() || it->is_null()) return nullptr;
    node = &*it;
    if (dot == std::string_view::npos) return node;
    start = dot + 1;
  }
}

}  // namespace

const std::vector<ConfigField>& ExperimentConfigFields() {
  static const std::vector<ConfigField>* table = new std::vector<ConfigField>(MakeTable());
  return *table;
}

const ConfigField* FindConfigField(std::string_view path) {
  const ConfigField* best = nullptr;
  for (const ConfigField& f : ExperimentConfigFields()) {
    if (Covers(f, path) && (best == nullptr || f.path.size() > best->path.size())) best = &f;
  }
  return best;
}

std::string UnusedFieldWarning(const ConfigField& field) {
  return absl::StrCat("field '", std::string(field.path), "' is accepted but not used: ",
                      std::string(field.unused_reason));
}

std::vector<std::string> UnusedFieldWarnings(const nlohmann::json& raw) {
  std::vector<std::string> warnings;
  for (const ConfigField& f : ExperimentConfigFields()) {
    if (!f.unused_reason.empty() && At(raw, f.path) != nullptr) warnings.push_back(UnusedFieldWarning(f));
  }
  return warnings;
}

}  // namespace det
