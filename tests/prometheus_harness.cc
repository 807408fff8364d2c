#include "tests/prometheus_harness.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <httplib.h>

#include "absl/strings/str_cat.h"

namespace det::testing {

const char kPrometheusBin[] = "/usr/bin/prometheus";
const char kPromtoolBin[] = "/usr/bin/promtool";

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string MissingPrometheusTools() {
  std::string missing;
  for (const char* bin : {kPrometheusBin, kPromtoolBin}) {
    if (access(bin, X_OK) != 0) absl::StrAppend(&missing, missing.empty() ? "" : " and ", bin);
  }
  if (missing.empty()) return "";
  return absl::StrCat(missing, " not installed: these tests need Debian's prometheus package (2.42, server and ",
                      "promtool), which deploy/install-deps.sh installs; run it (as root), or apt-get install ",
                      "prometheus");
}

std::string PrometheusConfig(const std::vector<ScrapeTarget>& targets) {
  std::string yml = R"(global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
scrape_configs:
)";
  for (const ScrapeTarget& t : targets) {
    absl::StrAppend(&yml, "  - job_name: ", t.job, "\n    metrics_path: /metrics\n");
    if (!t.token_file.empty()) absl::StrAppend(&yml, "    authorization:\n      credentials_file: ", t.token_file, "\n");
    absl::StrAppend(&yml, "    static_configs:\n      - targets: ['", t.address, "']\n");
  }
  return yml;
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

// The inodes of process `pid`'s sockets (its /proc/PID/fd links "socket:[N]").
std::set<std::string> SocketInodes(pid_t pid) {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator(absl::StrCat("/proc/", pid, "/fd"), ec)) {
    std::error_code link_ec;
    const std::string target = fs::read_symlink(fd.path(), link_ec).string();
    if (!link_ec && target.rfind("socket:[", 0) == 0 && target.back() == ']') {
      inodes.insert(target.substr(8, target.size() - 9));
    }
  }
  return inodes;
}

}  // namespace

int ListeningPort(pid_t pid) {
  // Not the sockets it inherited from this process (a listener of the test's).
  std::set<std::string> inodes = SocketInodes(pid);
  for (const std::string& own : SocketInodes(getpid())) inodes.erase(own);
  std::istringstream tcp(ReadFile(absl::StrCat("/proc/", pid, "/net/tcp")));
  std::string line;
  std::getline(tcp, line);  // the header
  while (std::getline(tcp, line)) {
    // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
    std::istringstream fields(line);
    std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    if (!(fields >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode)) {
      continue;
    }
    const size_t colon = local.find(':');
    if (state != "0A" || colon == std::string::npos || inodes.count(inode) == 0) continue;  // 0A: LISTEN
    return static_cast<int>(std::strtol(local.c_str() + colon + 1, nullptr, 16));
  }
  return 0;
}

PrometheusServer::PrometheusServer(const TempDir& dir, std::vector<ScrapeTarget> targets)
    : dir_(dir), targets_(std::move(targets)) {}

PrometheusServer::~PrometheusServer() {
  if (!process_) return;
  process_->Signal(SIGTERM);
  if (process_->Wait(std::chrono::seconds(10)) < 0) {
    process_->Signal(SIGKILL);
    process_->Wait(std::chrono::seconds(10));
  }
}

std::string PrometheusServer::Log() const { return process_ ? process_->Stdout() + process_->Stderr() : ""; }

std::string PrometheusServer::Start(std::chrono::milliseconds timeout) {
  if (std::string missing = MissingPrometheusTools(); !missing.empty()) return missing;
  WriteFile(dir_ / "prometheus.yml", PrometheusConfig(targets_));
  process_ = std::make_unique<Subprocess>(
      std::vector<std::string>{kPrometheusBin, "--config.file=" + (dir_ / "prometheus.yml"),
                               "--storage.tsdb.path=" + (dir_ / "prometheus-data"),
                               "--web.listen-address=127.0.0.1:0", "--log.level=info"},
      dir_ / "prometheus.out", dir_ / "prometheus.err");
  const pid_t pid = process_->pid();
  if (!PollUntil([&] { return !ProcessAlive(pid) || (port_ = ListeningPort(pid)) != 0; }, timeout) || port_ == 0) {
    return absl::StrCat("prometheus did not listen within ", timeout.count(), " ms:\n", Log());
  }
  if (!PollUntil(
          [&] {
            httplib::Client client("127.0.0.1", port_);
            auto res = client.Get("/-/ready");
            return res && res->status == 200;
          },
          timeout)) {
    return absl::StrCat("prometheus on port ", port_, " was not ready (/-/ready) within ", timeout.count(),
                        " ms:\n", Log());
  }
  json up;
  if (!PollUntil(
          [&] {
            up = Query("up == 1");
            return up.is_array() && up.size() == targets_.size();
          },
          timeout)) {
    return absl::StrCat("not every target was up within ", timeout.count(), " ms (up == 1: ", up.dump(),
                        "; all: ", Query("up").dump(), "; targets: ", Get("/api/v1/targets", {}, nullptr).dump(),
                        ")\n", Log());
  }
  return "";
}

json PrometheusServer::Get(const std::string& path, const std::vector<std::pair<std::string, std::string>>& params,
                           std::string* error) {
  httplib::Client client("127.0.0.1", port_);
  client.set_read_timeout(10, 0);
  httplib::Params p(params.begin(), params.end());
  auto res = client.Get(path.c_str(), p, httplib::Headers{});
  if (!res) {
    if (error) *error = absl::StrCat("no answer from prometheus at 127.0.0.1:", port_, path);
    return nullptr;
  }
  json body = json::parse(res->body, nullptr, false);
  if (res->status != 200 || !body.is_object() || body.value("status", "") != "success") {
    if (error) *error = absl::StrCat(path, " answered ", res->status, ": ", res->body);
    return nullptr;
  }
  return body["data"];
}

json PrometheusServer::Query(const std::string& promql, std::string* error) {
  json data = Get("/api/v1/query", {{"query", promql}}, error);
  if (!data.is_object() || !data.contains("result")) return nullptr;
  return data["result"];
}

namespace {

// `x` with 3 decimals (StrCat would round a Unix time to 6 digits).
std::string Fixed3(double x) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f", x);
  return buf;
}

}  // namespace

json PrometheusServer::QueryRange(const std::string& promql, double start, double end, double step_s,
                                  std::string* error) {
  json data = Get("/api/v1/query_range",
                  {{"query", promql},
                   {"start", Fixed3(start)},
                   {"end", Fixed3(end)},
                   {"step", Fixed3(step_s)}},
                  error);
  if (!data.is_object() || !data.contains("result")) return nullptr;
  return data["result"];
}

std::optional<double> PrometheusServer::Value(const std::string& promql) {
  json result = Query(promql);
  if (!result.is_array() || result.empty() || !result[0].contains("value")) return std::nullopt;
  return std::strtod(result[0]["value"][1].get<std::string>().c_str(), nullptr);
}

std::string FetchMetrics(const std::string& address, const std::string& token, std::string* error) {
  const size_t colon = address.rfind(':');
  httplib::Client client(address.substr(0, colon), std::atoi(address.c_str() + colon + 1));
  client.set_read_timeout(10, 0);
  httplib::Headers headers;
  if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
  auto res = client.Get("/metrics", headers);
  if (!res || res->status != 200) {
    if (error) {
      *error = res ? absl::StrCat("GET http://", address, "/metrics answered ", res->status, ": ", res->body)
                   : absl::StrCat("GET http://", address, "/metrics: no answer");
    }
    return "";
  }
  return res->body;
}

int PromtoolCheckMetrics(const TempDir& dir, const std::string& exposition, std::string* output) {
  static int n = 0;
  const std::string file = dir / absl::StrCat("exposition-", ++n, ".txt");
  WriteFile(file, exposition);
  std::string out, err;
  const int rc = RunProcess({"/bin/sh", "-c", absl::StrCat("exec '", kPromtoolBin, "' check metrics < '", file, "'")},
                            &out, &err, std::chrono::seconds(60));
  if (output) *output = out + err;
  return rc;
}

std::string Series::ToString() const {
  std::string s = name + "{";
  for (const auto& [k, v] : labels) absl::StrAppend(&s, s.back() == '{' ? "" : ",", k, "=\"", v, "\"");
  return s + "}";
}

namespace {

// Parses `{a="1",b="x\"y"}` from line[*pos] into *labels; false if malformed.
bool ParseLabels(const std::string& line, size_t* pos, std::map<std::string, std::string>* labels) {
  size_t i = *pos + 1;  // after '{'
  while (i < line.size() && line[i] != '}') {
    const size_t eq = line.find('=', i);
    if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
    std::string key = line.substr(i, eq - i), value;
    size_t j = eq + 2;
    for (; j < line.size() && line[j] != '"'; ++j) {
      if (line[j] == '\\' && j + 1 < line.size()) {
        ++j;
        value += line[j] == 'n' ? '\n' : line[j];
      } else {
        value += line[j];
      }
    }
    if (j >= line.size()) return false;
    (*labels)[key] = value;
    i = j + 1;
    if (i < line.size() && line[i] == ',') ++i;
  }
  if (i >= line.size()) return false;
  *pos = i + 1;
  return true;
}

// Whether `rest` (after a sample's name and labels) is " VALUE [TIMESTAMP]".
bool IsSampleValue(const std::string& rest) {
  std::istringstream in(rest);
  std::string value, timestamp, extra;
  if (rest.empty() || rest[0] != ' ' || !(in >> value) || (in >> timestamp && (in >> extra))) return false;
  char* end = nullptr;
  std::strtod(value.c_str(), &end);
  return end != value.c_str() && *end == '\0';
}

}  // namespace

std::set<Series> ParseSeries(const std::string& exposition, std::vector<std::string>* bad) {
  std::set<Series> out;
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Series s;
    size_t i = 0;
    while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_' || line[i] == ':')) {
      ++i;
    }
    s.name = line.substr(0, i);
    const bool ok = !s.name.empty() && i < line.size() &&
                    (line[i] == ' ' || (line[i] == '{' && ParseLabels(line, &i, &s.labels))) &&
                    IsSampleValue(line.substr(i));
    if (!ok) {
      if (bad) bad->push_back(line);
      continue;
    }
    out.insert(std::move(s));
  }
  return out;
}

std::string AddressAfter(const std::string& log, const std::string& key) {
  const size_t pos = log.rfind(key);
  if (pos == std::string::npos) return "";
  const size_t start = pos + key.size();
  size_t end = start;
  while (end < log.size() && !std::isspace(static_cast<unsigned char>(log[end]))) ++end;
  return log.substr(start, end - start);
}

}  // namespace det::testing
