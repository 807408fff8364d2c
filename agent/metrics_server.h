// The agent's /metrics listener (det-agent --metrics-listen ADDR:PORT): a
// plain-HTTP server of cpp-httplib (the library the master's REST port and
// the tests already use) that serves only GET /metrics. A listener on an
// address other than loopback needs a scrape token (--metrics-token-file),
// and then every request must carry it as "Authorization: Bearer TOKEN".
#ifndef DET_AGENT_METRICS_SERVER_H_
#define DET_AGENT_METRICS_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace det::agent {

// A parsed --metrics-listen: "127.0.0.1:9100", "[::1]:9100",
// "localhost:9100", "0.0.0.0:9100"; port 0 lets the OS choose.
struct MetricsListenAddress {
  std::string host;  // without brackets
  int port = 0;
  bool loopback = false;  // 127.0.0.0/8, ::1 or "localhost"
};

// InvalidArgument naming metrics-listen and the expected form when `spec`
// is not HOST:PORT with a port in 0..65535 and a host of at most 255 bytes.
absl::StatusOr<MetricsListenAddress> ParseMetricsListen(const std::string& spec);

// The scrape token in `path` (surrounding white space removed).
// InvalidArgument naming metrics-token-file and the fix when the file is
// missing, not a regular file (a FIFO; a symbolic link is followed and its
// target checked), open to others, writable by its group, readable by a
// group other than root or this process's, owned by neither this process's
// user nor root, over 4096 bytes,
// empty, or holds a character outside printable ASCII: common/
// secret_token_file.h, the same reader as det-master's --metrics-token-file.
absl::StatusOr<std::string> ReadMetricsToken(const std::string& path);

// At most this many requests are served at once; this many more wait (the
// accept loop pauses while they do); a request must arrive within
// kMetricsReadTimeoutS seconds. Every response closes its connection.
constexpr int kMetricsWorkers = 2;
constexpr int kMetricsQueued = 8;
constexpr int kMetricsReadTimeoutS = 5;

class MetricsServer {
 public:
  // Returns the exposition text of one scrape; called on a server thread.
  using Render = std::function<std::string()>;

  // Binds `address` and serves GET /metrics (render()) on a thread of its
  // own; any other path or method gets 404. `token` empty: no
  // authentication, allowed on a loopback address only (FailedPrecondition
  // naming metrics-listen and metrics-token-file otherwise; on loopback it
  // logs a warning: trial code on the node can reach it); non-empty: a
  // request without "Authorization: Bearer <token>" gets 401.
  // Unavailable when the address cannot be bound. Logs "metrics listening
  // on HOST:PORT" (IPv6 HOST in brackets) once bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const MetricsListenAddress& address,
                                                              std::string token, Render render);

  // Stops serving and joins the threads.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (the OS's choice for port 0).
  int port() const { return port_; }

 private:
  MetricsServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace det::agent

#endif  // DET_AGENT_METRICS_SERVER_H_
