// A REST connection as RestListener holds it, its non-blocking transfers
// (plain or TLS) and the stream a worker runs httplib's parser on. Internal
// to rest_listener.cc (split out to keep files short).
#ifndef DET_MASTER_HTTP_REST_CONN_H_
#define DET_MASTER_HTTP_REST_CONN_H_

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <httplib.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"

namespace det::master::rest_conn {

using Clock = std::chrono::steady_clock;

// Milliseconds from now until `t` (0 when past), at most `cap`.
inline int MillisUntil(Clock::time_point t, int cap) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms + 1, 0, cap));
}

// One client connection. Owned by the epoll thread while it waits for a
// request, by one worker while a request runs.
struct Conn {
  int fd = -1;
  std::string ip;
  std::string address;  // RestAddressKey(ip): what the per-address limits count
  int port = 0;
  SSL* ssl = nullptr;      // HTTPS: the session (handshake done in the loop)
  short wait = POLLIN;     // what the last transfer that would block waits for
  std::string buf;  // bytes read and not yet consumed by a request
  // Set once the head is complete: bytes of buf the loop reads before the
  // request goes to a worker (head, plus a small body), and how many body
  // bytes the worker may still read from the socket.
  size_t need = 0;
  int64_t unbuffered_body = 0;
  Clock::time_point head_deadline;
  Clock::time_point idle_deadline;  // keep-alive: until the first byte
  Clock::time_point body_deadline;  // the worker's reads
  int served = 0;                   // requests answered on this connection
  bool body_reader = false;         // counted in the per-address large-body readers
};

// One non-blocking transfer on a connection, plain or TLS: bytes moved
// (> 0), 0 at the peer's end of the stream, kWouldBlock (c.wait says for
// which event) or kBroken.
constexpr ssize_t kWouldBlock = -2;
constexpr ssize_t kBroken = -1;

ssize_t RecvSome(Conn& c, char* p, size_t n);
ssize_t SendSome(Conn& c, const char* p, size_t n);
// Frees the connection's session (a close_notify, if it can go at once)
// and closes its socket.
void Release(Conn& c);
// The value of header `name` in a request head ("" when absent).
std::string HeaderValue(const std::string& head, const std::string& name);
// A short response written without waiting (the socket is non-blocking); a
// client that does not read it just loses it.
void WriteNow(Conn& c, int status, const char* reason, const std::string& message);

// The worker's view of a connection: first the bytes the loop read, then
// the socket, each read bounded by the body deadline and each write by the
// write timeout; both fail at once when the listener stops. Watches the
// response head for `Connection: close` and an error status.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(Conn& c, int stop_fd, Clock::duration write_timeout)
      : c_(c), stop_fd_(stop_fd), write_timeout_(write_timeout) {}

  bool is_readable() const override { return pos_ < c_.buf.size(); }
  bool is_writable() const override {
    if (failed_ || !Wait(POLLOUT, Clock::now() + write_timeout_)) return false;
    char byte;  // a peer that has closed reads 0 (httplib's is_socket_alive)
    return ::recv(c_.fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ < c_.buf.size()) {
      size_t n = std::min(size, c_.buf.size() - pos_);
      std::memcpy(ptr, c_.buf.data() + pos_, n);
      pos_ += n;
      return static_cast<ssize_t>(n);
    }
    while (!failed_) {
      ssize_t n = RecvSome(c_, ptr, size);
      if (n >= 0) return n;
      if (n != kWouldBlock || !Wait(c_.wait, c_.body_deadline)) break;
    }
    failed_ = true;
    return -1;
  }
  ssize_t write(const char* ptr, size_t size) override {
    Watch(ptr, size);
    size_t done = 0;
    while (done < size && !failed_) {
      ssize_t n = SendSome(c_, ptr + done, size - done);
      if (n > 0) {
        done += static_cast<size_t>(n);
      } else if (n != kWouldBlock || !Wait(c_.wait, Clock::now() + write_timeout_)) {
        failed_ = true;
      }
    }
    return failed_ ? -1 : static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.ip;
    port = c_.port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof(a);
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    if (::getsockname(c_.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof(host), serv, sizeof(serv),
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      port = std::atoi(serv);
    }
  }
  socket_t socket() const override { return c_.fd; }

  size_t consumed() const { return pos_; }
  // Whether the connection must close after this response.
  bool must_close() const { return failed_ || closes_; }

 private:
  // Waits for `events` on the socket until `deadline`; false on timeout,
  // error, hang-up or Stop.
  bool Wait(short events, Clock::time_point deadline) const {
    while (true) {
      pollfd fds[2] = {{c_.fd, events, 0}, {stop_fd_, POLLIN, 0}};
      int r = ::poll(fds, 2, MillisUntil(deadline, 1000));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 || fds[1].revents != 0) return false;
      if (fds[0].revents & (POLLERR | POLLNVAL)) return false;
      if (fds[0].revents & (events | POLLHUP)) return (fds[0].revents & events) != 0;
      if (Clock::now() >= deadline) return false;
    }
  }
  // Collects each response head (a 100 Continue is followed by another).
  void Watch(const char* ptr, size_t size) {
    if (!in_head_) return;
    head_.append(ptr, std::min<size_t>(size, 65536 - std::min<size_t>(head_.size(), 65536)));
    size_t end = head_.find("\r\n\r\n");
    if (end == std::string::npos) return;
    std::string head = absl::AsciiStrToLower(head_.substr(0, end + 2));
    head_.clear();
    if (absl::StartsWith(head, "http/1.1 100 ")) return;
    in_head_ = false;
    int status = 0;
    if (head.size() > 12) (void)absl::SimpleAtoi(head.substr(9, 3), &status);
    // After a malformed or refused request its unread bytes are no request.
    closes_ = absl::StrContains(head, "\r\nconnection: close\r\n") || status == 400 || status == 413 ||
              status == 414 || status == 431;
  }

  Conn& c_;
  const int stop_fd_;
  const Clock::duration write_timeout_;
  size_t pos_ = 0;
  bool failed_ = false;
  bool in_head_ = true;
  bool closes_ = false;
  std::string head_;
};

}  // namespace det::master::rest_conn

#endif  // DET_MASTER_HTTP_REST_CONN_H_
