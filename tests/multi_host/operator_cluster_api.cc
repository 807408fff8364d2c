// OperatorCluster's clients: det-cli on the client host, and REST over
// HTTPS from the client host's namespace.
// Debian's libcpp-httplib is built with OpenSSL: its SSLClient is there.
// This file includes no header that includes httplib.h without it.
#define CPPHTTPLIB_OPENSSL_SUPPORT
#include <httplib.h>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tests/multi_host/netns.h"
#include "tests/multi_host/operator_cluster.h"
#include "tests/multi_host/operator_cluster_internal.h"

namespace det::testing {

using json = nlohmann::json;

CliResult OperatorCluster::Cli(const std::vector<std::string>& args, const std::string& stdin_text,
                               std::chrono::milliseconds timeout) {
  const std::string client = root(Host::kClient);
  std::vector<std::string> argv = {"/usr/bin/env",
                                   "-i",
                                   "PATH=/usr/bin:/bin",
                                   "HOME=" + client + "/root",
                                   absl::StrCat("DET_MASTER=", kMasterName, ":", kGrpcPort),
                                   "DET_MASTER_CERT_FILE=" + client + "/etc/det/tls/ca.pem",
                                   "DET_AUTH_FILE=" + client + "/root/.det/auth.json"};
  if (!stdin_text.empty()) {
    // Through sh, to give det-cli `stdin_text` (RunProcess gives /dev/null).
    const std::string in = dir() + "/cli-stdin";
    WriteFile(in, stdin_text);
    argv.insert(argv.end(), {"/bin/sh", "-c", "f=$1; shift; exec \"$@\" < \"$f\"", "sh", in});
  }
  argv.push_back(client + "/usr/local/bin/det-cli");
  argv.insert(argv.end(), args.begin(), args.end());
  return RunOn(Host::kClient, argv, timeout);
}

json OperatorCluster::CliJson(std::vector<std::string> args) {
  args.push_back("--json");
  CliResult r = Cli(args);
  if (r.rc != 0) return nullptr;
  return json::parse(r.out, nullptr, false);
}

namespace {

// One HTTPS exchange with the master at its name, checked against the CA,
// from `netns`.
httplib::Result Https(const std::string& netns, const std::string& master_ip, const std::string& ca,
                      const std::string& method, const std::string& path, const httplib::Headers& headers,
                      const std::string& body) {
  httplib::Result result(nullptr, httplib::Error::Unknown, httplib::Headers{});
  InNetns(netns, [&] {
    httplib::SSLClient client(OperatorCluster::kMasterName, kHttpPort);
    client.set_hostname_addr_map({{OperatorCluster::kMasterName, master_ip}});
    client.set_ca_cert_path(ca.c_str());
    client.enable_server_certificate_verification(true);
    client.set_connection_timeout(std::chrono::seconds(3));
    client.set_read_timeout(std::chrono::seconds(10));
    const char* type = "application/json";
    if (method == "GET") {
      result = client.Get(path.c_str(), headers);
    } else if (method == "POST") {
      result = client.Post(path.c_str(), headers, body, type);
    } else if (method == "PATCH") {
      result = client.Patch(path.c_str(), headers, body, type);
    } else if (method == "PUT") {
      result = client.Put(path.c_str(), headers, body, type);
    } else {
      result = client.Delete(path.c_str(), headers, body, type);
    }
  });
  return result;
}

}  // namespace

const std::string& OperatorCluster::AdminToken() {
  if (token_.empty()) {
    std::string password = ReadFile(root(Host::kMaster) + "/etc/det/initial-admin-password");
    json body = {{"username", "admin"}, {"password", std::string(absl::StripAsciiWhitespace(password))}};
    auto res = Https(netns(Host::kClient), address(Host::kMaster), root(Host::kClient) + "/etc/det/tls/ca.pem",
                     "POST", "/api/v1/auth/login", {}, body.dump());
    if (res && res->status == 200) {
      auto j = json::parse(res->body, nullptr, false);
      if (j.is_object() && j.contains("token") && j["token"].is_string()) token_ = j["token"].get<std::string>();
    }
  }
  return token_;
}

json OperatorCluster::Rest(const std::string& method, const std::string& path, const std::string& body,
                           int* status) {
  const std::string token = AdminToken();
  auto res = Https(netns(Host::kClient), address(Host::kMaster), root(Host::kClient) + "/etc/det/tls/ca.pem", method,
                   path, {{"Authorization", "Bearer " + token}}, body.empty() ? "{}" : body);
  if (!res) return nullptr;
  if (status) *status = res->status;
  return json::parse(res->body, nullptr, false);
}

int OperatorCluster::ConnectedAgents() {
  auto agents = Rest("GET", "/api/v1/agents");
  int n = 0;
  if (agents.is_object() && agents.contains("agents")) {
    for (const auto& a : agents["agents"]) n += a.value("connected", false) ? 1 : 0;
  }
  return n;
}

bool OperatorCluster::WaitForAgents(int n, std::chrono::milliseconds timeout) {
  return WaitFor([&] { return ConnectedAgents() == n; }, timeout);
}

int OperatorCluster::CreateExperiment(const std::string& config_yaml, const std::string& name,
                                      const std::string& trial_so) {
  const std::string path = root(Host::kClient) + "/root/" + name + ".yaml";
  WriteFile(path, config_yaml);
  const std::string so = trial_so.empty() ? std::string(kOperatorTrialsDir) + "/synthetic_trial.so" : trial_so;
  CliResult r = Cli({"experiment", "create", path, so});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  auto pos = r.out.find("Created experiment ");
  if (pos == std::string::npos) return 0;
  return std::atoi(r.out.c_str() + pos + 19);
}

std::string OperatorCluster::ExperimentState(int id) {
  auto e = Rest("GET", absl::StrCat("/api/v1/experiments/", id));
  if (!e.is_object() || !e.contains("experiment")) return "";
  return e["experiment"].value("state", "");
}

std::string OperatorCluster::WaitUntilEnded(int id, std::chrono::milliseconds timeout) {
  std::string state;
  WaitFor(
      [&] {
        state = ExperimentState(id);
        return state == "STATE_COMPLETED" || state == "STATE_ERROR" || state == "STATE_CANCELED";
      },
      timeout);
  return state;
}

json OperatorCluster::Trials(int experiment_id) {
  auto t = Rest("GET", absl::StrCat("/api/v1/experiments/", experiment_id, "/trials"));
  if (!t.is_object() || !t.contains("trials")) return json::array();
  return t["trials"];
}

json OperatorCluster::Metrics(int64_t trial_id, const std::string& group) {
  auto m = Rest("GET", absl::StrCat("/api/v1/trials/", trial_id, "/metrics?group=", group));
  if (!m.is_object() || !m.contains("metrics")) return json::array();
  return m["metrics"];
}

std::string OperatorCluster::TrialLogs(int64_t trial_id) {
  CliResult r = Cli({"trial", "logs", std::to_string(trial_id)});
  return r.rc == 0 ? r.out : "";
}

}  // namespace det::testing
