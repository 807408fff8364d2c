// GetCheckpointStorageCredentials hands out an S3 secret (issue 49, review
// finding M1): det-master answers it only over TLS (--tls-cert) or to a peer
// on its own host. The test runs in a network namespace of its own
// (unshare, as root) where 10.254.7.1 is a non-loopback address on lo, so
// a call to it comes from a non-loopback peer. A plaintext call from there
// is refused with FAILED_PRECONDITION naming --tls-cert; the same call from
// 127.0.0.1, or over TLS from 10.254.7.1, gets past the channel check (to
// NOT_FOUND: no trial 1).
#include <dirent.h>
#include <sched.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "det/trial/v1/trial.grpc.pb.h"
#include "tests/multi_host/netns.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
namespace trialv1 = ::det::trial::v1;

constexpr char kAddress[] = "10.254.7.1";

int ThreadCount() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

// A credentials call (trial 1, any token) to `address` at the master's gRPC
// port, plaintext, or over TLS with `ca` (the certificate names localhost).
grpc::Status Ask(const TestCluster& cluster, const std::string& address, const std::string& ca = "") {
  const std::string& grpc = cluster.grpc_address();
  const std::string target = address + grpc.substr(grpc.rfind(':'));
  std::shared_ptr<grpc::Channel> channel;
  if (ca.empty()) {
    channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  } else {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(ca);
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    channel = grpc::CreateCustomChannel(target, grpc::SslCredentials(ssl), args);
  }
  auto stub = trialv1::TrialService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.AddMetadata("x-det-allocation-token", "any-token");
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  trialv1::GetCheckpointStorageCredentialsRequest req;
  req.set_trial_id(1);
  req.set_storage_path("s3://det-test/x");
  trialv1::GetCheckpointStorageCredentialsResponse resp;
  grpc::Status st = stub->GetCheckpointStorageCredentials(&ctx, req, &resp);
  EXPECT_TRUE(resp.secret_access_key().empty());
  return st;
}

TEST(S3PlaintextChannel, CredentialsOnlyOverTlsOrToThisHost) {
  const std::string ip = IpBinary();
  ASSERT_FALSE(ip.empty()) << "needs iproute2's ip (deploy/install-deps.sh installs it)";
  ASSERT_EQ(access("/usr/bin/openssl", X_OK), 0) << "needs /usr/bin/openssl (deploy/install-deps.sh installs it)";
  // Threads started before would stay in the old namespace.
  ASSERT_EQ(ThreadCount(), 1) << "run this test alone in its process (ctest does)";
  ASSERT_EQ(unshare(CLONE_NEWNET), 0) << "unshare(CLONE_NEWNET) needs root or CAP_SYS_ADMIN: " << strerror(errno);
  for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
           {ip, "link", "set", "lo", "up"}, {ip, "addr", "add", std::string(kAddress) + "/32", "dev", "lo"}}) {
    std::string out, err;
    ASSERT_EQ(RunProcess(cmd, &out, &err), 0) << cmd[1] << ": " << err;
  }
  const std::vector<std::string> everywhere = {"--host", "0.0.0.0", "--advertise-address", kAddress,
                                               "--allow-empty-passwords"};
  {
    TempDir dir;
    TestCluster cluster(dir, TestClusterOptions().add_master_flags(everywhere));
    ASSERT_FALSE(HasFatalFailure());
    const grpc::Status remote = Ask(cluster, kAddress);
    EXPECT_EQ(remote.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << remote.error_message();
    EXPECT_THAT(remote.error_message(), HasSubstr("--tls-cert"));
    EXPECT_THAT(remote.error_message(), HasSubstr(kAddress));
    const grpc::Status local = Ask(cluster, "127.0.0.1");
    EXPECT_EQ(local.error_code(), grpc::StatusCode::NOT_FOUND) << local.error_message();
  }
  TempDir dir;
  ASSERT_EQ(WriteSelfSignedCert(dir.path()), "");
  std::vector<std::string> tls = everywhere;
  tls.insert(tls.end(), {"--tls-cert", dir / "cert.pem", "--tls-key", dir / "key.pem"});
  TestCluster cluster(dir, TestClusterOptions().add_master_flags(tls));
  ASSERT_FALSE(HasFatalFailure());
  const grpc::Status remote = Ask(cluster, kAddress, dir / "cert.pem");
  EXPECT_EQ(remote.error_code(), grpc::StatusCode::NOT_FOUND) << remote.error_message();
}

}  // namespace
}  // namespace det::testing
