// The trial profiler's `system` rows report the trial's own GPUs only
// (issue 48 review, finding 2), end to end: an agent on a node whose NVML is
// tests/nvml_stub (two devices, GPU-stub-0 at 37% and 1 GiB, GPU-stub-1 at
// 81% and 2 GiB) offers one GPU slot, device 1 (its nvidia-smi, a script on
// its PATH, lists only that GPU: as a node whose other GPU is held back).
// A profiled 1-slot trial there gets DET_GPU_UUIDS=GPU-stub-1 from the agent
// and its rows carry gpu0_* = device 1's figures and nothing of device 0.
// No GPU and no CUDA are needed: the trial trains on the CPU (LibTorch finds
// no CUDA device) while NVML answers from the stub.
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using json = nlohmann::json;

const std::string kSynthetic = std::string(DET_TRIALS_DIR) + "/synthetic_trial.so";

std::string ProfiledConfig(const std::string& checkpoint_dir) {
  return absl::StrCat(
      "name: gpu-profiled\nhyperparameters:\n  global_batch_size: 16\n  learning_rate: 0.01\n  hidden_size: 8\n"
      "  dropout: 0.0\n  batch_delay_ms: 5\n"
      "searcher:\n  name: single\n  metric: validation_loss\n  smaller_is_better: true\n"
      "  max_length:\n    batches: 20\n"
      "scheduling_unit: 10\nmax_restarts: 0\nresources:\n  slots_per_trial: 1\n"
      "checkpoint_storage:\n  type: shared_fs\n  host_path: ", checkpoint_dir,
      "\nenvironment:\n  environment_variables:\n    - OMP_NUM_THREADS=1\n"
      "data:\n  train_size: 128\n  val_size: 32\n  features: 4\n"
      "profiling:\n  enabled: true\n");
}

TEST(TrialProfilerGpuTest, SystemRowsCarryOnlyTheAllocationsGpu) {
  TempDir dir;
  // nvidia-smi of a node offering only its GPU 1 (index, name, MiB, uuid).
  const std::string bin = dir / "bin";
  ASSERT_EQ(mkdir(bin.c_str(), 0755), 0);
  {
    std::ofstream smi(bin + "/nvidia-smi");
    smi << "#!/bin/sh\necho '1, Stub GPU, 16384, GPU-stub-1'\n";
  }
  ASSERT_EQ(chmod((bin + "/nvidia-smi").c_str(), 0755), 0);
  const char* path = std::getenv("PATH");
  TestCluster cluster(dir);
  cluster.StartAgent("gpu-node", AgentOptions().set_prefix(
                                     {"/usr/bin/env", absl::StrCat("PATH=", bin, ":", path ? path : "/usr/bin:/bin"),
                                      absl::StrCat("LD_LIBRARY_PATH=", DET_NVML_STUB_DIR), "DET_AGENT_GPUS="}));
  ASSERT_TRUE(PollUntil([&] { return cluster.ConnectedAgents() == 1; }, std::chrono::seconds(30)))
      << cluster.MasterLog() << cluster.AgentLogs();

  const int exp = cluster.CreateExperiment(ProfiledConfig(dir / "checkpoints"), "gpu", kSynthetic);
  ASSERT_GT(exp, 0);
  const bool done = cluster.WaitForState(exp, "STATE_COMPLETED", std::chrono::minutes(3));
  json trials = cluster.Trials(exp);
  ASSERT_FALSE(trials.empty());
  const int trial = trials[0].value("id", 0);
  ASSERT_TRUE(done) << cluster.ExperimentState(exp) << "\n" << cluster.TrialLogs(trial) << cluster.AgentLogs();

  json rows = cluster.Metrics(trial, "system");
  ASSERT_GE(rows.size(), 2u) << rows.dump() << cluster.TrialLogs(trial);
  for (const json& row : rows) {
    const json& m = row["metrics"];
    ASSERT_TRUE(m.contains("gpu0_utilization_ratio")) << "the allocation's GPU is sampled: " << row.dump();
    EXPECT_DOUBLE_EQ(m["gpu0_utilization_ratio"].get<double>(), 0.81) << "gpu0 is stub device 1: " << row.dump();
    EXPECT_DOUBLE_EQ(m["gpu0_memory_used_bytes"].get<double>(), 2.0 * 1024 * 1024 * 1024) << row.dump();
    for (const auto& [key, value] : m.items()) {
      EXPECT_TRUE(key == "cpu_ratio" || key == "rss_bytes" || key.rfind("gpu0_", 0) == 0)
          << "no other GPU of the node: " << key << " in " << row.dump();
    }
  }
}

}  // namespace
}  // namespace det::testing
