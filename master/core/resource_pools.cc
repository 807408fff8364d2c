#include "master/core/resource_pools.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bounded_file.h"
#include "common/config_reader.h"
#include "common/status_macros.h"

namespace det::master {
namespace {

bool ValidPoolName(std::string_view name) {
  if (name.empty() || name.size() > kMaxPoolNameBytes) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string PoolNames(const ResourcePoolsConfig& pools) {
  std::vector<std::string> names;
  for (const auto& p : pools.pools) names.push_back(p.name);
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<ResourcePoolConfig> ParsePool(const ConfigSource& source, const nlohmann::json& item,
                                             const std::string& path) {
  DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, item, path));
  DET_RETURN_IF_ERROR(r.CheckKeys({"pool_name", "description", "max_slots", "preemption", "default_priority"},
                                  // Determined's agent-provisioning and scheduler keys: not used here.
                                  {"provider", "task_container_defaults", "scheduler", "agent_reattach_enabled",
                                   "agent_reconnect_wait", "kubernetes_namespace"}));
  ResourcePoolConfig pool;
  if (r.Find("pool_name") == nullptr) return r.Missing("pool_name");
  DET_RETURN_IF_ERROR(r.GetString("pool_name", &pool.name));
  if (!ValidPoolName(pool.name)) {
    return r.Error("pool_name", absl::StrCat("field '", r.PathOf("pool_name"), "' must be 1..", kMaxPoolNameBytes,
                                             " characters of [A-Za-z0-9_.-]"));
  }
  DET_RETURN_IF_ERROR(r.GetString("description", &pool.description));
  if (pool.description.size() > kMaxPoolDescriptionBytes) {
    return r.Error("description", absl::StrCat("field '", r.PathOf("description"), "' is longer than ",
                                               kMaxPoolDescriptionBytes, " bytes"));
  }
  int64_t max_slots = 0;
  DET_RETURN_IF_ERROR(r.GetInt("max_slots", &max_slots, 0, kMaxPoolSlots));
  pool.max_slots = static_cast<int>(max_slots);
  DET_RETURN_IF_ERROR(r.GetBool("preemption", &pool.preemption));
  int64_t priority = pool.default_priority;
  DET_RETURN_IF_ERROR(r.GetInt("default_priority", &priority, 1, 99));
  pool.default_priority = static_cast<int>(priority);
  return pool;
}

}  // namespace

const ResourcePoolConfig* ResourcePoolsConfig::Find(std::string_view name) const {
  for (const auto& p : pools) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

absl::StatusOr<ResourcePoolsConfig> ParseResourcePools(std::string_view yaml_text, std::string_view source_name) {
  ConfigSource source;
  source.name = std::string(source_name);
  YamlLimits limits;
  limits.max_bytes = kMaxPoolsFileBytes;
  DET_ASSIGN_OR_RETURN(nlohmann::json doc, ParseYamlToJson(yaml_text, &source, limits));
  DET_ASSIGN_OR_RETURN(ConfigMapReader r, ConfigMapReader::Create(source, doc, ""));
  DET_RETURN_IF_ERROR(
      r.CheckKeys({"resource_pools", "default_compute_resource_pool", "default_aux_resource_pool"}));
  const nlohmann::json* list = r.Find("resource_pools");
  if (list == nullptr) return r.Missing("resource_pools");
  if (!list->is_array() || list->empty()) return r.TypeError("resource_pools", "a non-empty list of pools");
  if (list->size() > static_cast<size_t>(kMaxResourcePools)) {
    return r.Error("resource_pools", absl::StrCat("field 'resource_pools' lists ", list->size(),
                                                  " pools; the limit is ", kMaxResourcePools));
  }
  ResourcePoolsConfig out;
  std::set<std::string> seen;
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string path = absl::StrCat("resource_pools[", i, "]");
    DET_ASSIGN_OR_RETURN(ResourcePoolConfig pool, ParsePool(source, (*list)[i], path));
    if (!seen.insert(pool.name).second) {
      return source.Error(JoinPath(path, "pool_name"),
                          absl::StrCat("field '", path, ".pool_name': pool '", pool.name, "' is declared twice"));
    }
    out.pools.push_back(std::move(pool));
  }
  out.default_compute_pool = out.pools.front().name;
  out.default_aux_pool = out.pools.front().name;
  for (auto [key, target] : {std::pair{"default_compute_resource_pool", &out.default_compute_pool},
                             std::pair{"default_aux_resource_pool", &out.default_aux_pool}}) {
    DET_RETURN_IF_ERROR(r.GetString(key, target));
    if (out.Find(*target) == nullptr) {
      return r.Error(key, absl::StrCat("field '", key, "' names pool '", target->substr(0, kMaxPoolNameBytes),
                                       "', which is not declared (declared: ", PoolNames(out), ")"));
    }
  }
  return out;
}

absl::StatusOr<ResourcePoolsConfig> LoadResourcePoolsFile(const std::string& path) {
  DET_ASSIGN_OR_RETURN(std::string text,
                       ReadBoundedFile(path, kMaxPoolsFileBytes, absl::StrCat("resource pools file '", path, "'")));
  return ParseResourcePools(text, path);
}

absl::StatusOr<std::string> ResolveExperimentPool(const ResourcePoolsConfig& pools, const ResourcesConfig& resources) {
  if (!resources.resource_pool_given) {
    return resources.slots_per_trial > 0 ? pools.default_compute_pool : pools.default_aux_pool;
  }
  if (!pools.declared() || pools.Find(resources.resource_pool) != nullptr) return resources.resource_pool;
  return absl::InvalidArgumentError(absl::StrCat("config: field 'resources.resource_pool' names pool '",
                                                 resources.resource_pool.substr(0, kMaxPoolNameBytes),
                                                 "', which does not exist (pools: ", PoolNames(pools), ")"));
}

absl::Status CheckAgentPool(const ResourcePoolsConfig& pools, std::string_view agent_id, std::string_view pool) {
  if (!pools.declared() || pools.Find(pool) != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "agent '", std::string(agent_id.substr(0, 128)), "': resource pool '",
      std::string(pool.substr(0, kMaxPoolNameBytes)),
      "' is not declared in the master's --resource-pools file (pools: ", PoolNames(pools),
      "); start the agent with --resource-pool naming one of them"));
}

}  // namespace det::master
