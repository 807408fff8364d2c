#include "common/nvml.h"

#include <stdlib.h>

#include <string>

#include "gtest/gtest.h"

namespace det {
namespace {

constexpr uint64_t kGiB = 1024ull * 1024 * 1024;

// tests/nvml_stub: two devices with fixed figures.
TEST(NvmlTest, TheStubsTwoDevicesFiguresAreRead) {
  std::unique_ptr<Nvml> nvml = Nvml::LoadFrom({DET_NVML_STUB});
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(nvml->library(), DET_NVML_STUB);
  absl::StatusOr<std::vector<GpuSample>> samples = nvml->Sample();
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  const GpuSample& a = (*samples)[0];
  const GpuSample& b = (*samples)[1];
  EXPECT_EQ(a.index, 0);
  EXPECT_EQ(a.uuid, "GPU-stub-0");
  EXPECT_DOUBLE_EQ(a.utilization_ratio, 0.37);
  EXPECT_EQ(a.memory_used_bytes, 1 * kGiB);
  EXPECT_EQ(a.memory_total_bytes, 16 * kGiB);
  EXPECT_EQ(b.index, 1);
  EXPECT_EQ(b.uuid, "GPU-stub-1");
  EXPECT_DOUBLE_EQ(b.utilization_ratio, 0.81);
  EXPECT_EQ(b.memory_used_bytes, 2 * kGiB);
  EXPECT_EQ(b.memory_total_bytes, 16 * kGiB);
}

TEST(NvmlTest, TheFirstLibraryThatLoadsIsUsed) {
  std::unique_ptr<Nvml> nvml = Nvml::LoadFrom({"/nonexistent/libnvidia-ml.so.1", DET_NVML_STUB});
  ASSERT_NE(nvml, nullptr);
  EXPECT_EQ(nvml->library(), DET_NVML_STUB);
}

TEST(NvmlTest, NoLibraryIsNoNvml) {
  EXPECT_EQ(Nvml::LoadFrom({"/nonexistent/libnvidia-ml.so.1", "/nonexistent/libnvidia-ml.so"}), nullptr);
  EXPECT_EQ(Nvml::LoadFrom({}), nullptr);
}

// A library that loads but is not NVML (libm has none of its entries).
TEST(NvmlTest, ALibraryWithoutTheEntriesIsNoNvml) { EXPECT_EQ(Nvml::LoadFrom({"libm.so.6"}), nullptr); }

TEST(NvmlTest, AFailedInitIsNoNvml) {
  ASSERT_EQ(setenv("NVML_STUB_FAIL_INIT", "1", 1), 0);
  std::unique_ptr<Nvml> nvml = Nvml::LoadFrom({DET_NVML_STUB});
  unsetenv("NVML_STUB_FAIL_INIT");
  EXPECT_EQ(nvml, nullptr);
}

// One device's figure that NVML refuses (NOT_SUPPORTED utilisation, as on a
// MIG-enabled GPU) leaves out that figure only: the device's memory and the
// other device are still read (issue 48 review, finding 12c).
TEST(NvmlTest, OneDevicesRefusedFigureLeavesOutThatFigureOnly) {
  std::unique_ptr<Nvml> nvml = Nvml::LoadFrom({DET_NVML_STUB});
  ASSERT_NE(nvml, nullptr);
  ASSERT_EQ(setenv("NVML_STUB_FAIL_UTILIZATION", "1", 1), 0);
  absl::StatusOr<std::vector<GpuSample>> samples = nvml->Sample();
  unsetenv("NVML_STUB_FAIL_UTILIZATION");
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_TRUE((*samples)[0].has_utilization);
  EXPECT_DOUBLE_EQ((*samples)[0].utilization_ratio, 0.37);
  EXPECT_EQ((*samples)[1].uuid, "GPU-stub-1");
  EXPECT_FALSE((*samples)[1].has_utilization);
  EXPECT_TRUE((*samples)[1].has_memory);
  EXPECT_EQ((*samples)[1].memory_used_bytes, 2 * kGiB);
}

}  // namespace
}  // namespace det
