// det_stream_subscribers counts REST NDJSON streams too (issue 48 review,
// 12b): a follow stream over REST (POST /api/v1/MasterLogs, as the
// dashboard's live logs stream) shows as det_stream_subscribers{stream=
// "MasterLogs"} 1 while it is open, under the same RPC short name as a
// gRPC stream, and 0 once the client has gone.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/test_cluster.h"
#include "tests/test_util.h"

namespace det::testing {
namespace {

using namespace std::chrono_literals;

// The value of `series` (name and labels, exactly) in the master's
// /metrics scraped with `token`; NaN when absent or no answer.
double Scraped(int port, const std::string& token, const std::string& series) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  httplib::Result res = client.Get("/metrics", {{"Authorization", "Bearer " + token}});
  if (!res || res->status != 200) return std::nan("");
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (line.size() > series.size() && line.substr(0, series.size()) == series && line[series.size()] == ' ') {
      return std::stod(std::string(line.substr(series.size() + 1)));
    }
  }
  return std::nan("");
}

// A plain-HTTP POST of `body` to `path` on a socket of its own; returns the
// socket once the status line has come (-1 on failure), for the caller to
// close.
int OpenStream(int port, const std::string& path, const std::string& token, const std::string& body,
               std::string* head) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const std::string request = absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ",
                                           token, "\r\nContent-Type: application/json\r\nContent-Length: ",
                                           body.size(), "\r\n\r\n", body);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  char buf[4096];
  while (head->find("\r\n") == std::string::npos) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    head->append(buf, static_cast<size_t>(n));
  }
  return fd;
}

TEST(StreamSubscribers, ARestNdjsonStreamCountsWhileItIsOpen) {
  TempDir dir;
  TestCluster cluster(dir);
  const std::string admin = RestLogin(cluster.http_port(), "admin", "");
  ASSERT_FALSE(admin.empty()) << cluster.MasterLog();
  const std::string series = R"(det_stream_subscribers{stream="MasterLogs"})";
  const double before = Scraped(cluster.http_port(), admin, series);
  EXPECT_TRUE(std::isnan(before) || before == 0) << before;

  std::string head;
  const int fd = OpenStream(cluster.http_port(), "/api/v1/MasterLogs", admin, R"({"follow": true})", &head);
  ASSERT_GE(fd, 0);
  EXPECT_THAT(head, ::testing::StartsWith("HTTP/1.1 200")) << head;
  double open = 0;
  EXPECT_TRUE(PollUntil(
      [&] {
        open = Scraped(cluster.http_port(), admin, series);
        return open == 1;
      },
      30s))
      << "while the REST stream is open: " << series << " " << open;

  ::close(fd);
  double closed = 1;
  EXPECT_TRUE(PollUntil(
      [&] {
        closed = Scraped(cluster.http_port(), admin, series);
        return closed == 0;
      },
      30s))
      << "after the client has gone: " << series << " " << closed;
}

}  // namespace
}  // namespace det::testing
