// The S3 harness itself (tests/s3_harness.h): s3rver starts and boto3 reads
// back what it wrote; the fault proxy forwards keep-alive requests and cuts
// or fails exactly the chosen ones.
#include "tests/s3_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace det::test {
namespace {

using det::testing::ReadFile;
using det::testing::TempDir;
using det::testing::WriteFile;

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

struct Reply {
  int status = -1;  // -1: the connection was reset or closed
  std::string body;
};

// One HTTP/1.1 request on keep-alive connection `fd`; reads the reply.
Reply Request(int fd, const std::string& method, const std::string& target, const std::string& body,
              const std::string& host = "127.0.0.1") {
  const std::string req = absl::StrCat(method, " ", target, " HTTP/1.1\r\nHost: ", host,
                                       "\r\nContent-Length: ", body.size(), "\r\n\r\n", body);
  Reply r;
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return r;
  std::string buf;
  char tmp[4096];
  size_t end;
  while ((end = buf.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) return r;
    buf.append(tmp, static_cast<size_t>(n));
  }
  size_t length = 0;
  const size_t cl = buf.find("Content-Length: ");
  if (cl != std::string::npos && cl < end) {
    absl::SimpleAtoi(buf.substr(cl + 16, buf.find("\r\n", cl) - cl - 16), &length);
  }
  while (buf.size() < end + 4 + length) {
    const ssize_t n = recv(fd, tmp, sizeof(tmp), 0);
    if (n <= 0) return r;
    buf.append(tmp, static_cast<size_t>(n));
  }
  absl::SimpleAtoi(buf.substr(9, 3), &r.status);
  r.body = buf.substr(end + 4, length);
  return r;
}

TEST(S3HarnessTest, Boto3ReadsBackWhatItPutOnS3rver) {
  TempDir dir;
  auto server = S3Server::Start(dir.path(), {"det-test", "other-bucket"});
  ASSERT_TRUE(server.ok()) << server.status();
  S3Server& s = **server;
  EXPECT_EQ(s.secret().size(), 40u);
  WriteFile(dir / "in.bin", std::string(100000, 'x') + "end");
  auto put = RunBoto3(s, {"put", "det-test", "exp/a b/in.bin", dir / "in.bin"});
  ASSERT_TRUE(put.ok()) << put.status();
  auto list = RunBoto3(s, {"list", "det-test", "exp/"});
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 1u) << list->dump();
  EXPECT_EQ((*list)[0]["key"], "exp/a b/in.bin");
  EXPECT_EQ((*list)[0]["size"], 100003);
  EXPECT_EQ((*list)[0]["etag"], (*put)["etag"]);
  auto get = RunBoto3(s, {"get", "det-test", "exp/a b/in.bin", dir / "out.bin"});
  ASSERT_TRUE(get.ok()) << get.status();
  EXPECT_EQ((*get)["md5"], (*put)["etag"]);
  EXPECT_EQ(ReadFile(dir / "out.bin"), ReadFile(dir / "in.bin"));
  auto head = RunBoto3(s, {"head", "det-test", "exp/a b/in.bin"});
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ((*head)["size"], 100003);
  ASSERT_TRUE(RunBoto3(s, {"delete", "det-test", "exp/a b/in.bin"}).ok());
  EXPECT_EQ(RunBoto3(s, {"list", "det-test", ""})->size(), 0u);
  EXPECT_EQ(RunBoto3(s, {"list", "other-bucket", ""})->size(), 0u);
  auto missing = RunBoto3(s, {"head", "det-test", "nope"});
  EXPECT_FALSE(missing.ok());
  EXPECT_TRUE(absl::StrContains(missing.status().message(), "404")) << missing.status();
  // The secret reaches boto3 in a 0600 file, never in argv.
  struct stat st {};
  ASSERT_EQ(stat((dir / "boto3-secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(S3HarnessTest, CredentialsFileIsPrivateAndNamesTheServer) {
  TempDir dir;
  auto server = S3Server::Start(dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string path = WriteS3CredentialsFile(dir.path(), **server, "team-a", "team-a, shared");
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string text = ReadFile(path);
  EXPECT_TRUE(absl::StrContains(text, "[team-a]\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "aws_secret_access_key = " + (*server)->secret())) << text;
  EXPECT_TRUE(absl::StrContains(text, "endpoint_url = " + (*server)->endpoint_url())) << text;
  EXPECT_TRUE(absl::StrContains(text, "det_workspaces = team-a, shared\n")) << text;
}

TEST(S3HarnessTest, VirtualHostedAndTlsServers) {
  TempDir dir;
  auto vhost = S3Server::Start(dir.path(), {"det-test"}, S3ServerOptions{true, "", ""});
  ASSERT_TRUE(vhost.ok()) << vhost.status();
  const int fd = Connect((*vhost)->port());
  ASSERT_GE(fd, 0);
  Reply r = Request(fd, "GET", "/", "", absl::StrCat("det-test.s3.localhost:", (*vhost)->port()));
  close(fd);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(absl::StrContains(r.body, "<Name>det-test</Name>")) << r.body;

  TempDir tls_dir;
  ASSERT_EQ(det::testing::WriteSelfSignedCert(tls_dir.path()), "");
  auto tls = S3Server::Start(tls_dir.path(), {"det-test"},
                             S3ServerOptions{false, tls_dir / "key.pem", tls_dir / "cert.pem"});
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(absl::StartsWith((*tls)->endpoint_url(), "https://127.0.0.1:"));
  WriteFile(tls_dir / "in.txt", "over TLS");
  ASSERT_TRUE(RunBoto3(**tls, {"put", "det-test", "k", tls_dir / "in.txt"}).ok());
  auto list = RunBoto3(**tls, {"list", "det-test", ""});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 1u);
}

TEST(S3HarnessTest, FaultProxyCutsTheChosenPartOnAKeepAliveConnection) {
  TempDir dir;
  auto server = S3Server::Start(dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  auto proxy = S3FaultProxy::Start((*server)->port());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  S3FaultProxy& p = **proxy;
  p.CutUploadPart(1, 1);
  int fd = Connect(p.port());
  ASSERT_GE(fd, 0);
  // Four requests on one connection: the proxy must find their boundaries,
  // and match the part number in the request target only, exactly.
  EXPECT_EQ(Request(fd, "PUT", "/det-test/obj", std::string(3000, 'a')).status, 200);
  EXPECT_EQ(Request(fd, "PUT", "/det-test/part?partNumber=12&uploadId=u", std::string(2000, 'b')).status, 200);
  EXPECT_EQ(Request(fd, "PUT", "/det-test/part?partNumber=2&uploadId=u", "PUT /x?partNumber=1&").status, 200);
  EXPECT_EQ(Request(fd, "PUT", "/det-test/part?uploadId=u&partNumber=10", "").status, 200);
  EXPECT_EQ(p.cuts(), 0);
  EXPECT_EQ(Request(fd, "PUT", "/det-test/part?uploadId=u&partNumber=1", std::string(5000, 'c')).status, -1);
  close(fd);
  EXPECT_EQ(p.cuts(), 1);
  EXPECT_EQ(p.requests(), 5);
  // Cut once only: the retry goes through.
  fd = Connect(p.port());
  EXPECT_EQ(Request(fd, "PUT", "/det-test/part?partNumber=1&uploadId=u", "again").status, 200);
  Reply got = Request(fd, "GET", "/det-test/obj", "");
  close(fd);
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, std::string(3000, 'a'));
  EXPECT_EQ(p.cuts(), 1);
}

TEST(S3HarnessTest, FaultProxyFailsTheNextRequestsThenLetsThrough) {
  TempDir dir;
  auto server = S3Server::Start(dir.path());
  ASSERT_TRUE(server.ok()) << server.status();
  auto proxy = S3FaultProxy::Start((*server)->port());
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  S3FaultProxy& p = **proxy;
  int fd = Connect(p.port());
  EXPECT_EQ(Request(fd, "PUT", "/det-test/k", "v1").status, 200);
  p.FailNextRequests(2, 503);
  Reply r = Request(fd, "PUT", "/det-test/k", "v2");
  close(fd);  // the proxy closes a failed request's connection
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(absl::StrContains(r.body, "<Code>SlowDown</Code>")) << r.body;
  fd = Connect(p.port());
  EXPECT_EQ(Request(fd, "GET", "/det-test/k", "").status, 503);
  close(fd);
  p.FailNextRequests(1, 0);
  fd = Connect(p.port());
  EXPECT_EQ(Request(fd, "GET", "/det-test/k", "").status, -1);  // reset
  close(fd);
  EXPECT_EQ(p.failed(), 3);
  fd = Connect(p.port());
  r = Request(fd, "GET", "/det-test/k", "");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "v1");  // the failed PUT never reached the server
  p.FailNextRequests(5, 500);
  p.Reset();
  EXPECT_EQ(Request(fd, "GET", "/det-test/k", "").status, 200);
  close(fd);
}

}  // namespace
}  // namespace det::test
