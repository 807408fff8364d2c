// S3Client against npm's s3rver on loopback (tests/s3_harness.h), checked
// with Debian's boto3: round trips, multipart, paging, batch delete,
// virtual-hosted addressing, HTTPS with a custom CA, and retries through the
// fault proxy (tries counted).
#include "common/s3/s3_client.h"

#include <cstdlib>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/s3_harness.h"
#include "tests/test_util.h"

namespace det::s3 {
namespace {

using ::det::test::RunBoto3;
using ::det::test::S3FaultProxy;
using ::det::test::S3Server;
using ::det::test::S3ServerOptions;
using ::det::testing::ReadFile;
using ::det::testing::TempDir;
using ::det::testing::WriteFile;
using ::testing::HasSubstr;

constexpr char kBucket[] = "det-test";

class S3ClientTest : public ::testing::Test {
 protected:
  void StartServer(S3ServerOptions options = {}) {
    auto s = S3Server::Start(dir_.path(), {kBucket}, std::move(options));
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
  }

  std::unique_ptr<S3Client> Client(S3Endpoint ep, S3RetryPolicy retry = {}, S3Limits limits = {}) {
    retry.base_backoff = std::chrono::milliseconds(1);
    retry.max_backoff = std::chrono::milliseconds(5);
    auto c = S3Client::Create(std::move(ep), {S3Server::kAccessKeyId, server_->secret(), ""}, retry, limits);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  std::unique_ptr<S3Client> PathClient(S3RetryPolicy retry = {}, S3Limits limits = {}) {
    S3Endpoint ep;
    ep.endpoint_url = server_->endpoint_url();
    return Client(std::move(ep), retry, limits);
  }

  TempDir dir_;
  std::unique_ptr<S3Server> server_;
};

TEST_F(S3ClientTest, SmallObjectsRoundTripAndBoto3SeesTheSameBytes) {
  StartServer();
  auto c = PathClient();
  ASSERT_NE(c, nullptr);
  const std::string key = "exp/a b/c+d=\xC3\xA9~x.bin";  // needs escaping
  const std::string data = "hello, object storage";
  auto put = c->PutObject(kBucket, key, data);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->etag, Md5Hex(data));
  EXPECT_EQ(put->size, static_cast<int64_t>(data.size()));

  auto head = c->HeadObject(kBucket, key);
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->size, static_cast<int64_t>(data.size()));
  EXPECT_EQ(head->etag, Md5Hex(data));
  auto got = c->GetObjectToString(kBucket, key, 1024);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, data);
  auto small = c->GetObjectToString(kBucket, key, 5);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kFailedPrecondition) << small.status();

  std::string range;
  ASSERT_TRUE(c->GetObjectRange(kBucket, key, 7, 6, [&](absl::string_view s) { range.append(s.data(), s.size()); }).ok());
  EXPECT_EQ(range, "object");

  // s3rver ignores encoding-type=url and sends keys raw (no <EncodingType>):
  // they are not decoded.
  auto listed = c->ListObjects(kBucket, "exp/a b/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].key, key);

  auto missing = c->HeadObject(kBucket, "exp/none");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
  auto missing_get = c->GetObjectToString(kBucket, "exp/none", 10);
  EXPECT_EQ(missing_get.status().code(), absl::StatusCode::kNotFound) << missing_get.status();

  auto boto = RunBoto3(*server_, {"get", kBucket, key, dir_ / "boto.out"});
  ASSERT_TRUE(boto.ok()) << boto.status();
  EXPECT_EQ((*boto)["md5"], Md5Hex(data));
  EXPECT_EQ(ReadFile(dir_ / "boto.out"), data);
}

TEST_F(S3ClientTest, MultipartFileLargerThanThePartSizeIsWhatBoto3Reads) {
  StartServer();
  S3Limits limits;
  limits.part_size = limits.multipart_threshold = int64_t{5} << 20;
  auto c = PathClient({}, limits);
  ASSERT_NE(c, nullptr);
  std::string data(12 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 7919) >> 9);
  WriteFile(dir_ / "big.bin", data);
  auto put = c->PutObjectFromFile(kBucket, "exp/ck/big.bin", dir_ / "big.bin");
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->size, static_cast<int64_t>(data.size()));
  EXPECT_GE(c->requests_sent(), 5);  // create, 3 parts, complete

  auto boto = RunBoto3(*server_, {"get", kBucket, "exp/ck/big.bin", dir_ / "boto.bin"});
  ASSERT_TRUE(boto.ok()) << boto.status();
  EXPECT_EQ((*boto)["size"], data.size());
  EXPECT_EQ((*boto)["md5"], Md5Hex(data));

  ASSERT_TRUE(c->GetObjectToFile(kBucket, "exp/ck/big.bin", dir_ / "back.bin", data.size(), Md5Hex(data)).ok());
  EXPECT_EQ(ReadFile(dir_ / "back.bin"), data);
  // A wrong MD5 or size is DataLoss and leaves no file behind.
  auto bad = c->GetObjectToFile(kBucket, "exp/ck/big.bin", dir_ / "bad.bin", data.size(), Md5Hex("other"));
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss) << bad;
  EXPECT_NE(access((dir_ / "bad.bin").c_str(), F_OK), 0);
  bad = c->GetObjectToFile(kBucket, "exp/ck/big.bin", dir_ / "bad.bin", 1000, "");
  EXPECT_EQ(bad.code(), absl::StatusCode::kDataLoss) << bad;
}

TEST_F(S3ClientTest, ListObjectsPagesAndDeleteObjectsBatches) {
  StartServer();
  S3Limits limits;
  limits.list_page_keys = 3;
  limits.delete_batch_keys = 4;
  auto c = PathClient({}, limits);
  ASSERT_NE(c, nullptr);
  // exp/z keeps s3rver's directory exp/ from becoming empty: s3rver removes
  // an emptied directory and two deletes racing on that answer HTTP 500
  // (which the client retries, but this test counts requests).
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(c->PutObject(kBucket, "exp/k" + std::to_string(i), "x").ok());
  ASSERT_TRUE(c->PutObject(kBucket, "exp/z", "y").ok());
  int64_t before = c->requests_sent();
  auto list = c->ListObjects(kBucket, "exp/k");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 10u);
  EXPECT_EQ(c->requests_sent() - before, 4);  // 3 + 3 + 3 + 1
  EXPECT_EQ((*list)[0].key, "exp/k0");
  EXPECT_EQ((*list)[0].size, 1);

  S3Limits few;
  few.max_list_keys = 5;
  auto bounded = PathClient({}, few)->ListObjects(kBucket, "exp/k");
  EXPECT_EQ(bounded.status().code(), absl::StatusCode::kFailedPrecondition) << bounded.status();
  EXPECT_THAT(std::string(bounded.status().message()), HasSubstr("more than 5 keys (S3Limits::max_list_keys)"));

  std::vector<std::string> keys;
  for (const ObjectInfo& o : *list) keys.push_back(o.key);
  before = c->requests_sent();
  ASSERT_TRUE(c->DeleteObjects(kBucket, keys).ok());
  EXPECT_EQ(c->requests_sent() - before, 3) << server_->Log();  // 4 + 4 + 2
  auto boto = RunBoto3(*server_, {"list", kBucket, ""});
  ASSERT_TRUE(boto.ok()) << boto.status();
  ASSERT_EQ(boto->size(), 1u);
  EXPECT_EQ((*boto)[0]["key"], "exp/z");
}

TEST_F(S3ClientTest, DeleteObjectsOfMoreThan1000KeysTakesTwoRequests) {
  StartServer();
  auto c = PathClient();
  ASSERT_NE(c, nullptr);
  std::vector<std::string> keys;
  for (int i = 0; i < 1003; ++i) keys.push_back("many/" + std::to_string(i));
  for (int i : {0, 999, 1000, 1002}) ASSERT_TRUE(c->PutObject(kBucket, keys[i], "z").ok());
  ASSERT_TRUE(c->PutObject(kBucket, "many/keep", "k").ok());  // see ListObjectsPages...
  int64_t before = c->requests_sent();
  ASSERT_TRUE(c->DeleteObjects(kBucket, keys).ok());  // missing keys count as deleted, as in S3
  EXPECT_EQ(c->requests_sent() - before, 2) << server_->Log();
  auto boto = RunBoto3(*server_, {"list", kBucket, "many/"});
  ASSERT_TRUE(boto.ok()) << boto.status();
  ASSERT_EQ(boto->size(), 1u) << boto->dump();
  EXPECT_EQ((*boto)[0]["key"], "many/keep");
}

TEST_F(S3ClientTest, VirtualHostedAddressing) {
  S3ServerOptions options;
  options.vhost_localhost = true;
  StartServer(options);
  S3Endpoint ep;
  ep.endpoint_url = "http://s3.localhost:" + std::to_string(server_->port());
  ep.addressing = Addressing::kVirtual;
  ep.resolve = {std::string(kBucket) + ".s3.localhost:" + std::to_string(server_->port()) + ":127.0.0.1"};
  auto c = Client(ep);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->PutObject(kBucket, "vh/one", "virtual").ok());
  auto list = c->ListObjects(kBucket, "vh/");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  auto boto = RunBoto3(*server_, {"get", kBucket, "vh/one", dir_ / "o"});
  ASSERT_TRUE(boto.ok()) << boto.status();
  EXPECT_EQ(ReadFile(dir_ / "o"), "virtual");
  // That the Host was det-test.s3.localhost and the path /vh/one is checked
  // at the capturing listener (s3_sigv4_test.cc).
}

TEST_F(S3ClientTest, HttpsWithTheOperatorsCaAndRefusedWithoutIt) {
  ASSERT_EQ(::det::testing::WriteSelfSignedCert(dir_.path()), "");
  S3ServerOptions options;
  options.tls_key = dir_ / "key.pem";
  options.tls_cert = dir_ / "cert.pem";
  StartServer(options);
  ASSERT_EQ(server_->endpoint_url().rfind("https://", 0), 0u) << server_->endpoint_url();
  S3Endpoint ep;
  ep.endpoint_url = server_->endpoint_url();
  ep.ca_pem = ReadFile(dir_ / "cert.pem");
  auto c = Client(ep);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->PutObject(kBucket, "tls/x", "secure").ok());
  auto got = c->GetObjectToString(kBucket, "tls/x", 100);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "secure");

  ep.ca_pem.clear();  // the system's CAs do not know this certificate
  S3RetryPolicy once;
  once.max_attempts = 1;
  auto untrusted = Client(ep, once);
  ASSERT_NE(untrusted, nullptr);
  auto refused = untrusted->GetObjectToString(kBucket, "tls/x", 100);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("certificate"));
}

class S3RetryTest : public S3ClientTest {
 protected:
  void SetUp() override {
    StartServer();
    auto p = S3FaultProxy::Start(server_->port());
    ASSERT_TRUE(p.ok()) << p.status();
    proxy_ = std::move(p).value();
  }
  std::unique_ptr<S3Client> ProxiedClient(int max_attempts, S3Limits limits = {}) {
    S3Endpoint ep;
    ep.endpoint_url = proxy_->endpoint_url();
    S3RetryPolicy retry;
    retry.max_attempts = max_attempts;
    return Client(ep, retry, limits);
  }
  std::unique_ptr<S3FaultProxy> proxy_;
};

TEST_F(S3RetryTest, TransientErrorsAreRetriedUntilSuccess) {
  auto c = ProxiedClient(5);
  ASSERT_NE(c, nullptr);
  proxy_->FailNextRequests(2, 503);
  ASSERT_TRUE(c->PutObject(kBucket, "r/503", "a").ok());
  EXPECT_EQ(proxy_->failed(), 2);
  EXPECT_EQ(c->requests_sent(), 3);

  // Connection resets. libcurl itself re-sends, once, a request whose
  // reused keep-alive connection was reset before any reply: the first try
  // meets two resets, the next ones one each.
  proxy_->FailNextRequests(3, 0);
  auto got = c->GetObjectToString(kBucket, "r/503", 10);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "a");
  EXPECT_EQ(proxy_->failed(), 5);
  EXPECT_EQ(c->requests_sent(), 6);

  proxy_->FailNextRequests(1, 429);
  ASSERT_TRUE(c->HeadObject(kBucket, "r/503").ok());
  EXPECT_EQ(proxy_->failed(), 6);
  EXPECT_EQ(c->requests_sent(), 8);
}

TEST_F(S3RetryTest, TriesAreBoundedByMaxAttemptsAnd4xxIsNotRetried) {
  auto c = ProxiedClient(3);
  ASSERT_NE(c, nullptr);
  proxy_->FailNextRequests(100, 503);
  auto put = c->PutObject(kBucket, "r/x", "a");
  EXPECT_EQ(put.status().code(), absl::StatusCode::kUnavailable) << put.status();
  EXPECT_THAT(std::string(put.status().message()), HasSubstr("after 3 tries"));
  EXPECT_EQ(proxy_->failed(), 3);
  EXPECT_EQ(c->requests_sent(), 3);

  proxy_->Reset();
  proxy_->FailNextRequests(100, 403);
  auto denied = c->PutObject(kBucket, "r/x", "a");
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied) << denied.status();
  EXPECT_EQ(proxy_->failed(), 4);
  EXPECT_EQ(c->requests_sent(), 4);

  for (int bad : {0, 21}) {
    S3RetryPolicy retry;
    retry.max_attempts = bad;
    auto refused = S3Client::Create({}, {"a", "b", ""}, retry);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("max_attempts"));
  }
}

TEST_F(S3RetryTest, AMultipartPartCutMidBodyIsRetriedAndTheObjectIsWhole) {
  S3Limits limits;
  limits.part_size = limits.multipart_threshold = int64_t{5} << 20;
  auto c = ProxiedClient(4, limits);
  ASSERT_NE(c, nullptr);
  std::string data((11 << 20) + 5, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + (i >> 13));
  WriteFile(dir_ / "f", data);
  proxy_->CutUploadPart(2, 2);
  auto put = c->PutObjectFromFile(kBucket, "r/multi", dir_ / "f");
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(proxy_->cuts(), 2);
  auto boto = RunBoto3(*server_, {"get", kBucket, "r/multi", dir_ / "g"});
  ASSERT_TRUE(boto.ok()) << boto.status();
  EXPECT_EQ((*boto)["md5"], Md5Hex(data));

  // Cut more often than the tries: the upload fails and is aborted, so no
  // object appears.
  proxy_->CutUploadPart(1, 10);
  auto failed = c->PutObjectFromFile(kBucket, "r/multi2", dir_ / "f");
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(proxy_->cuts(), 6);
  auto list = RunBoto3(*server_, {"list", kBucket, "r/multi2"});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->empty()) << list->dump();
}

// http_proxy/https_proxy/ALL_PROXY in the environment are not used: the
// signed requests go to the endpoint, never to the proxy (here the fault
// proxy, set to answer 503 to anything).
TEST_F(S3RetryTest, ProxyVariablesInTheEnvironmentAreIgnored) {
  const std::string proxy = proxy_->endpoint_url();
  for (const char* name : {"http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"}) {
    ::setenv(name, proxy.c_str(), 1);
  }
  ::unsetenv("no_proxy");
  ::unsetenv("NO_PROXY");
  proxy_->FailNextRequests(100, 503);
  S3RetryPolicy once;
  once.max_attempts = 1;
  auto c = PathClient(once);
  ASSERT_NE(c, nullptr);
  auto put = c->PutObject(kBucket, "p/direct", "x");
  auto got = c->GetObjectToString(kBucket, "p/direct", 10);
  for (const char* name : {"http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"}) ::unsetenv(name);
  EXPECT_TRUE(put.ok()) << put.status();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "x");
  EXPECT_EQ(proxy_->failed(), 0) << "a request went through the environment's proxy";
}

}  // namespace
}  // namespace det::s3
