// RestListener: head deadline, per-address and total limits, keep-alive and
// pipelining, the head cap, slow clients holding no worker, Stop with a
// stream open.
#include "master/http/rest_listener.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

// Debian's libcpp-httplib is built with OpenSSL: its SSLClient is there.
#define CPPHTTPLIB_OPENSSL_SUPPORT
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace det::master {
namespace {

using Clock = std::chrono::steady_clock;

// httplib's parser and routes behind the listener, as RestServer does.
class TestServer : public httplib::Server {
 public:
  TestServer() {
    Get("/hi", [](const httplib::Request&, httplib::Response& res) { res.set_content("hi", "text/plain"); });
    Post("/echo", [](const httplib::Request& req, httplib::Response& res) { res.set_content(req.body, "text/plain"); });
    Get("/stream", [this](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [this](size_t, httplib::DataSink& sink) {
        streaming = true;
        while (sink.is_writable()) {
          if (!sink.write("x\n", 2)) return false;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a paced stream, not a wait
        }
        return false;
      });
    });
  }
  bool Serve(httplib::Stream& s, bool close, bool& closed) {
    svr_sock_ = 0;  // as RestServer::Server does: httplib ends chunked responses while it is invalid
    return process_request(s, close, closed, nullptr);
  }
  std::atomic<bool> streaming{false};
};

struct Listening {
  explicit Listening(RestListenerOptions o)
      : listener(o, [this](httplib::Stream& s, bool c, bool& closed) { return server.Serve(s, c, closed); }) {
    auto bound = listener.Bind("127.0.0.1", 0);
    EXPECT_TRUE(bound.ok()) << bound.status();
    port = bound.value_or(0);
    listener.Start();
  }
  TestServer server;
  RestListener listener;
  int port = 0;
};

// A connected socket from `source` (a loopback address), or -1.
int Connect(int port, const char* source = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &a.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return ::close(fd), -1;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return ::close(fd), -1;
  return fd;
}

void Send(int fd, const std::string& s) { ASSERT_EQ(::send(fd, s.data(), s.size(), MSG_NOSIGNAL), (ssize_t)s.size()); }

// Reads until `fd` is closed by the peer (true) or `timeout` passes (false).
bool ReadUntilClosed(int fd, std::string* out, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (::poll(&p, 1, std::max(left, 1)) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;
    out->append(buf, static_cast<size_t>(n));
  }
  return false;
}

// Reads until `out` holds `n` occurrences of `needle` or `timeout` passes.
bool ReadCount(int fd, std::string* out, const std::string& needle, int n, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto count = [&] {
    int c = 0;
    for (size_t at = out->find(needle); at != std::string::npos; at = out->find(needle, at + 1)) ++c;
    return c;
  };
  while (count() < n && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    ssize_t n_read = ::recv(fd, buf, sizeof(buf), 0);
    if (n_read <= 0) break;
    out->append(buf, static_cast<size_t>(n_read));
  }
  return count() >= n;
}

bool WaitOpen(const RestListener& l, int n) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (l.open_connections() != n) {
    if (Clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Starts a request with a 1 MiB body (read by a worker) and waits for the
// worker's 100 Continue: the connection then holds a worker until the body
// deadline.
void HoldAWorker(int fd) {
  Send(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1048576\r\n\r\n");
  std::string got;
  EXPECT_TRUE(ReadCount(fd, &got, "HTTP/1.1 100 Continue\r\n\r\n", 1, std::chrono::seconds(5))) << got;
}

// What TrickleUntilClosed saw: whether the listener closed the connection,
// after how long, and what it sent.
struct Trickled {
  bool closed = false;
  double seconds = 0;
  std::string got;
};

// Sends chunk(i) on `fd` every 50 ms, at most `sends` times, until the
// listener closes it; then waits up to 2 s more for the close.
Trickled TrickleUntilClosed(int fd, int sends, const std::function<std::string(int)>& chunk) {
  const auto start = Clock::now();
  Trickled t;
  for (int i = 0; i < sends && !t.closed; ++i) {
    const std::string c = chunk(i);
    if (::send(fd, c.data(), c.size(), MSG_NOSIGNAL) < 0) break;
    t.closed = ReadUntilClosed(fd, &t.got, std::chrono::milliseconds(50));
  }
  if (!t.closed) t.closed = ReadUntilClosed(fd, &t.got, std::chrono::seconds(2));
  t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return t;
}

TEST(RestListenerTest, HeadDeadlineClosesATricklingConnection) {
  RestListenerOptions o;
  o.header_timeout_s = 0.5;
  Listening l(o);
  int fd = Connect(l.port);
  ASSERT_GE(fd, 0);
  // One header byte every 50 ms: each arrives well within any per-read
  // timeout, but the head is never done before the deadline.
  const Trickled t = TrickleUntilClosed(fd, 60, [](int i) { return i == 0 ? "GET /hi HTTP/1.1\r\nX-Slow: " : "a"; });
  EXPECT_TRUE(t.closed) << "the trickling connection is still open after " << t.seconds << " s";
  EXPECT_LT(t.seconds, 2.0);
  EXPECT_EQ(t.got, "");  // no answer to pace a client by
  ::close(fd);
  EXPECT_TRUE(WaitOpen(l.listener, 0));
}

TEST(RestListenerTest, PerAddressLimitAnswers503NamingTheFlag) {
  RestListenerOptions o;
  o.max_connections_per_address = 2;
  Listening l(o);
  int a = Connect(l.port, "127.0.0.2"), b = Connect(l.port, "127.0.0.2");
  ASSERT_TRUE(WaitOpen(l.listener, 2));
  int c = Connect(l.port, "127.0.0.2");
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(c, &got, std::chrono::seconds(5)));
  EXPECT_NE(got.find("HTTP/1.1 503"), std::string::npos) << got;
  EXPECT_NE(got.find("--rest-max-connections-per-address 2"), std::string::npos) << got;
  // Another address is still served.
  int d = Connect(l.port, "127.0.0.3");
  Send(d, "GET /hi HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  got.clear();
  EXPECT_TRUE(ReadUntilClosed(d, &got, std::chrono::seconds(5)));
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got;
  for (int fd : {a, b, c, d}) ::close(fd);
}

TEST(RestListenerTest, TotalLimitAnswers503NamingTheFlagWhenEveryConnectionRunsARequest) {
  RestListenerOptions o;
  o.max_connections = 2;
  o.max_connections_per_address = 2;
  Listening l(o);
  // Two requests whose bodies never come hold their connections in workers
  // (the worker's 100 Continue says so).
  int a = Connect(l.port, "127.0.0.2"), b = Connect(l.port, "127.0.0.3");
  for (int fd : {a, b}) HoldAWorker(fd);
  int c = Connect(l.port, "127.0.0.4");
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(c, &got, std::chrono::seconds(5)));
  EXPECT_NE(got.find("HTTP/1.1 503"), std::string::npos) << got;
  EXPECT_NE(got.find("(--rest-max-connections 2)"), std::string::npos) << got;
  for (int fd : {a, b, c}) ::close(fd);
}

TEST(RestListenerTest, KeepAliveServesPipelinedRequestsThenClosesWhenIdle) {
  RestListenerOptions o;
  o.keep_alive_timeout_s = 0.3;
  Listening l(o);
  int fd = Connect(l.port);
  // Two requests (one with a body) in one write, then a third after the
  // first two were answered.
  Send(fd,
       "GET /hi HTTP/1.1\r\nHost: x\r\n\r\n"
       "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  std::string got;
  ASSERT_TRUE(ReadCount(fd, &got, "hello", 1, std::chrono::seconds(5))) << got;
  EXPECT_EQ(got.find("HTTP/1.1 200"), 0u) << got;
  EXPECT_NE(got.find("HTTP/1.1 200", 1), std::string::npos) << got;
  Send(fd, "GET /hi HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(ReadCount(fd, &got, "HTTP/1.1 200", 3, std::chrono::seconds(5))) << got;
  ASSERT_TRUE(ReadCount(fd, &got, "\r\n\r\nhi", 2, std::chrono::seconds(5))) << got;
  const auto idle_since = Clock::now();
  EXPECT_TRUE(ReadUntilClosed(fd, &got, std::chrono::seconds(5)));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - idle_since).count(), 3.0);
  ::close(fd);
}

TEST(RestListenerTest, ASlowLargeBodyMeetsItsDeadline) {
  RestListenerOptions o;
  o.header_timeout_s = 0.5;
  o.min_body_bytes_per_s = 1 << 20;  // 1 MiB: a 1 MiB body has 0.5 + 1 s
  Listening l(o);
  int fd = Connect(l.port);
  Send(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n");
  // 1 KiB every 50 ms: 20 KiB/s, far below the rate the deadline allows.
  const Trickled t = TrickleUntilClosed(fd, 100, [](int) { return std::string(1024, 'a'); });
  EXPECT_TRUE(t.closed) << "the slow body is still being read after " << t.seconds << " s";
  EXPECT_LT(t.seconds, 4.0);
  ::close(fd);
  EXPECT_TRUE(WaitOpen(l.listener, 0));
}

TEST(RestListenerTest, OversizedHeadGets431) {
  RestListenerOptions o;
  o.max_head_bytes = 4096;
  Listening l(o);
  int fd = Connect(l.port);
  Send(fd, "GET /hi HTTP/1.1\r\nX-Big: " + std::string(8192, 'a'));
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(fd, &got, std::chrono::seconds(5)));
  EXPECT_NE(got.find("HTTP/1.1 431"), std::string::npos) << got;
  EXPECT_NE(got.find("request head over 4096 bytes"), std::string::npos) << got;
  ::close(fd);
}

TEST(RestListenerTest, SlowClientsHoldNoWorker) {
  RestListenerOptions o;
  o.max_workers = 1;
  o.max_connections_per_address = 64;
  Listening l(o);
  std::vector<int> slow;
  for (int i = 0; i < 32; ++i) {
    slow.push_back(Connect(l.port));
    Send(slow.back(), "GET /hi HTTP/1.1\r\nX-Slow: a");  // a head never finished
  }
  ASSERT_TRUE(WaitOpen(l.listener, 32));
  httplib::Client client("127.0.0.1", l.port);
  client.set_read_timeout(std::chrono::seconds(5));
  for (int i = 0; i < 5; ++i) {
    auto res = client.Get("/hi");
    ASSERT_TRUE(res) << "request " << i << " unanswered with 32 slow connections and 1 worker";
    EXPECT_EQ(res->body, "hi");
  }
  for (int fd : slow) ::close(fd);
}

TEST(RestListenerTest, StopEndsAnOpenStreamPromptly) {
  auto l = std::make_unique<Listening>(RestListenerOptions{});
  int fd = Connect(l->port);
  Send(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got;
  ASSERT_TRUE(ReadCount(fd, &got, "x\n", 1, std::chrono::seconds(5))) << got;
  const auto start = Clock::now();
  l->listener.Stop();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 2.0) << "Stop waited for a stream whose client is still there";
  ::close(fd);
}

TEST(RestListenerTest, TlsServesRequestsAndAStalledHandshakeMeetsTheHeadDeadline) {
  det::testing::TempDir dir;
  const std::string why = det::testing::WriteSelfSignedCert(dir.path());
  ASSERT_EQ(why, "") << "the TLS test needs /usr/bin/openssl (installed by deploy/install-deps.sh)";
  RestListenerOptions o;
  o.header_timeout_s = 0.5;
  o.tls_cert_file = dir / "cert.pem";
  o.tls_key_file = dir / "key.pem";
  Listening l(o);
  httplib::SSLClient client("127.0.0.1", l.port);
  client.set_ca_cert_path((dir / "cert.pem").c_str());
  client.set_read_timeout(std::chrono::seconds(5));
  for (int i = 0; i < 3; ++i) {  // a kept-alive TLS connection, back to the loop between requests
    auto res = client.Get("/hi");
    ASSERT_TRUE(res) << httplib::to_string(res.error());
    EXPECT_EQ(res->body, "hi");
  }
  // A client that connects and sends half a ClientHello holds no worker and
  // is closed at the head deadline.
  int fd = Connect(l.port);
  Send(fd, std::string("\x16\x03\x01\x02\x00", 5));
  const auto start = Clock::now();
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(fd, &got, std::chrono::seconds(5)));
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
  ::close(fd);
  const std::string bad(RestListener::CheckTls(dir / "cert.pem", dir / "missing.pem").message());
  EXPECT_NE(bad.find("--tls-key " + (dir / "missing.pem")), std::string::npos) << bad;
  EXPECT_NE(bad.find("cannot load them for HTTPS"), std::string::npos) << bad;
}

TEST(RestListenerTest, ExpectBodiesUpToTheBufferedLimitHoldNoWorker) {
  RestListenerOptions o;
  o.max_workers = 1;
  o.max_connections_per_address = 64;
  Listening l(o);
  // Clients that announce a 64 KiB body with Expect (100-continue or not)
  // and send nothing: the loop answers 100 Continue itself and waits.
  std::vector<int> silent;
  for (const char* expect : {"100-continue", "x", "100-Continue", "100-continue"}) {
    silent.push_back(Connect(l.port));
    Send(silent.back(), std::string("POST /echo HTTP/1.1\r\nHost: x\r\nExpect: ") + expect +
                            "\r\nContent-Length: 65536\r\n\r\n");
  }
  std::string continued;
  EXPECT_TRUE(ReadCount(silent[0], &continued, "HTTP/1.1 100 Continue\r\n\r\n", 1, std::chrono::seconds(5)));
  httplib::Client client("127.0.0.1", l.port);
  client.set_read_timeout(std::chrono::seconds(5));
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    auto res = client.Get("/hi");
    ASSERT_TRUE(res) << "request " << i << " unanswered while 4 Expect bodies are pending and 1 worker";
    EXPECT_EQ(res->body, "hi");
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
  }
  // A client that sends its body after the 100 Continue gets one 100 and
  // its answer.
  Send(silent[0], std::string(65536, 'b'));
  std::string got = continued;
  ASSERT_TRUE(ReadCount(silent[0], &got, std::string(100, 'b'), 1, std::chrono::seconds(5))) << got.substr(0, 300);
  EXPECT_EQ(got.find("HTTP/1.1 100"), got.rfind("HTTP/1.1 100")) << "a second 100 Continue: " << got.substr(0, 300);
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got.substr(0, 300);
  for (int fd : silent) ::close(fd);
}

TEST(RestListenerTest, OneAddressHoldsAQuarterOfTheWorkersWithLargeBodies) {
  RestListenerOptions o;
  o.max_workers = 8;  // 2 per address
  Listening l(o);
  int a = Connect(l.port, "127.0.0.2"), b = Connect(l.port, "127.0.0.2");
  for (int fd : {a, b}) HoldAWorker(fd);
  int c = Connect(l.port, "127.0.0.2");
  Send(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n");
  std::string got;
  EXPECT_TRUE(ReadUntilClosed(c, &got, std::chrono::seconds(5)));
  EXPECT_NE(got.find("HTTP/1.1 503"), std::string::npos) << got;
  EXPECT_NE(got.find("127.0.0.2 has 2 requests with a large body running"), std::string::npos) << got;
  // Another address may still send one.
  int d = Connect(l.port, "127.0.0.3");
  Send(d, "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 70000\r\n\r\n" +
              std::string(70000, 'd'));
  got.clear();
  EXPECT_TRUE(ReadUntilClosed(d, &got, std::chrono::seconds(5)));
  EXPECT_NE(got.find("HTTP/1.1 200"), std::string::npos) << got.substr(0, 300);
  for (int fd : {a, b, c, d}) ::close(fd);
}

TEST(RestListenerTest, AtTheGlobalCapANewcomerClosesTheOldestHeadOfTheBusiestAddress) {
  RestListenerOptions o;
  o.max_connections = 6;
  o.max_connections_per_address = 4;
  Listening l(o);
  // The cap filled with idle heads: 4 from 127.0.0.2 (the oldest first),
  // 2 from 127.0.0.3.
  std::vector<int> idle;
  for (const char* source : {"127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"}) {
    idle.push_back(Connect(l.port, source));
    Send(idle.back(), "GET /hi HTTP/1.1\r\nX-Slow: a");
    ASSERT_TRUE(WaitOpen(l.listener, static_cast<int>(idle.size())));
  }
  std::vector<int> newcomers;  // kept open (keep-alive), so the cap stays full
  for (int i = 0; i < 3; ++i) {
    newcomers.push_back(Connect(l.port, "127.0.0.4"));
    Send(newcomers.back(), "GET /hi HTTP/1.1\r\nHost: x\r\n\r\n");
    std::string got;
    EXPECT_TRUE(ReadCount(newcomers.back(), &got, "\r\n\r\nhi", 1, std::chrono::seconds(5)))
        << "newcomer " << i << ": " << got;
    EXPECT_EQ(got.find("HTTP/1.1 200"), 0u) << "newcomer " << i << ": " << got;
    EXPECT_LE(l.listener.open_connections(), 6);
  }
  // Each closed 127.0.0.2's oldest (the busiest address, then tied with
  // the others and the oldest head); 127.0.0.3's are open.
  std::string ignored;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(ReadUntilClosed(idle[i], &ignored, std::chrono::seconds(2))) << i;
  for (int i = 3; i < 6; ++i) EXPECT_FALSE(ReadUntilClosed(idle[i], &ignored, std::chrono::milliseconds(100))) << i;
  for (int fd : idle) ::close(fd);
  for (int fd : newcomers) ::close(fd);
}

TEST(RestListenerTest, AddressKeyGroupsIpv6By64) {
  EXPECT_EQ(RestAddressKey("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(RestAddressKey("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64");
  EXPECT_EQ(RestAddressKey("2001:db8:1:2:ffff:ffff:ffff:ffff"), "2001:db8:1:2::/64");
  EXPECT_NE(RestAddressKey("2001:db8:1:3::1"), RestAddressKey("2001:db8:1:2::1"));
  EXPECT_EQ(RestAddressKey("::1"), "::/64");
  EXPECT_EQ(RestAddressKey("fe80::1%eth0"), "fe80::/64");
  EXPECT_EQ(RestAddressKey("::ffff:10.0.0.1"), "10.0.0.1");
}

TEST(RestListenerTest, OptionsOutOfRangeNameTheFlag) {
  RestListenerOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.max_connections_per_address = 0;
  EXPECT_NE(o.Validate().message().find("--rest-max-connections-per-address"), std::string::npos);
  o = {};
  o.header_timeout_s = 0;
  EXPECT_NE(o.Validate().message().find("--rest-header-timeout-s"), std::string::npos);
  o = {};
  o.max_connections = 0;
  EXPECT_NE(o.Validate().message().find("--rest-max-connections"), std::string::npos);
}

}  // namespace
}  // namespace det::master
