// A real Prometheus server (Debian's prometheus 2.42, /usr/bin/prometheus)
// for end-to-end tests of the /metrics endpoints (issue 48): it scrapes the
// given targets every second on loopback, and its HTTP API answers PromQL.
// Also: a /metrics fetch, promtool, and a parser of the text format into the
// set of series (name and labels) for the cardinality test.
// Not thread-safe: one test thread drives a PrometheusServer.
#ifndef DET_TESTS_PROMETHEUS_HARNESS_H_
#define DET_TESTS_PROMETHEUS_HARNESS_H_

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace det::testing {

extern const char kPrometheusBin[];  // /usr/bin/prometheus
extern const char kPromtoolBin[];    // /usr/bin/promtool

// "" when both are installed (executable), else a message naming the
// missing one and deploy/install-deps.sh, which installs them. The tests
// fail with it: Prometheus is a required capability, never a skip.
std::string MissingPrometheusTools();

// One scrape job: `address` is HOST:PORT, scraped at /metrics; with a
// `token_file`, Prometheus sends its content as `Authorization: Bearer`.
struct ScrapeTarget {
  std::string job;
  std::string address;
  std::string token_file;
};

// The prometheus.yml the harness writes: scrape_interval 1s,
// scrape_timeout 900ms, one job per target.
std::string PrometheusConfig(const std::vector<ScrapeTarget>& targets);

class PrometheusServer {
 public:
  // Writes dir/prometheus.yml and starts prometheus on 127.0.0.1:0 (the OS
  // chooses the port; see port()) with its storage in dir/prometheus-data,
  // logging to dir/prometheus.{out,err}. Requires: `dir` outlives this
  // object. Start() below must be called (and checked) before any query.
  PrometheusServer(const TempDir& dir, std::vector<ScrapeTarget> targets);
  // SIGTERM, then SIGKILL when it has not exited within 10 s.
  ~PrometheusServer();
  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;

  // Starts the server and waits (each step bounded by `timeout`) for its
  // listening port (read from /proc: its socket in LISTEN state), for
  // /-/ready, and for every target's `up` to be 1. "" when done, else what
  // failed (with the server's log).
  std::string Start(std::chrono::milliseconds timeout);

  // GET /api/v1/query?query=PROMQL (at the server's now): the result array
  // of an instant vector ([{"metric": {...}, "value": [ts, "v"]}, ...]);
  // null and *error set when the call or the query failed.
  nlohmann::json Query(const std::string& promql, std::string* error = nullptr);
  // GET /api/v1/query_range from `start` to `end` (Unix seconds) every
  // `step_s` seconds: the result array of a matrix
  // ([{"metric": {...}, "values": [[ts, "v"], ...]}, ...]); null on error.
  nlohmann::json QueryRange(const std::string& promql, double start, double end, double step_s,
                            std::string* error = nullptr);
  // The value of the first element of Query(promql); nullopt when empty or
  // on error.
  std::optional<double> Value(const std::string& promql);

  int port() const { return port_; }
  // The server's log (it logs to stderr).
  std::string Log() const;

 private:
  nlohmann::json Get(const std::string& path, const std::vector<std::pair<std::string, std::string>>& params,
                     std::string* error);

  const TempDir& dir_;
  std::vector<ScrapeTarget> targets_;
  std::unique_ptr<Subprocess> process_;
  int port_ = 0;
};

// Now as Unix seconds (for QueryRange).
double UnixNow();

// The TCP port that process `pid` listens on: a socket of its in LISTEN
// state in /proc/PID/net/tcp, not one this process also holds (a child
// inherits our listeners); 0 when none yet.
int ListeningPort(pid_t pid);

// GET http://HOST:PORT/metrics (`address` is HOST:PORT) with
// `Authorization: Bearer TOKEN` unless `token` is empty. The body, or ""
// with *error set (naming the status) when it did not answer 200.
std::string FetchMetrics(const std::string& address, const std::string& token, std::string* error);

// `promtool check metrics` on `exposition` (through a file in `dir`): its
// exit status; *output gets everything it printed (lint problems).
int PromtoolCheckMetrics(const TempDir& dir, const std::string& exposition, std::string* output);

// One series of a text exposition: the sample's name (with _bucket, _sum,
// _count for histograms) and its labels.
struct Series {
  std::string name;
  std::map<std::string, std::string> labels;
  bool operator<(const Series& o) const { return std::tie(name, labels) < std::tie(o.name, o.labels); }
  bool operator==(const Series& o) const { return name == o.name && labels == o.labels; }
  // name{a="1",b="2"}
  std::string ToString() const;
};

// The series of a Prometheus text exposition (format 0.0.4); comment lines
// skipped. A line that does not parse is returned in *bad (when not null).
std::set<Series> ParseSeries(const std::string& exposition, std::vector<std::string>* bad = nullptr);

// The HOST:PORT that follows the last `key` in `log` (e.g. key "metrics
// listening on " in a daemon's log), up to white space; "" when absent.
std::string AddressAfter(const std::string& log, const std::string& key);

}  // namespace det::testing

#endif  // DET_TESTS_PROMETHEUS_HARNESS_H_
