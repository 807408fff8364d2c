// Resource pools declared in the master's config (det-master
// --resource-pools FILE.yaml), in Determined's shape:
//
//   resource_pools:
//     - pool_name: gpu
//       description: A100 nodes
//       max_slots: 16          # optional: most slots in use in the pool at once
//       preemption: true       # optional (default true)
//       default_priority: 42   # optional: jobs that set no resources.priority
//     - pool_name: cpu
//   default_compute_resource_pool: gpu   # experiments with slots_per_trial > 0
//   default_aux_resource_pool: cpu       # slot-less work (slots_per_trial 0)
//
// Without the file the master has one pool "default" (and any pool an agent
// names), as before. Everything here is pure and thread-compatible.
#ifndef DET_MASTER_CORE_RESOURCE_POOLS_H_
#define DET_MASTER_CORE_RESOURCE_POOLS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/experiment_config.h"

namespace det::master {

// Bounds of a pools file.
inline constexpr int kMaxResourcePools = 256;
inline constexpr size_t kMaxPoolNameBytes = 128;        // [A-Za-z0-9_.-]
inline constexpr size_t kMaxPoolDescriptionBytes = 1024;
inline constexpr int64_t kMaxPoolSlots = 1000000;
inline constexpr int64_t kMaxPoolsFileBytes = 1 << 20;

struct ResourcePoolConfig {
  std::string name;
  std::string description;
  int max_slots = 0;  // 0: no cap
  bool preemption = true;
  int default_priority = 42;  // 1..99
};

struct ResourcePoolsConfig {
  // In the file's order; empty: no file (one implicit pool "default").
  std::vector<ResourcePoolConfig> pools;
  std::string default_compute_pool = "default";
  std::string default_aux_pool = "default";

  bool declared() const { return !pools.empty(); }
  // The declared pool `name`, or nullptr.
  const ResourcePoolConfig* Find(std::string_view name) const;
};

// Parses a pools file's text; `source_name` (the file) prefixes errors, which
// are InvalidArgument naming the line and field: unknown keys, a missing or
// malformed pool_name, a duplicate pool, out-of-range numbers, more than
// kMaxResourcePools pools, defaults that name no declared pool.
absl::StatusOr<ResourcePoolsConfig> ParseResourcePools(std::string_view yaml_text, std::string_view source_name);
// Reads and parses `path` (at most kMaxPoolsFileBytes); InvalidArgument
// naming the file when unreadable.
absl::StatusOr<ResourcePoolsConfig> LoadResourcePoolsFile(const std::string& path);

// The pool an experiment with `resources` runs in: resources.resource_pool
// when the config set it (InvalidArgument naming resources.resource_pool and
// the declared pools when pools are declared and it is none of them), else
// the default compute pool (slots_per_trial > 0) or the default aux pool.
absl::StatusOr<std::string> ResolveExperimentPool(const ResourcePoolsConfig& pools, const ResourcesConfig& resources);

// Ok when an agent may join `pool`: any pool when none are declared, else a
// declared one (InvalidArgument naming the agent, the pool and the declared
// pools otherwise).
absl::Status CheckAgentPool(const ResourcePoolsConfig& pools, std::string_view agent_id, std::string_view pool);

}  // namespace det::master

#endif  // DET_MASTER_CORE_RESOURCE_POOLS_H_
