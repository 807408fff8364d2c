// The signature det-cpp really sends, checked with botocore: a loopback
// listener (cpp-httplib) captures the requests S3Client makes (method, path
// and query as sent, headers, body) and answers them as S3 would; Debian's
// botocore (tests/s3/sigv4_check.py) recomputes each Authorization header
// for the same request, key and time.
#include <unistd.h>

#include <httplib.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "common/s3/s3_client.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/test_util.h"

namespace det::s3 {
namespace {

using ::det::testing::ReadFile;
using ::det::testing::TempDir;
using ::det::testing::WriteFile;
using ::testing::HasSubstr;

// Answers S3's calls plausibly (ETags are the MD5s of what was sent) and
// records every request. The first listing is truncated (so the second page
// carries a continuation-token); a part of an object whose key ends in
// "fail" is refused (400), so the client aborts that upload (DELETE
// ?uploadId=).
class CapturingS3 {
 public:
  CapturingS3() {
    auto handler = [this](const httplib::Request& req, httplib::Response& res) { Handle(req, res); };
    server_.Get(".*", handler);
    server_.Put(".*", handler);
    server_.Post(".*", handler);
    server_.Delete(".*", handler);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~CapturingS3() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  nlohmann::json requests() {
    std::lock_guard<std::mutex> l(mu_);
    return captured_;
  }

 private:
  void Handle(const httplib::Request& req, httplib::Response& res) {
    nlohmann::json headers = nlohmann::json::object();
    for (const auto& [k, v] : req.headers) {
      if (k != "REMOTE_ADDR" && k != "REMOTE_PORT" && k != "LOCAL_ADDR" && k != "LOCAL_PORT") headers[k] = v;
    }
    std::lock_guard<std::mutex> l(mu_);
    captured_.push_back({{"method", req.method}, {"target", req.target}, {"headers", headers},
                         {"body_hex", absl::BytesToHexString(req.body)}});
    const std::string md5 = Md5Hex(req.body);
    if (req.method == "PUT" && absl::EndsWith(req.path, "fail")) {
      res.status = 400;
      res.set_content("<Error><Code>InvalidPart</Code><Message>refused</Message></Error>", "application/xml");
    } else if (req.method == "PUT") {
      if (req.has_param("partNumber")) parts_.push_back(md5);
      res.set_header("ETag", "\"" + md5 + "\"");
    } else if (req.method == "POST" && req.has_param("uploads")) {
      parts_.clear();
      res.set_content("<InitiateMultipartUploadResult><UploadId>up/1+2=</UploadId></InitiateMultipartUploadResult>",
                      "application/xml");
    } else if (req.method == "POST" && req.has_param("uploadId")) {
      res.set_content("<CompleteMultipartUploadResult><ETag>\"" + MultipartEtag(parts_) +
                          "\"</ETag></CompleteMultipartUploadResult>",
                      "application/xml");
    } else if (req.method == "POST") {
      res.set_content("<DeleteResult></DeleteResult>", "application/xml");
    } else if (req.has_param("list-type") && !req.has_param("continuation-token")) {
      res.set_content("<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>tok/1+2= x"
                      "</NextContinuationToken><Contents><Key>k/a</Key><Size>1</Size><ETag>\"x\"</ETag></Contents>"
                      "</ListBucketResult>",
                      "application/xml");
    } else if (req.has_param("list-type")) {
      res.set_content("<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
                      "<Contents><Key>k/b+c%2B</Key><Size>1</Size><ETag>\"x\"</ETag></Contents></ListBucketResult>",
                      "application/xml");
    } else {  // httplib answers a Range itself (206 with those bytes)
      res.set_content("0123456789", "application/octet-stream");
    }
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  nlohmann::json captured_ = nlohmann::json::array();
  std::vector<std::string> parts_;
};

constexpr char kAccessKey[] = "AKIDEXAMPLE";
constexpr char kSecret[] = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

// Runs sigv4_check.py on the captured requests with `secret`; its reply.
nlohmann::json Botocore(const TempDir& dir, const nlohmann::json& requests, const std::string& secret,
                        const std::string& region) {
  WriteFile(dir / "requests.json", requests.dump());
  WriteFile(dir / "secret", secret);
  chmod((dir / "secret").c_str(), 0600);
  std::string out, err;
  int rc = ::det::testing::RunProcess({"/usr/bin/python3", DET_SOURCE_DIR "/tests/s3/sigv4_check.py", "--requests",
                                       dir / "requests.json", "--access-key", kAccessKey, "--secret-key-file",
                                       dir / "secret", "--region", region},
                                      &out, &err);
  EXPECT_EQ(rc, 0) << "sigv4_check.py (Debian's /usr/bin/python3 with python3-botocore, see "
                      "deploy/install-deps.sh): "
                   << err;
  auto j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_TRUE(j.is_array()) << out << err;
  return j.is_array() ? j : nlohmann::json::array();
}

// Makes every kind of request det-cpp sends, through `ep`.
void MakeEveryRequest(const S3Endpoint& ep, const S3Credentials& creds, const TempDir& dir) {
  S3Limits limits;
  limits.part_size = limits.multipart_threshold = int64_t{1} << 20;
  auto c = S3Client::Create(ep, creds, {}, limits);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->PutObject("det-test", "exp/small", "payload").ok());
  ASSERT_TRUE((*c)->PutObject("det-test", "a b/c+d=\xC3\xA9~(x)*!'.bin", "escaped").ok());
  std::string got;
  ASSERT_TRUE((*c)->GetObjectRange("det-test", "exp/small", 3, 4, [&](absl::string_view s) { got.append(s.data(), s.size()); }).ok());
  EXPECT_EQ(got, "3456");
  ASSERT_TRUE((*c)->HeadObject("det-test", "exp/small").ok());
  auto list = (*c)->ListObjects("det-test", "exp/a b+c/");  // two pages
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].key, "k/b c+");  // url-decoded
  ASSERT_TRUE((*c)->DeleteObjects("det-test", {"exp/small", "a&b<c>"}).ok());
  std::string big((1 << 20) + 100, 'b');
  WriteFile(dir / "big", big);
  auto multi = (*c)->PutObjectFromFile("det-test", "exp/big", dir / "big");
  ASSERT_TRUE(multi.ok()) << multi.status();
  // A refused part: the upload is aborted (AbortMultipartUpload is signed too).
  auto failed = (*c)->PutObjectFromFile("det-test", "exp/fail", dir / "big");
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kFailedPrecondition) << failed.status();
}

int Count(const nlohmann::json& reqs, const std::string& method, const std::string& target_part) {
  int n = 0;
  for (const auto& r : reqs) {
    if (r["method"] == method && absl::StrContains(r["target"].get<std::string>(), target_part)) ++n;
  }
  return n;
}

TEST(S3SigV4Test, EveryRequestsAuthorizationIsWhatBotocoreComputes) {
  TempDir dir;
  CapturingS3 s3;
  S3Endpoint ep;
  ep.endpoint_url = "http://127.0.0.1:" + std::to_string(s3.port());
  ep.region = "eu-central-1";
  MakeEveryRequest(ep, {kAccessKey, kSecret, ""}, dir);
  // A session token is signed too (x-amz-security-token).
  auto with_token = S3Client::Create(ep, {kAccessKey, kSecret, "FwoGZXIvYXdzEXAMPLE//token+="});
  ASSERT_TRUE(with_token.ok());
  ASSERT_TRUE((*with_token)->PutObject("det-test", "tok", "t").ok());

  nlohmann::json reqs = s3.requests();
  EXPECT_EQ(Count(reqs, "PUT", "/det-test/exp/small"), 1);
  EXPECT_EQ(Count(reqs, "PUT", "/det-test/a%20b/c%2Bd%3D%C3%A9~%28x%29%2A%21%27.bin"), 1) << reqs.dump(1);
  EXPECT_EQ(Count(reqs, "GET", "?encoding-type=url&list-type=2&max-keys=1000&prefix=exp%2Fa%20b%2Bc%2F"), 1)
      << reqs.dump(1);
  EXPECT_EQ(Count(reqs, "GET",
                  "?continuation-token=tok%2F1%2B2%3D%20x&encoding-type=url&list-type=2&max-keys=1000&prefix="),
            1)
      << reqs.dump(1);
  EXPECT_EQ(Count(reqs, "DELETE", "/det-test/exp/fail?uploadId=up%2F1%2B2%3D"), 1) << reqs.dump(1);
  EXPECT_EQ(Count(reqs, "POST", "/det-test?delete="), 1);
  EXPECT_EQ(Count(reqs, "POST", "?uploads="), 2);  // exp/big and exp/fail
  EXPECT_EQ(Count(reqs, "PUT", "?partNumber=2&uploadId=up%2F1%2B2%3D"), 1) << reqs.dump(1);
  EXPECT_EQ(Count(reqs, "POST", "?uploadId=up%2F1%2B2%3D"), 1);
  ASSERT_EQ(reqs.size(), 15u);  // 10 + a second listing page + create, part, abort + the token's PUT
  bool saw_range = false, saw_token = false;
  for (const auto& r : reqs) {
    saw_range |= r["headers"].contains("Range");
    saw_token |= r["headers"].contains("x-amz-security-token");
    EXPECT_THAT(r["headers"].value("Authorization", ""), HasSubstr("SignedHeaders=")) << r.dump();
    EXPECT_THAT(r["headers"].value("Authorization", ""),
                HasSubstr(std::string("Credential=") + kAccessKey + "/"));
    EXPECT_TRUE(r["headers"].contains("x-amz-content-sha256")) << r.dump();
    const std::string body = absl::HexStringToBytes(r["body_hex"].get<std::string>());
    EXPECT_EQ(r["headers"].value("x-amz-content-sha256", ""), Sha256Hex(body));
    // S3 wants Content-MD5 on DeleteObjects; det-cpp sends it with every PUT too.
    const bool needs_md5 = r["method"] == "PUT" || absl::StrContains(r["target"].get<std::string>(), "?delete=");
    if (needs_md5) {
      EXPECT_EQ(r["headers"].value("Content-MD5", ""), absl::Base64Escape(absl::HexStringToBytes(Md5Hex(body))))
          << r.dump();
    }
    EXPECT_FALSE(absl::StrContains(r.dump(), kSecret));
  }
  EXPECT_TRUE(saw_range);
  EXPECT_TRUE(saw_token);

  nlohmann::json checked = Botocore(dir, reqs, kSecret, "eu-central-1");
  ASSERT_EQ(checked.size(), reqs.size());
  for (const auto& c : checked) {
    EXPECT_TRUE(c["match"].get<bool>()) << c.dump(1);
  }
  // The comparison can fail: another secret gives other signatures.
  nlohmann::json wrong = Botocore(dir, reqs, "not-the-secret", "eu-central-1");
  ASSERT_EQ(wrong.size(), reqs.size());
  for (const auto& c : wrong) EXPECT_FALSE(c["match"].get<bool>()) << c.dump(1);
}

TEST(S3SigV4Test, VirtualHostedRequestsGoToTheBucketsHostAndAreSigned) {
  TempDir dir;
  CapturingS3 s3;
  const std::string port = std::to_string(s3.port());
  S3Endpoint ep;
  ep.endpoint_url = "http://s3.localhost:" + port;
  ep.addressing = Addressing::kVirtual;
  ep.resolve = {"det-test.s3.localhost:" + port + ":127.0.0.1"};
  MakeEveryRequest(ep, {kAccessKey, kSecret, ""}, dir);
  nlohmann::json reqs = s3.requests();
  ASSERT_EQ(reqs.size(), 14u);
  for (const auto& r : reqs) {
    EXPECT_EQ(r["headers"].value("Host", ""), "det-test.s3.localhost:" + port) << r.dump();
    EXPECT_FALSE(absl::StrContains(r["target"].get<std::string>(), "det-test")) << r.dump();
  }
  EXPECT_EQ(Count(reqs, "PUT", "/exp/small"), 1);
  EXPECT_EQ(Count(reqs, "GET", "/?encoding-type=url&list-type=2"), 1);
  EXPECT_EQ(Count(reqs, "GET", "/?continuation-token="), 1);
  EXPECT_EQ(Count(reqs, "DELETE", "/exp/fail?uploadId="), 1);
  for (const auto& c : Botocore(dir, reqs, kSecret, "us-east-1")) {
    EXPECT_TRUE(c["match"].get<bool>()) << c.dump(1);
  }
}

}  // namespace
}  // namespace det::s3
