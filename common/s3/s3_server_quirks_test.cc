// S3Client against the replies real S3 gives and s3rver never does, from a
// scripted loopback listener (cpp-httplib): SSE-KMS/SSE-C ETags that are not
// MD5s, a CompleteMultipartUpload retried after S3 had completed it (404
// NoSuchUpload), a 200 reply carrying an <Error>, and url-encoded listings.
#include <httplib.h>

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/s3/s3_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace det::s3 {
namespace {

using ::det::testing::TempDir;
using ::det::testing::WriteFile;
using ::testing::HasSubstr;

// A loopback listener whose every reply comes from `handler`; it records
// each request's "METHOD target".
class ScriptedS3 {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;
  explicit ScriptedS3(Handler handler) : handler_(std::move(handler)) {
    auto h = [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> l(mu_);
        log_.push_back(req.method + " " + req.target);
      }
      handler_(req, res);
    };
    server_.Get(".*", h);
    server_.Put(".*", h);
    server_.Post(".*", h);
    server_.Delete(".*", h);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~ScriptedS3() {
    server_.stop();
    thread_.join();
  }
  std::vector<std::string> log() {
    std::lock_guard<std::mutex> l(mu_);
    return log_;
  }
  int Count(const std::string& part) {
    int n = 0;
    for (const std::string& r : log()) n += absl::StrContains(r, part) ? 1 : 0;
    return n;
  }
  std::unique_ptr<S3Client> Client() {
    S3Endpoint ep;
    ep.endpoint_url = absl::StrCat("http://127.0.0.1:", port_);
    S3RetryPolicy retry;
    retry.base_backoff = std::chrono::milliseconds(1);
    retry.max_backoff = std::chrono::milliseconds(5);
    S3Limits limits;
    limits.part_size = limits.multipart_threshold = int64_t{1} << 20;
    auto c = S3Client::Create(ep, {"AKIDEXAMPLE", "secret", ""}, retry, limits);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

 private:
  Handler handler_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<std::string> log_;
};

constexpr char kRandomEtag[] = "\"0123456789abcdef0123456789abcdef\"";
constexpr int64_t kBigSize = (int64_t{1} << 20) + 100;  // two parts of 1 MiB

const char* kCreated =
    "<InitiateMultipartUploadResult><UploadId>up1</UploadId></InitiateMultipartUploadResult>";

// Answers like S3 with SSE: ETags that are not MD5s; `sse_header` (empty:
// none) names the encryption as S3 does.
ScriptedS3::Handler Encrypted(std::string sse_header, std::string sse_value) {
  return [=](const httplib::Request& req, httplib::Response& res) {
    if (!sse_header.empty()) res.set_header(sse_header, sse_value);
    if (req.method == "PUT") {
      res.set_header("ETag", kRandomEtag);
    } else if (req.has_param("uploads")) {
      res.set_content(kCreated, "application/xml");
    } else if (req.has_param("uploadId")) {
      res.set_content(absl::StrCat("<CompleteMultipartUploadResult><ETag>", "\"fedcba9876543210fedcba9876543210-2\"",
                                   "</ETag></CompleteMultipartUploadResult>"),
                      "application/xml");
    }
  };
}

TEST(S3ServerQuirksTest, AnSseKmsOrSseCETagThatIsNotTheMd5IsAcceptedOnlyWhenS3SaysSo) {
  TempDir dir;
  WriteFile(dir / "big", std::string(kBigSize, 'b'));
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"x-amz-server-side-encryption", "aws:kms"},
           {"x-amz-server-side-encryption", "aws:kms:dsse"},
           {"x-amz-server-side-encryption-customer-algorithm", "AES256"}}) {
    ScriptedS3 s3(Encrypted(name, value));
    auto c = s3.Client();
    ASSERT_NE(c, nullptr);
    auto put = c->PutObject("det-test", "k/small", "payload");
    ASSERT_TRUE(put.ok()) << name << ": " << put.status();
    EXPECT_EQ(put->etag, "0123456789abcdef0123456789abcdef");
    EXPECT_EQ(put->md5, Md5Hex("payload"));  // what was sent (S3 checked Content-MD5)
    auto multi = c->PutObjectFromFile("det-test", "k/big", dir / "big");
    ASSERT_TRUE(multi.ok()) << name << ": " << multi.status();
    EXPECT_EQ(multi->md5, Md5Hex(std::string(kBigSize, 'b')));
  }
  // Without S3 saying so (or with SSE-S3, AES256, whose ETags are MD5s) a
  // non-MD5 ETag is the clear error it always was.
  for (const std::string& sse : {std::string(), std::string("AES256")}) {
    ScriptedS3 s3(Encrypted(sse.empty() ? "" : "x-amz-server-side-encryption", sse));
    auto c = s3.Client();
    ASSERT_NE(c, nullptr);
    auto put = c->PutObject("det-test", "k/small", "payload");
    EXPECT_EQ(put.status().code(), absl::StatusCode::kDataLoss) << put.status();
    EXPECT_THAT(std::string(put.status().message()), HasSubstr("is not the MD5 of the bytes sent"));
    auto multi = c->PutObjectFromFile("det-test", "k/big", dir / "big");
    EXPECT_EQ(multi.status().code(), absl::StatusCode::kDataLoss) << multi.status();
    EXPECT_EQ(s3.Count("DELETE /det-test/k/big?uploadId=up1"), 1);  // aborted
  }
}

// A multipart upload whose first CompleteMultipartUpload S3 carries out but
// whose reply is lost (here: a 500 after completing); the retry gets 404
// NoSuchUpload. `head_size` is what a HEAD then reports.
ScriptedS3::Handler CompletedThenLost(int64_t head_size, std::mutex* mu, std::vector<std::string>* parts) {
  return [=](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> l(*mu);
    if (req.method == "PUT") {
      parts->push_back(Md5Hex(req.body));
      res.set_header("ETag", "\"" + parts->back() + "\"");
    } else if (req.has_param("uploads")) {
      res.set_content(kCreated, "application/xml");
    } else if (req.method == "POST" && req.has_param("uploadId")) {
      if (parts->size() == 2) {  // the first Complete: done, but the reply is lost
        parts->push_back("completed");
        res.status = 500;
        return;
      }
      res.status = 404;
      res.set_content("<Error><Code>NoSuchUpload</Code><Message>gone</Message></Error>", "application/xml");
    } else if (req.method == "HEAD" || req.method == "GET") {
      res.set_header("ETag", "\"" + MultipartEtag({(*parts)[0], (*parts)[1]}) + "\"");
      res.set_content(std::string(head_size, 'b'), "application/octet-stream");
    }
  };
}

TEST(S3ServerQuirksTest, ARetriedCompleteAnsweredNoSuchUploadIsAcceptedWhenHeadShowsTheObject) {
  TempDir dir;
  WriteFile(dir / "big", std::string(kBigSize, 'b'));
  {
    std::mutex mu;
    std::vector<std::string> parts;
    ScriptedS3 s3(CompletedThenLost(kBigSize, &mu, &parts));
    auto put = s3.Client()->PutObjectFromFile("det-test", "k/big", dir / "big");
    ASSERT_TRUE(put.ok()) << put.status();
    EXPECT_EQ(s3.Count("POST /det-test/k/big?uploadId=up1"), 2);
    EXPECT_EQ(s3.Count("HEAD /det-test/k/big"), 1);
  }
  {  // HEAD shows another object (other size): the 404 stands.
    std::mutex mu;
    std::vector<std::string> parts;
    ScriptedS3 s3(CompletedThenLost(kBigSize - 1, &mu, &parts));
    auto put = s3.Client()->PutObjectFromFile("det-test", "k/big", dir / "big");
    EXPECT_EQ(put.status().code(), absl::StatusCode::kNotFound) << put.status();
    EXPECT_THAT(std::string(put.status().message()), HasSubstr("NoSuchUpload"));
  }
}

TEST(S3ServerQuirksTest, A200ReplyCarryingARetryableErrorIsRetried) {
  TempDir dir;
  WriteFile(dir / "big", std::string(kBigSize, 'b'));
  for (std::string code : {"InternalError", "SlowDown", "AccessDenied"}) {
    std::mutex mu;
    std::vector<std::string> parts;
    int completes = 0;
    ScriptedS3 s3([&](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> l(mu);
      if (req.method == "PUT") {
        parts.push_back(Md5Hex(req.body));
        res.set_header("ETag", "\"" + parts.back() + "\"");
      } else if (req.has_param("uploads")) {
        res.set_content(kCreated, "application/xml");
      } else if (req.method == "POST" && req.has_param("uploadId") && ++completes == 1) {
        res.set_content(absl::StrCat("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>", code,
                                     "</Code><Message>try again</Message></Error>"),
                        "application/xml");
      } else if (req.method == "POST" && req.has_param("uploadId")) {
        res.set_content(absl::StrCat("<CompleteMultipartUploadResult><ETag>\"", MultipartEtag(parts),
                                     "\"</ETag></CompleteMultipartUploadResult>"),
                        "application/xml");
      }
    });
    auto put = s3.Client()->PutObjectFromFile("det-test", "k/big", dir / "big");
    if (code == "AccessDenied") {  // not a transient error: not retried
      EXPECT_FALSE(put.ok());
      EXPECT_THAT(std::string(put.status().message()), HasSubstr("AccessDenied"));
      EXPECT_EQ(s3.Count("POST /det-test/k/big?uploadId=up1"), 1);
    } else {
      ASSERT_TRUE(put.ok()) << code << ": " << put.status();
      EXPECT_EQ(s3.Count("POST /det-test/k/big?uploadId=up1"), 2) << code;
    }
  }
}

TEST(S3ServerQuirksTest, ListingsAskForUrlEncodingAndDecodeTheKeys) {
  std::string body =
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
      "<Contents><Key>exp/a%0Bb+c%2Bd%25</Key><Size>1</Size><ETag>\"x\"</ETag></Contents></ListBucketResult>";
  ScriptedS3 s3([&](const httplib::Request&, httplib::Response& res) { res.set_content(body, "application/xml"); });
  auto list = s3.Client()->ListObjects("det-test", "exp/");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].key, "exp/a\vb c+d%");  // U+000B, which XML 1.0 cannot carry raw
  EXPECT_EQ(s3.Count("GET /det-test?encoding-type=url&list-type=2"), 1);

  body = "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
         "<Contents><Key>exp/a%zz</Key><Size>1</Size></Contents></ListBucketResult>";
  auto bad = s3.Client()->ListObjects("det-test", "exp/");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("malformed %XX escape"));

  // A server that ignores encoding-type (s3rver) sends keys raw, without
  // <EncodingType>: they are taken as they are.
  body = "<ListBucketResult><IsTruncated>false</IsTruncated>"
         "<Contents><Key>exp/a+b%2B</Key><Size>1</Size></Contents></ListBucketResult>";
  list = s3.Client()->ListObjects("det-test", "exp/");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ((*list)[0].key, "exp/a+b%2B");
}

}  // namespace
}  // namespace det::s3
