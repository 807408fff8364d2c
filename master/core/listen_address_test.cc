#include "master/core/listen_address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace det::master {
namespace {

TEST(ListenAddressTest, WildcardHosts) {
  for (const char* h : {"0.0.0.0", "::", "[::]", ""}) EXPECT_TRUE(IsWildcardHost(h)) << h;
  for (const char* h : {"127.0.0.1", "10.0.0.5", "::1", "det-master", "0.0.0.1"}) EXPECT_FALSE(IsWildcardHost(h)) << h;
}

TEST(ListenAddressTest, WildcardHostWithoutAdvertiseAddressIsRefusedNamingTheKey) {
  for (const char* h : {"0.0.0.0", "::", "[::]"}) {
    auto address = TrialMasterAddress(h, "", 8090);
    ASSERT_FALSE(address.ok()) << h << " gave " << *address;
    EXPECT_EQ(address.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(address.status().message()), ::testing::HasSubstr("advertise-address"));
  }
}

TEST(ListenAddressTest, DefaultsToHostAndBoundPort) {
  EXPECT_EQ(*TrialMasterAddress("127.0.0.1", "", 41234), "127.0.0.1:41234");
  EXPECT_EQ(*TrialMasterAddress("10.0.0.5", "", 8090), "10.0.0.5:8090");
  EXPECT_EQ(*TrialMasterAddress("::1", "", 8090), "[::1]:8090");
  EXPECT_EQ(*TrialMasterAddress("[::1]", "", 8090), "[::1]:8090");
}

TEST(ListenAddressTest, AdvertiseAddressGetsTheBoundPortWhenItHasNone) {
  EXPECT_EQ(*TrialMasterAddress("0.0.0.0", "det-master.example.internal", 8090), "det-master.example.internal:8090");
  EXPECT_EQ(*TrialMasterAddress("0.0.0.0", "10.0.0.5", 41234), "10.0.0.5:41234");
  EXPECT_EQ(*TrialMasterAddress("::", "fd00::5", 8090), "[fd00::5]:8090");
  EXPECT_EQ(*TrialMasterAddress("::", "[fd00::5]", 8090), "[fd00::5]:8090");
}

TEST(ListenAddressTest, AdvertiseAddressWithPortIsKept) {
  EXPECT_EQ(*TrialMasterAddress("0.0.0.0", "det-master:9000", 8090), "det-master:9000");
  EXPECT_EQ(*TrialMasterAddress("::", "[fd00::5]:9000", 8090), "[fd00::5]:9000");
}

}  // namespace
}  // namespace det::master
