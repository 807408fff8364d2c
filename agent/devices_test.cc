#include "agent/devices.h"

#include <gtest/gtest.h>

namespace det::agent {
namespace {

TEST(ParseNvidiaSmiTest, ReadsNameMemoryAndUuidPerGpu) {
  auto d = ParseNvidiaSmi(
      "0, NVIDIA H100 80GB HBM3, 81559, GPU-6f0e1a2b-0000-1111-2222-333344445555\n"
      "1, NVIDIA H100 80GB HBM3, 81559, GPU-7a7a7a7a-0000-1111-2222-333344445555\n");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].id(), 0);
  EXPECT_EQ(d[0].type(), det::api::v1::DEVICE_TYPE_CUDA);
  EXPECT_EQ(d[0].brand(), "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d[0].memory_bytes(), 81559LL * 1024 * 1024);
  EXPECT_EQ(d[0].uuid(), "GPU-6f0e1a2b-0000-1111-2222-333344445555");
  EXPECT_EQ(d[1].id(), 1);
}

TEST(ParseNvidiaSmiTest, SkipsMalformedLinesAndUnknownMemory) {
  auto d = ParseNvidiaSmi("garbage\n\nx, name, 1, GPU-1\n3, Tesla T4, [N/A], GPU-abc\r\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].id(), 3);
  EXPECT_EQ(d[0].brand(), "Tesla T4");
  EXPECT_EQ(d[0].memory_bytes(), 0);
  EXPECT_EQ(d[0].uuid(), "GPU-abc");
  EXPECT_TRUE(ParseNvidiaSmi("").empty());
}

}  // namespace
}  // namespace det::agent
