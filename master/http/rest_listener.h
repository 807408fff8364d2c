// The REST port's connection layer: one epoll thread accepts connections and
// reads each request head (and a small body) without holding a thread, then
// hands the complete request to a worker that runs httplib's parser and the
// routes on it. Slow or idle clients hold file descriptors, never workers.
#ifndef DET_MASTER_HTTP_REST_LISTENER_H_
#define DET_MASTER_HTTP_REST_LISTENER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace httplib {
class Stream;
}

namespace det::master {

// Bounds of the REST port (det-master's --rest-* flags).
struct RestListenerOptions {
  // Open connections in all; at most the process's fd limit less 128 (the
  // rest of the master's descriptors). At it, a new connection closes the
  // oldest one still waiting for its request head (from the address with
  // the most connections open); when every connection is running a request,
  // the new one gets a 503 and is closed at once.
  int max_connections = 1024;
  // Open connections from one peer IP address; beyond it a 503, closed.
  int max_connections_per_address = 16;
  // A request's head (request line and headers) must be complete this long
  // after the connection was accepted or its previous response ended;
  // sending it slowly does not extend it. Else the connection is closed.
  double header_timeout_s = 10;
  // A keep-alive connection that has not started its next request after
  // this long is closed.
  double keep_alive_timeout_s = 5;
  // Requests served on one keep-alive connection; the last one's response
  // closes it (httplib's Keep-Alive header says so with max=).
  int max_requests_per_connection = 100;
  // Largest request head; a longer one gets 431 and the connection closes.
  int64_t max_head_bytes = 64 << 10;
  // Bodies of at most this many bytes (Content-Length) are read by the
  // epoll thread before the request reaches a worker, within the head's
  // deadline, with or without an Expect header (the loop answers
  // "Expect: 100-continue" itself and drops the header). Larger ones (which
  // need a user token) and chunked ones are read by the worker.
  int64_t max_buffered_body_bytes = 64 << 10;
  // A body the worker reads must arrive within header_timeout_s plus one
  // second per this many bytes of its Content-Length (chunked bodies: of
  // max_body_bytes); else the request fails and the connection closes.
  int64_t min_body_bytes_per_s = 64 << 10;
  int64_t max_body_bytes = 8 << 20;
  // A response write that makes no progress for this long ends the
  // connection.
  double write_timeout_s = 5;
  // Threads that run requests (created on demand; long streams hold one).
  // Requests beyond wait, their connections still bounded above.
  // One address (RestAddressKey) may have at most a quarter of them (at
  // least 1) running requests whose body the worker reads (over
  // max_buffered_body_bytes, or chunked); beyond it a 503.
  int max_workers = 64;
  // HTTPS with this PEM certificate chain and key (TLS 1.2 or later, the
  // handshake done in the epoll thread under the head deadline); empty:
  // plain HTTP. Over a connection limit an HTTPS connection is closed
  // without a 503.
  std::string tls_cert_file;
  std::string tls_key_file;

  // InvalidArgument naming the --rest-* flag that is out of range.
  absl::Status Validate() const;
};

// The client address that the per-address limits count: an IPv4 address
// (an IPv4-mapped IPv6 one as IPv4) as it is, an IPv6 address by its /64
// ("2001:db8:1:2::/64"), since one IPv6 host commonly holds a whole /64.
std::string RestAddressKey(const std::string& ip);

// Thread-safe: Bind, Start and Stop are called from one thread; the handler
// runs on worker threads, several at once.
class RestListener {
 public:
  // Runs one request read from `stream` and writes its response, as
  // httplib::Server::process_request does: false when the connection must
  // close (a broken stream), `connection_closed` set when the request asked
  // for it. `close_connection`: the response must close the connection.
  using Handler = std::function<bool(httplib::Stream& stream, bool close_connection, bool& connection_closed)>;

  RestListener(RestListenerOptions options, Handler handler);
  ~RestListener();  // Stop()
  RestListener(const RestListener&) = delete;
  RestListener& operator=(const RestListener&) = delete;

  // Whether the PEM chain and key load for HTTPS: InvalidArgument naming
  // both files and the reason when not.
  static absl::Status CheckTls(const std::string& cert_file, const std::string& key_file);

  // Binds and listens on host:port (0: any free port); returns the port.
  // Unavailable naming the address when it cannot; InvalidArgument when the
  // TLS files do not load.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // Starts the epoll thread. Requires a successful Bind.
  void Start();
  // Closes the port and every connection; workers' reads and writes fail
  // at once (streams end) and Stop waits for the handlers to return.
  void Stop();

  // Connections open now (tests).
  int open_connections() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace det::master

#endif  // DET_MASTER_HTTP_REST_LISTENER_H_
