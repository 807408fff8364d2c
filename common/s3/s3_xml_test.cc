// Bounds: the XML parser's limits (unit tests), PlanParts and key length,
// and hostile S3 endpoints (a cpp-httplib server on loopback) answering
// ListObjectsV2 with a huge body, deep nesting, malformed XML, a DOCTYPE
// with entity expansion, or a listing that never ends.
#include "common/s3/s3_xml.h"

#include <unistd.h>

#include <httplib.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint_storage_config.h"
#include "common/s3/s3_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace det::s3 {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(S3XmlTest, ParsesS3sReplies) {
  auto page = ParseListObjectsV2(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/"
      "2006-03-01/\"><IsTruncated>true</IsTruncated><NextContinuationToken>t/1=</NextContinuationToken>"
      "<Contents><Key>a&amp;b</Key><Size>12</Size><ETag>&quot;abc&quot;</ETag></Contents>"
      "<Contents><Key>c</Key><Size>0</Size><ETag>\"d-2\"</ETag></Contents></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_TRUE(page->truncated);
  EXPECT_EQ(page->next_token, "t/1=");
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "a&b");
  EXPECT_EQ(page->objects[0].size, 12);
  EXPECT_EQ(page->objects[0].etag, "abc");
  EXPECT_EQ(page->objects[1].etag, "d-2");

  EXPECT_EQ(*ParseUploadId("<InitiateMultipartUploadResult><UploadId>u1</UploadId>"
                           "</InitiateMultipartUploadResult>"),
            "u1");
  EXPECT_EQ(*ParseCompleteMultipart("<CompleteMultipartUploadResult><ETag>\"e-3\"</ETag>"
                                    "</CompleteMultipartUploadResult>"),
            "e-3");
  // S3 may answer CompleteMultipartUpload 200 with an error document.
  auto err = ParseCompleteMultipart("<Error><Code>InternalError</Code><Message>retry</Message></Error>");
  EXPECT_EQ(err.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(Message(err.status()), HasSubstr("InternalError"));
  S3ErrorInfo info = ParseS3Error("<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>");
  EXPECT_EQ(info.code, "NoSuchKey");
  EXPECT_EQ(info.message, "gone");
  EXPECT_EQ(ParseS3Error("not xml").code, "");
  auto del = ParseDeleteResult("<DeleteResult><Deleted><Key>x</Key></Deleted><Error><Key>y</Key>"
                               "<Code>AccessDenied</Code><Message>no</Message></Error></DeleteResult>");
  ASSERT_TRUE(del.ok());
  ASSERT_EQ(del->size(), 1u);
  EXPECT_EQ((*del)[0].key, "y");
  EXPECT_EQ((*del)[0].code, "AccessDenied");
}

TEST(S3XmlTest, RequestBodiesEscapeKeys) {
  std::string xml = DeleteObjectsXml({"a<b>&\"c'", "d"});
  auto doc = ParseXml(xml);
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->ChildText("Quiet"), "true");
  ASSERT_EQ(doc->children.size(), 3u);
  EXPECT_EQ(doc->children[1].ChildText("Key"), "a<b>&\"c'");
  auto done = ParseXml(CompleteMultipartXml({"m1", "m2"}));
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done->children[1].ChildText("PartNumber"), "2");
  EXPECT_EQ(done->children[1].ChildText("ETag"), "\"m2\"");
}

TEST(S3XmlTest, EveryBoundIsEnforcedWithAClearError) {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "<a>";
  auto s = ParseXml(deep);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(s.status()), HasSubstr("nested deeper than 32"));

  XmlLimits few;
  few.max_elements = 10;
  std::string many = "<r>";
  for (int i = 0; i < 20; ++i) many += "<x/>";
  many += "</r>";
  EXPECT_THAT(Message(ParseXml(many, few).status()), HasSubstr("more than 10 elements"));
  EXPECT_TRUE(ParseXml(many).ok());

  std::string long_text = "<r>" + std::string(70000, 'x') + "</r>";
  EXPECT_THAT(Message(ParseXml(long_text).status()), HasSubstr("a text longer than 65536 bytes"));

  EXPECT_THAT(Message(ParseXml("<r><a></r>").status()), HasSubstr("malformed XML at line 1"));
  EXPECT_THAT(Message(ParseXml("").status()), HasSubstr("malformed XML"));
  const std::string laughs =
      "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;&lol;&lol;\">"
      "<!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;\">]><ListBucketResult><Key>&lol3;</Key></ListBucketResult>";
  EXPECT_THAT(Message(ParseXml(laughs).status()), HasSubstr("DOCTYPE"));
  EXPECT_THAT(Message(ParseXml("<!DOCTYPE r SYSTEM \"file:///etc/passwd\"><r/>").status()), HasSubstr("DOCTYPE"));
}

TEST(S3BoundsTest, PlanPartsGrowsThePartSizeToStayUnder10000PartsAndRefusesOver5TiB) {
  S3Limits limits;  // 8 MiB parts
  auto small = PlanParts(int64_t{20} << 20, limits);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->part_size, int64_t{8} << 20);
  EXPECT_EQ(small->parts, 3);
  // 100 GiB at 8 MiB would be 12,800 parts: the part size grows.
  auto big = PlanParts(int64_t{100} << 30, limits);
  ASSERT_TRUE(big.ok());
  EXPECT_LE(big->parts, 10000);
  EXPECT_EQ(big->part_size % (1 << 20), 0);
  EXPECT_GE(big->part_size * big->parts, int64_t{100} << 30);
  auto max = PlanParts(int64_t{5} << 40, limits);
  ASSERT_TRUE(max.ok());
  EXPECT_LE(max->parts, 10000);
  auto over = PlanParts((int64_t{5} << 40) + 1, limits);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(over.status()), HasSubstr("max_object_bytes"));
  EXPECT_EQ(PlanParts(0, limits)->parts, 1);

  EXPECT_EQ(MultipartEtag({Md5Hex("a"), Md5Hex("b")}),
            Md5Hex(absl::HexStringToBytes(Md5Hex("a") + Md5Hex("b"))) + "-2");
}

TEST(S3BoundsTest, KeysOver1024BytesAndBadNamesAreRefusedBeforeAnyRequest) {
  S3Endpoint ep;
  ep.endpoint_url = "http://127.0.0.1:9";  // nothing is sent
  auto c = S3Client::Create(ep, {"a", "b", ""});
  ASSERT_TRUE(c.ok()) << c.status();
  auto r = (*c)->PutObject("det-test", std::string(1025, 'k'), "x");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(r.status()), HasSubstr("1025 bytes; S3 allows at most 1024"));
  EXPECT_EQ((*c)->HeadObject("Bad_Bucket", "k").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*c)->DeleteObjects("det-test", {"ok", std::string(2000, 'k')}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*c)->requests_sent(), 0);

  for (const char* bad : {"ftp://h", "http://h/path", "http://user:pw@h", "h:9000", "http://"}) {
    S3Endpoint e;
    e.endpoint_url = bad;
    auto refused = S3Client::Create(e, {"a", "b", ""});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(Message(refused.status()), HasSubstr("endpoint_url")) << bad;
  }
  EXPECT_EQ(S3Client::Create(ep, {"", "b", ""}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(S3Client::Create(ep, {"a", "", ""}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(S3Client::Create(ep, {"a", "b", "tok\r\nX-Injected: 1"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidBucketName("det-test.1"));
  // The client and the config agree (one validator): "..", ".-", "-." and
  // IP-shaped names are refused by both.
  for (const char* bad : {"ab", "-ab", "ab-", "AB", "a_b", "", "a..b", "a.-b", "a-.b", "10.0.0.1"}) {
    EXPECT_FALSE(ValidBucketName(bad)) << bad;
    EXPECT_FALSE(ValidS3BucketName(bad)) << bad;
  }
}

// A loopback endpoint that answers every ListObjectsV2 with `body`, or with
// a 100 MB stream of XML produced chunk by chunk, or with pages that never end.
class HostileS3 {
 public:
  enum class Mode { kBody, kHuge, kEndless };
  HostileS3(Mode mode, std::string body = "") : mode_(mode), body_(std::move(body)) {
    server_.Get(".*", [this](const httplib::Request&, httplib::Response& res) {
      ++requests_;
      if (mode_ == Mode::kBody) return res.set_content(body_, "application/xml");
      if (mode_ == Mode::kEndless) {
        std::string page = "<ListBucketResult><IsTruncated>true</IsTruncated><NextContinuationToken>more"
                           "</NextContinuationToken>";
        for (int i = 0; i < 10; ++i) {
          absl::StrAppend(&page, "<Contents><Key>k", requests_.load(), "-", i, "</Key><Size>1</Size></Contents>");
        }
        return res.set_content(page + "</ListBucketResult>", "application/xml");
      }
      res.set_content_provider(int64_t{100} << 20, "application/xml",
                               [](size_t offset, size_t length, httplib::DataSink& sink) {
                                 static const std::string chunk(64 << 10, ' ');
                                 if (offset == 0) return sink.write("<ListBucketResult>", 18);
                                 return sink.write(chunk.data(), std::min(length, chunk.size()));
                               });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~HostileS3() {
    server_.stop();
    thread_.join();
  }
  absl::StatusOr<std::vector<ObjectInfo>> List(S3Limits limits = {}) {
    S3Endpoint ep;
    ep.endpoint_url = "http://127.0.0.1:" + std::to_string(port_);
    auto c = S3Client::Create(ep, {"a", "b", ""}, {}, limits);
    if (!c.ok()) return c.status();
    return (*c)->ListObjects("det-test", "p/");
  }
  int requests() const { return requests_.load(); }

 private:
  Mode mode_;
  std::string body_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<int> requests_{0};
};

TEST(S3HostileEndpointTest, AHundredMegabyteReplyStopsAtTheCapWithoutGrowingMemory) {
  const int64_t peak_before = ::det::testing::PeakRssMiB(getpid());
  ASSERT_GT(peak_before, 0);
  HostileS3 s3(HostileS3::Mode::kHuge);
  auto r = s3.List();  // max_reply_bytes: 4 MiB
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_THAT(Message(r.status()), HasSubstr("reply larger than 4194304 bytes"));
  EXPECT_EQ(s3.requests(), 1);  // not retried
  const int64_t peak_after = ::det::testing::PeakRssMiB(getpid());
  EXPECT_LE(peak_after - peak_before, 2 * 4 + 4) << "peak RSS grew from " << peak_before << " to " << peak_after
                                                 << " MiB";
}

TEST(S3HostileEndpointTest, DeepMalformedOrEntityLadenXmlIsAClearError) {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "<a>";
  HostileS3 nested(HostileS3::Mode::kBody, deep);
  EXPECT_THAT(Message(nested.List().status()), HasSubstr("nested deeper than 32"));

  HostileS3 malformed(HostileS3::Mode::kBody, "<ListBucketResult><Contents><Key>x</Contents>");
  EXPECT_THAT(Message(malformed.List().status()), HasSubstr("malformed XML"));

  HostileS3 entities(HostileS3::Mode::kBody,
                     "<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;"
                     "&a;&a;&a;&a;&a;\"><!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\">]>"
                     "<ListBucketResult><Contents><Key>&c;</Key><Size>1</Size></Contents></ListBucketResult>");
  EXPECT_THAT(Message(entities.List().status()), HasSubstr("DOCTYPE"));

  HostileS3 wrong_root(HostileS3::Mode::kBody, "<Other/>");
  EXPECT_THAT(Message(wrong_root.List().status()), HasSubstr("expected <ListBucketResult>"));
}

TEST(S3HostileEndpointTest, AListingThatNeverEndsStopsAtMaxListKeys) {
  HostileS3 s3(HostileS3::Mode::kEndless);
  S3Limits limits;
  limits.max_list_keys = 55;
  auto r = s3.List(limits);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_THAT(Message(r.status()), HasSubstr("more than 55 keys (S3Limits::max_list_keys)"));
  EXPECT_EQ(s3.requests(), 6);
}

// An object whose first GET is cut after half its bytes: the client retries
// from the first byte it has not passed on (a ranged GET) and the file is
// whole; a range reply that is not 206 is refused.
TEST(S3HostileEndpointTest, AGetCutMidBodyResumesFromTheFirstByteNotYetPassedOn) {
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 11));
  std::atomic<int> gets{0};
  std::vector<std::string> ranges;
  std::mutex mu;
  httplib::Server server;
  server.Get(".*", [&](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> l(mu);
      ranges.push_back(req.get_header_value("Range"));
    }
    if (++gets == 1) {
      res.set_content_provider(data.size(), "application/octet-stream",
                               [&](size_t offset, size_t, httplib::DataSink& sink) {
                                 if (offset >= data.size() / 2) return false;  // cut
                                 return sink.write(data.data() + offset, data.size() / 2);
                               });
      return;
    }
    res.set_content(data, "application/octet-stream");  // httplib answers the Range (206)
  });
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread t([&] { server.listen_after_bind(); });
  ::det::testing::TempDir dir;
  S3Endpoint ep;
  ep.endpoint_url = "http://127.0.0.1:" + std::to_string(port);
  S3RetryPolicy retry;
  retry.base_backoff = retry.max_backoff = std::chrono::milliseconds(1);
  auto c = S3Client::Create(ep, {"a", "b", ""}, retry);
  ASSERT_TRUE(c.ok());
  auto s = (*c)->GetObjectToFile("det-test", "k", dir / "out", data.size(), Md5Hex(data));
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(::det::testing::ReadFile(dir / "out"), data);
  c->reset();  // closes its keep-alive connection, so the server stops at once
  server.stop();
  t.join();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0], "");
  EXPECT_EQ(ranges[1], "bytes=" + std::to_string(data.size() / 2) + "-");
}

}  // namespace
}  // namespace det::s3
