#include "agent/metrics_server.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <utility>
#include <vector>

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/secret_token_file.h"
#include "spdlog/spdlog.h"

namespace det::agent {
namespace {

bool IsLoopback(const std::string& host) {
  if (host == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

// httplib's task queue with a bound: kMetricsWorkers threads, at most
// kMetricsQueued connections waiting; enqueue blocks while full, which
// pauses the accept loop (new connections wait in the kernel's backlog).
class BoundedTaskQueue : public httplib::TaskQueue {
 public:
  BoundedTaskQueue() {
    for (int i = 0; i < kMetricsWorkers; ++i) threads_.emplace_back([this] { Work(); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    space_.wait(lock, [&] { return jobs_.size() < static_cast<size_t>(kMetricsQueued); });
    jobs_.push_back(std::move(fn));
    ready_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ready_.wait(lock, [&] { return !jobs_.empty() || shutdown_; });
        if (jobs_.empty()) return;  // shut down, nothing left
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        space_.notify_one();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable ready_;
  std::condition_variable space_;
  std::deque<std::function<void()>> jobs_;
  bool shutdown_ = false;
  std::vector<std::thread> threads_;
};

// Compares without stopping at the first difference.
bool SameToken(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

void Serve(const std::string& token, const MetricsServer::Render& render, const httplib::Request& req,
           httplib::Response& res) {
  if (!token.empty()) {
    const std::string header = req.get_header_value("Authorization");
    absl::string_view auth = header;
    if (!absl::ConsumePrefix(&auth, "Bearer ") || !SameToken(std::string(auth), token)) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("401: /metrics needs Authorization: Bearer <the metrics-token-file's token>\n", "text/plain");
      return;
    }
  }
  res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace

absl::StatusOr<MetricsListenAddress> ParseMetricsListen(const std::string& spec) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("metrics-listen '", spec.substr(0, 300), "': ", why,
                                                   "; give HOST:PORT, e.g. 127.0.0.1:9100 or [::1]:9100 "
                                                   "(port 0: the OS chooses)"));
  };
  size_t colon = spec.rfind(':');
  if (colon == std::string::npos) return bad("no port");
  std::string host = spec.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return bad("an IPv6 address must be in brackets");
  }
  if (host.empty() || host.size() > 255) return bad("the host must have 1 to 255 characters");
  int port = 0;
  if (!absl::SimpleAtoi(spec.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return bad("the port must be a number in 0..65535");
  }
  return MetricsListenAddress{host, port, IsLoopback(host)};
}

absl::StatusOr<std::string> ReadMetricsToken(const std::string& path) {
  return ReadSecretTokenFile(path, "metrics-token-file");
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsListenAddress& address,
                                                                    std::string token, Render render) {
  if (!address.loopback && token.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "metrics-listen ", address.host, ":", address.port,
        " is not a loopback address and no metrics-token-file is set: anyone who reaches it could read this "
        "node's metrics. Set metrics-token-file (a 0600 file holding a token Prometheus sends as a bearer "
        "token), or listen on 127.0.0.1"));
  }
  if (token.empty()) {
    // Loopback is not private on a node that runs trials: their code can
    // connect to 127.0.0.1 too (issue 48 review, finding 9).
    spdlog::warn("metrics-listen {}:{} has no metrics-token-file: any process on this node, trial code included, "
                 "can read its /metrics (every local trial's ids, CPU and memory); set metrics-token-file on a node "
                 "that runs trials",
                 address.host, address.port);
  }
  std::unique_ptr<MetricsServer> self(new MetricsServer());
  self->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *self->server_;
  server.new_task_queue = [] { return new BoundedTaskQueue(); };
  server.set_read_timeout(kMetricsReadTimeoutS, 0);
  server.set_write_timeout(kMetricsReadTimeoutS, 0);
  server.set_keep_alive_max_count(1);
  server.set_payload_max_length(4096);
  server.Get("/metrics", [token, render = std::move(render)](const httplib::Request& req, httplib::Response& res) {
    Serve(token, render, req, res);
  });
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) res.set_content(absl::StrCat(res.status, ": this listener serves GET /metrics only\n"), "text/plain");
  });
  const int port = address.port == 0 ? server.bind_to_any_port(address.host)
                                     : (server.bind_to_port(address.host, address.port) ? address.port : -1);
  if (port < 0) {
    return absl::UnavailableError(absl::StrCat("metrics-listen ", address.host, ":", address.port,
                                               ": cannot listen there (address in use or not this host's)"));
  }
  self->port_ = port;
  self->thread_ = std::thread([&server] { server.listen_after_bind(); });
  // stop() before the loop runs would not end it: wait until it runs.
  for (int i = 0; i < 5000 && !server.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool v6 = address.host.find(':') != std::string::npos;
  spdlog::info("metrics listening on {}{}{}:{}", v6 ? "[" : "", address.host, v6 ? "]" : "", port);
  return self;
}

MetricsServer::~MetricsServer() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace det::agent
