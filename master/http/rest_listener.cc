#include "master/http/rest_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "master/http/rest_conn.h"
#include "master/http/rest_reply.h"

namespace det::master {
namespace {

using rest_conn::Clock;
using rest_conn::Conn;
using rest_conn::ConnStream;
using rest_conn::HeaderValue;
using rest_conn::kWouldBlock;
using rest_conn::MillisUntil;
using rest_conn::RecvSome;
using rest_conn::Release;
using rest_conn::SendSome;
using rest_conn::WriteNow;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// kBroken: a 100 Continue could not be written at once.
enum class Head { kWaiting, kReady, kTooLarge, kBroken };

// Removes every `name` header line from the head buf[0, head_end); returns
// the head's new end.
size_t EraseHeader(std::string& buf, size_t head_end, const std::string& name) {
  size_t at = buf.find('\n');
  while (at != std::string::npos && at + 1 < head_end) {
    const size_t line = at + 1;
    const size_t end = buf.find('\n', line);
    if (end == std::string::npos || end >= head_end) break;
    if (end - line > name.size() && absl::EqualsIgnoreCase(absl::string_view(buf).substr(line, name.size()), name) &&
        buf[line + name.size()] == ':') {
      buf.erase(line, end + 1 - line);
      head_end -= end + 1 - line;
      continue;  // `at` still ends the previous line
    }
    at = end;
  }
  return head_end;
}

// A server context of the PEM chain and key (TLS 1.2 or later), or
// InvalidArgument naming both files and OpenSSL's reason.
absl::StatusOr<SSL_CTX*> LoadTlsContext(const std::string& cert_file, const std::string& key_file) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx != nullptr && SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1 &&
      SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) == 1 &&
      SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) == 1 &&
      SSL_CTX_check_private_key(ctx) == 1) {
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    return ctx;
  }
  char reason[256] = "unknown error";
  if (unsigned long e = ERR_peek_last_error(); e != 0) ERR_error_string_n(e, reason, sizeof(reason));
  if (ctx != nullptr) SSL_CTX_free(ctx);
  return absl::InvalidArgumentError(absl::StrCat("--tls-cert ", cert_file, " / --tls-key ", key_file,
                                                 ": cannot load them for HTTPS (", reason, ")"));
}

}  // namespace

std::string RestAddressKey(const std::string& ip) {
  if (ip.find(':') == std::string::npos) return ip;
  in6_addr a{};
  if (::inet_pton(AF_INET6, ip.substr(0, ip.find('%')).c_str(), &a) != 1) return ip;
  char text[INET6_ADDRSTRLEN] = "";
  if (IN6_IS_ADDR_V4MAPPED(&a)) {
    ::inet_ntop(AF_INET, &a.s6_addr[12], text, sizeof(text));
    return text;
  }
  std::memset(&a.s6_addr[8], 0, 8);
  ::inet_ntop(AF_INET6, &a, text, sizeof(text));
  return absl::StrCat(text, "/64");
}

absl::Status RestListener::CheckTls(const std::string& cert_file, const std::string& key_file) {
  auto ctx = LoadTlsContext(cert_file, key_file);
  if (!ctx.ok()) return ctx.status();
  SSL_CTX_free(*ctx);
  return absl::OkStatus();
}

absl::Status RestListenerOptions::Validate() const {
  auto bad = [](const char* flag, const std::string& range) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " must be ", range));
  };
  if (max_connections < 1 || max_connections > 1000000) return bad("--rest-max-connections", "1..1000000");
  if (max_connections_per_address < 1 || max_connections_per_address > max_connections) {
    return bad("--rest-max-connections-per-address", "1..--rest-max-connections");
  }
  if (!(header_timeout_s > 0 && header_timeout_s <= 3600)) return bad("--rest-header-timeout-s", "in (0, 3600]");
  if (!(keep_alive_timeout_s > 0 && keep_alive_timeout_s <= 3600)) {
    return bad("--rest-keep-alive-timeout-s", "in (0, 3600]");
  }
  if (max_head_bytes < 1024 || max_buffered_body_bytes < 0 || min_body_bytes_per_s < 1 || max_body_bytes < 0 ||
      !(write_timeout_s > 0) || max_workers < 1 || max_requests_per_connection < 1) {
    return absl::InvalidArgumentError("RestListenerOptions: a bound is out of range");
  }
  return absl::OkStatus();
}

class RestListener::Impl {
 public:
  Impl(RestListenerOptions options, Handler handler) : opt_(options), handler_(std::move(handler)) {}
  ~Impl() { Stop(); }

  absl::StatusOr<int> Bind(const std::string& host, int port);
  void Start() { loop_ = std::thread([this] { Loop(); }); }
  void Stop();
  int open() const {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }

 private:
  void SetUpLoop();
  void Loop();
  void Accept();
  enum class Admission { kAdmitted, kAtCap, kRefused };
  bool Admit(int fd, const std::string& address);
  Admission Count(const std::string& address, std::string* refusal);
  bool EvictOldestHead();
  void OnReadable(int fd);
  Head Progress(Conn& c) const;
  Head ReadBodyInLoop(Conn& c, size_t head_end, int64_t body) const;
  bool TakeBodyReader(Conn& c);
  void FreeBodyReader(Conn& c);
  void RefuseBodyReader(std::unique_ptr<Conn> c);
  void ExpireIdle();
  int NextTimeoutMs() const;
  void Adopt(std::unique_ptr<Conn> c);
  void Dispatch(std::unique_ptr<Conn> c);
  void Work();
  void Serve(std::unique_ptr<Conn> c);
  void Return(std::unique_ptr<Conn> c);
  void Close(std::unique_ptr<Conn> c);
  void StartRequest(Conn& c, bool keep_alive) const;

  RestListenerOptions opt_;
  const Handler handler_;
  int listen_fd_ = -1, epoll_fd_ = -1, wake_fd_ = -1, stop_fd_ = -1;
  SSL_CTX* ctx_ = nullptr;  // HTTPS when set (options' tls files)
  bool listen_paused_ = false;
  Clock::time_point resume_accept_;
  std::thread loop_;
  // Connections waiting for a request head (the loop's own).
  std::unordered_map<int, std::unique_ptr<Conn>> waiting_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int open_ = 0;
  std::unordered_map<std::string, int> per_address_;   // open connections by RestAddressKey
  std::unordered_map<std::string, int> body_readers_;  // requests whose body a worker reads, by address
  std::vector<std::unique_ptr<Conn>> returned_;  // from workers, for the loop
  std::deque<std::unique_ptr<Conn>> queue_;      // complete requests, for workers
  int idle_workers_ = 0;
  std::vector<std::thread> workers_;
};

absl::StatusOr<int> RestListener::Impl::Bind(const std::string& host, int port) {
  if (!opt_.tls_cert_file.empty()) {
    auto ctx = LoadTlsContext(opt_.tls_cert_file, opt_.tls_key_file);
    if (!ctx.ok()) return ctx.status();
    ctx_ = *ctx;
  }
  auto fail = [&](const std::string& why) {
    return absl::UnavailableError(absl::StrCat("cannot bind the REST API to ", host, ":", port, ": ", why));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); e != 0) {
    return fail(::gai_strerror(e));
  }
  std::string why = "no address";
  for (addrinfo* a = res; a != nullptr && listen_fd_ < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) return fail(why);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  SetUpLoop();
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

// The connection cap below the fd limit, and the epoll set: the listening
// socket, the wake-up and the stop eventfds.
void RestListener::Impl::SetUpLoop() {
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    opt_.max_connections = static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(opt_.max_connections, static_cast<int64_t>(nofile.rlim_cur) - 128)));
  }
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  for (int fd : {listen_fd_, wake_fd_, stop_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
}

void RestListener::Impl::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (stop_fd_ >= 0) {
    uint64_t one = 1;
    (void)!::write(stop_fd_, &one, sizeof(one));  // stays readable: wakes the loop and every Wait
  }
  if (loop_.joinable()) loop_.join();
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
  for (auto& c : queue_) Release(*c);
  queue_.clear();
  for (auto& [fd, c] : waiting_) Release(*c);
  waiting_.clear();
  for (auto& c : returned_) Release(*c);
  returned_.clear();
  for (int fd : {listen_fd_, epoll_fd_, wake_fd_, stop_fd_}) {
    if (fd >= 0) ::close(fd);
  }
  if (ctx_ != nullptr) SSL_CTX_free(ctx_);
  ctx_ = nullptr;
  listen_fd_ = epoll_fd_ = wake_fd_ = stop_fd_ = -1;
}

void RestListener::Impl::Loop() {
  std::vector<epoll_event> events(256);
  while (true) {
    int n = ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), NextTimeoutMs());
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == stop_fd_) return;
      if (fd == listen_fd_) {
        Accept();
      } else if (fd == wake_fd_) {
        uint64_t count;
        (void)!::read(wake_fd_, &count, sizeof(count));
        std::vector<std::unique_ptr<Conn>> back;
        {
          std::lock_guard<std::mutex> lock(mu_);
          back.swap(returned_);
        }
        for (auto& c : back) Adopt(std::move(c));
      } else {
        OnReadable(fd);
      }
    }
    ExpireIdle();
    if (listen_paused_ && Clock::now() >= resume_accept_) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = listen_fd_;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
      listen_paused_ = false;
    }
  }
}

int RestListener::Impl::NextTimeoutMs() const {
  Clock::time_point next = Clock::now() + std::chrono::seconds(1);
  for (const auto& [fd, c] : waiting_) {
    next = std::min(next, c->buf.empty() ? std::min(c->idle_deadline, c->head_deadline) : c->head_deadline);
  }
  if (listen_paused_) next = std::min(next, resume_accept_);
  return MillisUntil(next, 1000);
}

void RestListener::Impl::Accept() {
  for (int accepted = 0; accepted < 256; ++accepted) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop accepting for a moment instead of spinning.
        epoll_event ev{};
        ev.data.fd = listen_fd_;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        listen_paused_ = true;
        resume_accept_ = Clock::now() + std::chrono::milliseconds(100);
      }
      return;
    }
    char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
    ::getnameinfo(reinterpret_cast<sockaddr*>(&peer), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV);
    const std::string address = RestAddressKey(host);
    if (!Admit(fd, address)) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->ip = host;
    c->address = address;
    c->port = std::atoi(serv);
    if (ctx_ != nullptr) {
      c->ssl = SSL_new(ctx_);
      if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) {
        Close(std::move(c));
        continue;
      }
      SSL_set_accept_state(c->ssl);
    }
    StartRequest(*c, /*keep_alive=*/false);
    Adopt(std::move(c));
  }
}

// Counts a new connection, or answers 503 and closes it over the limit of
// its address. At the global cap it first closes the oldest connection
// still waiting for its head, so that clients holding the cap cannot lock a
// newcomer out; a 503 only when every connection is running a request.
bool RestListener::Impl::Admit(int fd, const std::string& address) {
  std::string refusal;
  Admission a = Count(address, &refusal);
  if (a == Admission::kAtCap && EvictOldestHead()) a = Count(address, &refusal);
  if (a == Admission::kAdmitted) return true;
  Conn refused_conn;
  refused_conn.fd = fd;
  if (ctx_ == nullptr) WriteNow(refused_conn, 503, "Service Unavailable", refusal);  // HTTPS: not before a handshake
  ::close(fd);
  return false;
}

RestListener::Impl::Admission RestListener::Impl::Count(const std::string& address, std::string* refusal) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = per_address_.find(address);
  const int from_address = it == per_address_.end() ? 0 : it->second;
  if (from_address >= opt_.max_connections_per_address) {
    *refusal = absl::StrCat(address, " has ", from_address,
                            " REST connections open, the limit per address (--rest-max-connections-per-address ",
                            opt_.max_connections_per_address, "); close some or retry later");
    return Admission::kRefused;
  }
  if (open_ >= opt_.max_connections) {
    *refusal = absl::StrCat("the master has ", open_, " REST connections open, its limit (--rest-max-connections ",
                            opt_.max_connections, "), all running requests; retry later");
    return Admission::kAtCap;
  }
  ++per_address_[address];
  ++open_;
  return Admission::kAdmitted;
}

// Closes the connection that has waited longest for its request head (the
// loop's own), from the address with the most connections open; false when
// every connection is with a worker.
bool RestListener::Impl::EvictOldestHead() {
  Conn* victim = nullptr;
  int victim_open = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [fd, c] : waiting_) {
      auto it = per_address_.find(c->address);
      const int n = it == per_address_.end() ? 0 : it->second;
      if (victim == nullptr || n > victim_open || (n == victim_open && c->head_deadline < victim->head_deadline)) {
        victim = c.get();
        victim_open = n;
      }
    }
  }
  if (victim == nullptr) return false;
  auto it = waiting_.find(victim->fd);
  std::unique_ptr<Conn> c = std::move(it->second);
  waiting_.erase(it);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
  Close(std::move(c));  // no answer, as at the head deadline
  return true;
}

void RestListener::Impl::StartRequest(Conn& c, bool keep_alive) const {
  const Clock::time_point now = Clock::now();
  c.need = 0;
  c.unbuffered_body = 0;
  c.head_deadline = now + Seconds(opt_.header_timeout_s);
  c.idle_deadline = keep_alive ? now + Seconds(opt_.keep_alive_timeout_s) : c.head_deadline;
}

void RestListener::Impl::Adopt(std::unique_ptr<Conn> c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.fd = c->fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev) != 0) return Close(std::move(c));
  int fd = c->fd;
  waiting_[fd] = std::move(c);
  // Bytes already buffered (a pipelined request) may complete a head.
  OnReadable(fd);
}

// Where the request at the start of c.buf stands: its head (and a small
// body) complete, still arriving, or over the head limit.
Head RestListener::Impl::Progress(Conn& c) const {
  if (c.need == 0) {
    // httplib's head ends at the first line that is exactly "\r\n".
    size_t end = c.buf.find("\n\r\n");
    if (end == std::string::npos) {
      return c.buf.size() > static_cast<size_t>(opt_.max_head_bytes) ? Head::kTooLarge : Head::kWaiting;
    }
    size_t head_end = end + 3;
    if (head_end > static_cast<size_t>(opt_.max_head_bytes)) return Head::kTooLarge;
    std::string head = c.buf.substr(0, head_end);
    std::string length = HeaderValue(head, "Content-Length");
    int64_t body = 0;
    if (!length.empty() && (!absl::SimpleAtoi(length, &body) || body < 0)) body = opt_.max_body_bytes;
    const bool chunked = !HeaderValue(head, "Transfer-Encoding").empty();
    if (chunked) body = opt_.max_body_bytes;
    // Small bodies arrive in the loop, Expect or not; a chunked or a large
    // body goes to the worker as it is (httplib answers its 100-continue).
    if (body <= opt_.max_buffered_body_bytes && !chunked) return ReadBodyInLoop(c, head_end, body);
    c.need = head_end;
    c.unbuffered_body = body;
  }
  return c.buf.size() >= c.need ? Head::kReady : Head::kWaiting;
}

// Sets c.need to the head and its `body` bytes. An Expect header is the
// loop's to answer: it writes "100 Continue" (at once, or the connection
// breaks) and drops the header, so httplib never writes a second one.
Head RestListener::Impl::ReadBodyInLoop(Conn& c, size_t head_end, int64_t body) const {
  const std::string expect = HeaderValue(c.buf.substr(0, head_end), "Expect");
  if (!expect.empty()) head_end = EraseHeader(c.buf, head_end, "Expect");
  c.need = head_end + static_cast<size_t>(body);
  if (absl::EqualsIgnoreCase(expect, "100-continue") && body > 0 && c.buf.size() < c.need) {
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (SendSome(c, kContinue, sizeof(kContinue) - 1) != static_cast<ssize_t>(sizeof(kContinue) - 1)) {
      return Head::kBroken;
    }
  }
  return c.buf.size() >= c.need ? Head::kReady : Head::kWaiting;
}

void RestListener::Impl::OnReadable(int fd) {
  auto it = waiting_.find(fd);
  if (it == waiting_.end()) return;
  Conn& c = *it->second;
  bool eof = false;
  while (true) {
    size_t cap = std::max(c.need, static_cast<size_t>(opt_.max_head_bytes) + 1);
    if (c.buf.size() >= cap) break;
    char chunk[16384];
    ssize_t n = RecvSome(c, chunk, std::min(sizeof(chunk), cap - c.buf.size()));
    if (n > 0) {
      c.buf.append(chunk, static_cast<size_t>(n));
      Head h = Progress(c);
      if (h != Head::kWaiting) break;
      continue;
    }
    eof = n != kWouldBlock;
    break;
  }
  Head h = Progress(c);
  if (h == Head::kWaiting && !eof) {
    if (c.ssl != nullptr) {  // a TLS handshake or read may wait to write
      epoll_event ev{};
      ev.events = EPOLLRDHUP | (c.wait == POLLOUT ? EPOLLOUT : EPOLLIN);
      ev.data.fd = fd;
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
    }
    return;
  }
  std::unique_ptr<Conn> owned = std::move(it->second);
  waiting_.erase(it);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  if (h == Head::kReady) return Dispatch(std::move(owned));
  if (h == Head::kTooLarge) {
    WriteNow(*owned, 431, "Request Header Fields Too Large",
             absl::StrCat("request head over ", opt_.max_head_bytes, " bytes"));
  }
  Close(std::move(owned));
}

void RestListener::Impl::ExpireIdle() {
  const Clock::time_point now = Clock::now();
  std::vector<int> expired;
  for (const auto& [fd, c] : waiting_) {
    if (now >= c->head_deadline || (c->buf.empty() && now >= c->idle_deadline)) expired.push_back(fd);
  }
  for (int fd : expired) {
    auto it = waiting_.find(fd);
    std::unique_ptr<Conn> c = std::move(it->second);
    waiting_.erase(it);
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    Close(std::move(c));  // no answer: a slow client learns nothing to pace itself by
  }
}

void RestListener::Impl::Dispatch(std::unique_ptr<Conn> c) {
  if (!TakeBodyReader(*c)) return RefuseBodyReader(std::move(c));
  c->body_deadline = Clock::now() + Seconds(opt_.header_timeout_s) +
                     Seconds(static_cast<double>(c->unbuffered_body) / opt_.min_body_bytes_per_s);
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) {
    Release(*c);
    return;
  }
  queue_.push_back(std::move(c));
  if (idle_workers_ == 0 && static_cast<int>(workers_.size()) < opt_.max_workers) {
    workers_.emplace_back([this] { Work(); });
  } else {
    cv_.notify_one();
  }
}

void RestListener::Impl::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    ++idle_workers_;
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_workers_;
    if (stopping_) return;  // Stop closes what is queued
    std::unique_ptr<Conn> c = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Serve(std::move(c));
    lock.lock();
  }
}

// Runs requests on `c` while complete ones are buffered, then hands it back
// to the loop (or closes it).
void RestListener::Impl::Serve(std::unique_ptr<Conn> c) {
  while (true) {
    ConnStream stream(*c, stop_fd_, Seconds(opt_.write_timeout_s));
    bool closed = false;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stopping_;
    }
    const bool last = stopping || ++c->served >= opt_.max_requests_per_connection;
    bool ok = handler_(stream, /*close_connection=*/last, closed);
    FreeBodyReader(*c);
    if (!ok || closed || last || stream.must_close()) return Close(std::move(c));
    c->buf.erase(0, stream.consumed());
    StartRequest(*c, /*keep_alive=*/true);
    Head h = Progress(*c);
    if (h == Head::kTooLarge || h == Head::kBroken) return Close(std::move(c));
    if (h == Head::kWaiting) return Return(std::move(c));
    if (!TakeBodyReader(*c)) return RefuseBodyReader(std::move(c));
    c->body_deadline = Clock::now() + Seconds(opt_.header_timeout_s) +
                       Seconds(static_cast<double>(c->unbuffered_body) / opt_.min_body_bytes_per_s);
  }
}

// A request whose body the worker reads holds a worker for as long as the
// body takes (up to its deadline): one address may hold a quarter of them.
bool RestListener::Impl::TakeBodyReader(Conn& c) {
  if (c.unbuffered_body == 0) return true;
  std::lock_guard<std::mutex> lock(mu_);
  int& n = body_readers_[c.address];
  if (n >= std::max(1, opt_.max_workers / 4)) {
    if (n == 0) body_readers_.erase(c.address);
    return false;
  }
  ++n;
  c.body_reader = true;
  return true;
}

void RestListener::Impl::FreeBodyReader(Conn& c) {
  if (!c.body_reader) return;
  c.body_reader = false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = body_readers_.find(c.address);
  if (it != body_readers_.end() && --it->second <= 0) body_readers_.erase(it);
}

// Answers 503 (the address has as many large-body requests running as it
// may) and closes the connection; the body is never read.
void RestListener::Impl::RefuseBodyReader(std::unique_ptr<Conn> c) {
  WriteNow(*c, 503, "Service Unavailable",
           absl::StrCat(c->address, " has ", std::max(1, opt_.max_workers / 4),
                        " requests with a large body running, the limit per address (a quarter of the ",
                        opt_.max_workers, " REST workers); retry later"));
  Close(std::move(c));
}

void RestListener::Impl::Return(std::unique_ptr<Conn> c) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopping_) {
      returned_.push_back(std::move(c));
      uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof(one));
      return;
    }
  }
  Close(std::move(c));
}

// Uncounts before closing, so a client that has seen the close may connect
// again at once without meeting its own old connection in the limits.
void RestListener::Impl::Close(std::unique_ptr<Conn> c) {
  FreeBodyReader(*c);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --open_;
    auto it = per_address_.find(c->address);
    if (it != per_address_.end() && --it->second <= 0) per_address_.erase(it);
  }
  Release(*c);
}

RestListener::RestListener(RestListenerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(options, std::move(handler))) {}
RestListener::~RestListener() = default;
absl::StatusOr<int> RestListener::Bind(const std::string& host, int port) { return impl_->Bind(host, port); }
void RestListener::Start() { impl_->Start(); }
void RestListener::Stop() { impl_->Stop(); }
int RestListener::open_connections() const { return impl_->open(); }

}  // namespace det::master
