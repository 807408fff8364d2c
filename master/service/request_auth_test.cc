// request_auth.h: peer addresses and the channel check for replies that hold
// a secret (GetCheckpointStorageCredentials only over TLS or loopback).
#include "master/service/request_auth.h"

#include <gtest/gtest.h>

namespace det::master {
namespace {

TEST(RequestAuthTest, LoopbackPeers) {
  for (const char* peer : {"ipv4:127.0.0.1:5000", "ipv4:127.1.2.3:1", "ipv6:[::1]:5000", "ipv6:%5B::1%5D:5000",
                           "ipv6:[::ffff:127.0.0.1]:80", "ipv6:%5B::ffff:127.0.0.5%5D:80", "unix:/tmp/sock",
                           "unix-abstract:det"}) {
    EXPECT_TRUE(IsLoopbackPeer(peer)) << peer;
  }
  for (const char* peer : {"ipv4:10.0.0.1:5000", "ipv4:128.0.0.1:1", "ipv4:0.0.0.0:1", "ipv4:1127.0.0.1:1",
                           "ipv4:127.0.0:1", "ipv6:[::2]:5000", "ipv6:[fe80::1]:1", "ipv6:[::ffff:10.0.0.1]:80",
                           "ipv6:[::ffff:128.0.0.1]:80", "ipv6:127.0.0.1:5", "127.0.0.1:5", "", "ipv4:",
                           "vsock:1"}) {
    EXPECT_FALSE(IsLoopbackPeer(peer)) << peer;
  }
}

TEST(RequestAuthTest, SecretsOnlyOverTlsOrToThisHost) {
  EXPECT_TRUE(CheckSecretChannel(false, "ipv4:127.0.0.1:5000").ok());
  EXPECT_TRUE(CheckSecretChannel(true, "ipv4:10.1.2.3:5000").ok());
  const absl::Status plaintext = CheckSecretChannel(false, "ipv4:10.1.2.3:5000");
  EXPECT_EQ(plaintext.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plaintext.message().find("--tls-cert"), absl::string_view::npos) << plaintext;
  EXPECT_NE(plaintext.message().find("10.1.2.3"), absl::string_view::npos) << plaintext;
  EXPECT_EQ(CheckSecretChannel(false, "ipv6:[2001:db8::1]:1").code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace det::master
