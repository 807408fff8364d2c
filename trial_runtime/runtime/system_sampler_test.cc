// The GPUs of a trial's `system` rows (issue 48 review, finding 2): only the
// allocation's (DET_GPU_UUIDS, else CUDA_VISIBLE_DEVICES, else all), keyed by
// the trial's local index, and the variable bounded.
#include "trial_runtime/runtime/system_sampler.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace det::runtime {
namespace {

// The NVML stub's two devices (tests/nvml_stub).
std::vector<GpuSample> StubDevices() {
  return {{0, "GPU-stub-0", 0.37, 1ull << 30, 16ull << 30}, {1, "GPU-stub-1", 0.81, 2ull << 30, 16ull << 30}};
}

std::map<std::string, double> SelectedGpuKeys(const char* uuids, const char* cuda) {
  absl::StatusOr<TrialGpus> gpus = SelectTrialGpus(uuids, cuda);
  EXPECT_TRUE(gpus.ok()) << gpus.status();
  return gpus.ok() ? TrialGpuKeys(*gpus, StubDevices()) : std::map<std::string, double>{};
}

TEST(SystemSamplerTest, TheAllocationsGpusOnlyKeyedByTheTrialsIndex) {
  const std::map<std::string, double> only1 = {{"gpu0_utilization_ratio", 0.81},
                                               {"gpu0_memory_used_bytes", 2.0 * (1ull << 30)}};
  EXPECT_EQ(SelectedGpuKeys("GPU-stub-1", nullptr), only1);
  EXPECT_EQ(SelectedGpuKeys("GPU-stub-1", "0,1"), only1) << "DET_GPU_UUIDS comes first";
  EXPECT_EQ(SelectedGpuKeys(nullptr, "1"), only1);
  EXPECT_EQ(SelectedGpuKeys(nullptr, "GPU-stub-1"), only1);
  EXPECT_EQ(SelectedGpuKeys(nullptr, " GPU-stub-1 ,bogus,0"), only1) << "CUDA stops at the first invalid entry";
  EXPECT_TRUE(SelectedGpuKeys("", nullptr).empty()) << "a CPU slot";
  EXPECT_TRUE(SelectedGpuKeys(nullptr, "").empty());
  EXPECT_TRUE(SelectedGpuKeys(nullptr, "-1,0").empty());
  EXPECT_TRUE(SelectedGpuKeys("GPU-other", nullptr).empty()) << "a GPU NVML does not report";
  std::map<std::string, double> swapped = SelectedGpuKeys("GPU-stub-1,GPU-stub-0", nullptr);
  EXPECT_EQ(swapped.at("gpu0_utilization_ratio"), 0.81);
  EXPECT_EQ(swapped.at("gpu1_utilization_ratio"), 0.37);
  std::map<std::string, double> all = SelectedGpuKeys(nullptr, nullptr);
  EXPECT_EQ(all.size(), 4u);
  EXPECT_EQ(all.at("gpu1_utilization_ratio"), 0.81);
}

TEST(SystemSamplerTest, ARefusedFigureHasNoKey) {
  std::vector<GpuSample> devices = StubDevices();
  devices[1].has_utilization = false;
  absl::StatusOr<TrialGpus> gpus = SelectTrialGpus("GPU-stub-1", nullptr);
  ASSERT_TRUE(gpus.ok());
  std::map<std::string, double> keys = TrialGpuKeys(*gpus, devices);
  EXPECT_EQ(keys.count("gpu0_utilization_ratio"), 0u);
  EXPECT_EQ(keys.count("gpu0_memory_used_bytes"), 1u);
}

TEST(SystemSamplerTest, DetGpuUuidsIsBounded) {
  std::string many;
  for (int i = 0; i < 65; ++i) many += (i ? ",GPU-" : "GPU-") + std::to_string(i);
  for (const std::string& bad : {many, std::string("GPU-a,,GPU-b"), std::string("GPU a"),
                                 std::string("GPU-") + std::string(100, 'x'), std::string(7000, 'x')}) {
    absl::StatusOr<TrialGpus> gpus = SelectTrialGpus(bad.c_str(), nullptr);
    ASSERT_FALSE(gpus.ok()) << bad;
    EXPECT_EQ(gpus.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(gpus.status().message().find("DET_GPU_UUIDS"), std::string::npos) << gpus.status();
  }
}

}  // namespace
}  // namespace det::runtime
