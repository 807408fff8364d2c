#include "master/http/rest_conn.h"

#include <openssl/err.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "master/http/rest_reply.h"

namespace det::master::rest_conn {
namespace {

ssize_t TlsResult(Conn& c, int r) {
  switch (SSL_get_error(c.ssl, r)) {
    case SSL_ERROR_WANT_READ:
      c.wait = POLLIN;
      return kWouldBlock;
    case SSL_ERROR_WANT_WRITE:
      c.wait = POLLOUT;
      return kWouldBlock;
    case SSL_ERROR_ZERO_RETURN:
      return 0;
    default:
      return kBroken;
  }
}

}  // namespace

ssize_t RecvSome(Conn& c, char* p, size_t n) {
  if (c.ssl == nullptr) {
    ssize_t r;
    do {
      r = ::recv(c.fd, p, n, MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r >= 0) return r;
    c.wait = POLLIN;
    return errno == EAGAIN || errno == EWOULDBLOCK ? kWouldBlock : kBroken;
  }
  ERR_clear_error();
  if (!SSL_is_init_finished(c.ssl)) {
    int r = SSL_do_handshake(c.ssl);
    if (r != 1) return TlsResult(c, r);
  }
  int r = SSL_read(c.ssl, p, static_cast<int>(std::min<size_t>(n, 1 << 30)));
  return r > 0 ? r : TlsResult(c, r);
}

ssize_t SendSome(Conn& c, const char* p, size_t n) {
  if (c.ssl == nullptr) {
    ssize_t r;
    do {
      r = ::send(c.fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r > 0) return r;
    c.wait = POLLOUT;
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? kWouldBlock : kBroken;
  }
  ERR_clear_error();
  int r = SSL_write(c.ssl, p, static_cast<int>(std::min<size_t>(n, 1 << 30)));
  return r > 0 ? r : (TlsResult(c, r) == kWouldBlock ? kWouldBlock : kBroken);
}

// Frees the connection's session (a close_notify, if it can go at once)
// and closes its socket.
void Release(Conn& c) {
  if (c.ssl != nullptr) {
    if (SSL_is_init_finished(c.ssl)) {
      ERR_clear_error();
      (void)SSL_shutdown(c.ssl);
    }
    SSL_free(c.ssl);
    c.ssl = nullptr;
  }
  ::close(c.fd);
}

// The value of header `name` in a request head ("" when absent).
std::string HeaderValue(const std::string& head, const std::string& name) {
  size_t at = 0;
  while ((at = head.find('\n', at)) != std::string::npos) {
    ++at;
    if (head.size() - at > name.size() && absl::EqualsIgnoreCase(head.substr(at, name.size()), name) &&
        head[at + name.size()] == ':') {
      size_t end = head.find('\n', at);
      return std::string(absl::StripAsciiWhitespace(head.substr(at + name.size() + 1, end - at - name.size() - 1)));
    }
  }
  return "";
}

// A short response written without waiting (the socket is non-blocking); a
// client that does not read it just loses it.
void WriteNow(Conn& c, int status, const char* reason, const std::string& message) {
  std::string body = ErrorJson(absl::Status(
      status == 431 ? absl::StatusCode::kResourceExhausted : absl::StatusCode::kUnavailable, message));
  std::string out = absl::StrCat("HTTP/1.1 ", status, " ", reason,
                                 "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ",
                                 body.size(), "\r\n\r\n", body);
  (void)SendSome(c, out.data(), out.size());
}

}  // namespace det::master::rest_conn
