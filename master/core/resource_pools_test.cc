#include "master/core/resource_pools.h"

#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/experiment_config.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

constexpr char kPools[] = R"(resource_pools:
  - pool_name: gpu
    description: GPU nodes
    max_slots: 4
    default_priority: 10
  - pool_name: cpu
    preemption: false
default_compute_resource_pool: gpu
default_aux_resource_pool: cpu
)";

TEST(ResourcePoolsTest, ParsesPoolsInOrderWithDefaults) {
  auto pools = ParseResourcePools(kPools, "pools.yaml");
  ASSERT_TRUE(pools.ok()) << pools.status();
  ASSERT_EQ(pools->pools.size(), 2u);
  EXPECT_EQ(pools->pools[0].name, "gpu");
  EXPECT_EQ(pools->pools[0].description, "GPU nodes");
  EXPECT_EQ(pools->pools[0].max_slots, 4);
  EXPECT_TRUE(pools->pools[0].preemption);
  EXPECT_EQ(pools->pools[0].default_priority, 10);
  EXPECT_EQ(pools->pools[1].name, "cpu");
  EXPECT_FALSE(pools->pools[1].preemption);
  EXPECT_EQ(pools->pools[1].max_slots, 0);
  EXPECT_EQ(pools->pools[1].default_priority, 42);
  EXPECT_EQ(pools->default_compute_pool, "gpu");
  EXPECT_EQ(pools->default_aux_pool, "cpu");
  EXPECT_TRUE(pools->declared());
}

TEST(ResourcePoolsTest, DefaultsAreTheFirstPoolWhenUnset) {
  auto pools = ParseResourcePools("resource_pools:\n  - pool_name: a\n  - pool_name: b\n", "p.yaml");
  ASSERT_TRUE(pools.ok()) << pools.status();
  EXPECT_EQ(pools->default_compute_pool, "a");
  EXPECT_EQ(pools->default_aux_pool, "a");
}

// Each bad file is refused with the file, line and field named.
TEST(ResourcePoolsTest, BadFilesNameTheFileAndField) {
  struct Case {
    std::string yaml;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"resource_pools:\n  - pool_name: a\n    max_slot: 3\n", "p.yaml:3: unknown field 'resource_pools[0].max_slot'"},
      {"resource_pool:\n  - pool_name: a\n", "unknown field 'resource_pool'"},
      {"resource_pools:\n  - description: x\n", "missing required field 'resource_pools[0].pool_name'"},
      {"resource_pools:\n  - pool_name: 'a b'\n", "resource_pools[0].pool_name"},
      {"resource_pools:\n  - pool_name: a\n  - pool_name: a\n", "pool 'a' is declared twice"},
      {"resource_pools:\n  - pool_name: a\n    max_slots: -1\n", "resource_pools[0].max_slots"},
      {"resource_pools:\n  - pool_name: a\n    default_priority: 100\n", "resource_pools[0].default_priority"},
      {"resource_pools:\n  - pool_name: a\n    preemption: maybe\n", "resource_pools[0].preemption"},
      {"resource_pools:\n  - pool_name: a\ndefault_compute_resource_pool: b\n",
       "default_compute_resource_pool' names pool 'b', which is not declared (declared: a)"},
      {"resource_pools: []\n", "resource_pools"},
      {"resource_pools: gpu\n", "resource_pools"},
      {"default_aux_resource_pool: a\n", "missing required field 'resource_pools'"},
      {"resource_pools:\n  - pool_name: a\n    description: " + std::string(2000, 'x') + "\n",
       "resource_pools[0].description' is longer than 1024 bytes"},
      {"resource_pools:\n  - pool_name: " + std::string(200, 'p') + "\n", "resource_pools[0].pool_name"},
      {"resource_pools: [\n", "p.yaml"},
  };
  for (const auto& c : cases) {
    auto pools = ParseResourcePools(c.yaml, "p.yaml");
    ASSERT_FALSE(pools.ok()) << c.yaml;
    EXPECT_EQ(pools.status().code(), absl::StatusCode::kInvalidArgument) << c.yaml;
    EXPECT_THAT(std::string(pools.status().message()), HasSubstr(c.want)) << c.yaml;
    EXPECT_THAT(std::string(pools.status().message()), HasSubstr("p.yaml")) << c.yaml;
  }
}

TEST(ResourcePoolsTest, CountsAndSizesAreBounded) {
  std::string many = "resource_pools:\n";
  for (int i = 0; i <= kMaxResourcePools; ++i) absl::StrAppend(&many, "  - pool_name: p", i, "\n");
  auto pools = ParseResourcePools(many, "p.yaml");
  ASSERT_FALSE(pools.ok());
  EXPECT_THAT(std::string(pools.status().message()), HasSubstr("the limit is 256"));

  std::string huge = "resource_pools:\n  - pool_name: a\n# " + std::string(kMaxPoolsFileBytes, 'x') + "\n";
  pools = ParseResourcePools(huge, "p.yaml");
  ASSERT_FALSE(pools.ok());
  EXPECT_THAT(std::string(pools.status().message()), HasSubstr("p.yaml"));
}

TEST(ResourcePoolsTest, LoadNamesAnUnreadableFile) {
  auto pools = LoadResourcePoolsFile("/nonexistent/pools.yaml");
  ASSERT_FALSE(pools.ok());
  EXPECT_THAT(std::string(pools.status().message()), HasSubstr("/nonexistent/pools.yaml"));
}

ResourcesConfig Resources(const std::string& yaml_resources) {
  std::string config = absl::StrCat(
      "name: x\nhyperparameters:\n  global_batch_size: 4\nsearcher:\n  name: single\n  metric: loss\n"
      "  max_length:\n    batches: 10\n",
      yaml_resources);
  auto parsed = ParseExperimentConfig(config, "config");
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? parsed->resources : ResourcesConfig();
}

TEST(ResourcePoolsTest, ExperimentPoolIsTheConfigsOrTheDefault) {
  auto pools = ParseResourcePools(kPools, "pools.yaml");
  ASSERT_TRUE(pools.ok());
  EXPECT_EQ(*ResolveExperimentPool(*pools, Resources("")), "gpu");
  EXPECT_EQ(*ResolveExperimentPool(*pools, Resources("resources:\n  resource_pool: cpu\n")), "cpu");
  ResourcesConfig aux = Resources("");
  aux.slots_per_trial = 0;
  EXPECT_EQ(*ResolveExperimentPool(*pools, aux), "cpu");

  auto unknown = ResolveExperimentPool(*pools, Resources("resources:\n  resource_pool: tpu\n"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("resources.resource_pool"));
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("'tpu'"));

  // Without a pools file: as before, any pool, "default" when unset.
  ResourcePoolsConfig none;
  EXPECT_EQ(*ResolveExperimentPool(none, Resources("")), "default");
  EXPECT_EQ(*ResolveExperimentPool(none, Resources("resources:\n  resource_pool: tpu\n")), "tpu");
}

TEST(ResourcePoolsTest, AgentsMustJoinADeclaredPool) {
  auto pools = ParseResourcePools(kPools, "pools.yaml");
  ASSERT_TRUE(pools.ok());
  EXPECT_TRUE(CheckAgentPool(*pools, "a1", "gpu").ok());
  absl::Status st = CheckAgentPool(*pools, "a1", "default");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("agent 'a1': resource pool 'default' is not declared"));
  EXPECT_THAT(std::string(st.message()), HasSubstr("gpu, cpu"));
  EXPECT_TRUE(CheckAgentPool(ResourcePoolsConfig(), "a1", "anything").ok());
}

}  // namespace
}  // namespace det::master
