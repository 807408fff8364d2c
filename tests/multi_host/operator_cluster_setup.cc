// OperatorCluster's set-up as an operator does it: deploy/install.sh per
// host, the master's cluster secret copied to the agents, a CA and the
// master's certificate, and the documented keys of the installed configs.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/multi_host/operator_cluster.h"
#include "tests/multi_host/operator_cluster_internal.h"

namespace det::testing {
namespace {

namespace fs = std::filesystem;

std::string Quote(const std::string& s) { return absl::StrCat("\"", s, "\""); }

}  // namespace

// deploy/install.sh --root HOST_ROOT --no-system ROLE for each host, from
// this build. The agents get the master's secret as the docs say: a copy in
// a private directory (root's home), CLUSTER_SECRET_FILE=... install.sh
// agent, then the copy removed.
bool OperatorCluster::InstallHosts() {
  const std::string script = std::string(kOperatorSourceDir) + "/deploy/install.sh";
  const std::string build = absl::StrCat("DET_BUILD_DIR=", kOperatorBuildDir);
  auto install = [&](Host host, const std::string& role, const std::vector<std::string>& env) {
    std::vector<std::string> argv = {"/usr/bin/env", build};
    argv.insert(argv.end(), env.begin(), env.end());
    for (const std::string& a : {std::string("/bin/bash"), script, std::string("--root"), root(host),
                                 std::string("--no-system"), role}) {
      argv.push_back(a);
    }
    return Step(argv, "deploy/install.sh " + role + " on host " + state(host).name);
  };
  if (!install(Host::kMaster, "master", {})) return false;
  const std::string secret = root(Host::kMaster) + "/etc/det/cluster-secret";
  for (int i = 1; i <= 2; ++i) {
    const Host h = AgentHost(i);
    const std::string home = root(h) + "/root";
    std::error_code ec;
    fs::create_directories(home, ec);
    chmod(home.c_str(), 0700);
    const std::string copy = home + "/cluster-secret";
    if (!Step({"/usr/bin/install", "-m", "0600", secret, copy}, "copying the cluster secret")) return false;
    if (!install(h, "agent", {"CLUSTER_SECRET_FILE=" + copy, absl::StrCat("MASTER=", kMasterName, ":", kGrpcPort)})) {
      return false;
    }
    fs::remove(copy, ec);
  }
  return install(Host::kClient, "client", {});
}

// A CA, and a certificate for the master's advertised name signed by it;
// cert.pem and key.pem where master.toml's commented tls-cert/tls-key point,
// ca.pem where agent.toml's tls-ca points and on the client host.
bool OperatorCluster::WriteTls() {
  const std::string tls = dir() + "/tls";
  fs::create_directories(tls);
  const std::string o = "/usr/bin/openssl";
  const std::string san = absl::StrCat("subjectAltName=DNS:", kMasterName);
  WriteFile(tls + "/san.ext", san + "\n");
  const std::vector<std::vector<std::string>> steps = {
      {o, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
       tls + "/ca.key", "-out", tls + "/ca.pem", "-days", "2", "-subj", "/CN=det-test-ca"},
      {o, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
       tls + "/key.pem", "-out", tls + "/cert.csr", "-subj", absl::StrCat("/CN=", kMasterName)},
      {o, "x509", "-req", "-in", tls + "/cert.csr", "-CA", tls + "/ca.pem", "-CAkey", tls + "/ca.key",
       "-CAcreateserial", "-out", tls + "/cert.pem", "-days", "2", "-extfile", tls + "/san.ext"},
  };
  for (const auto& s : steps) {
    if (!Step(s, "openssl")) return false;
  }
  const std::string master_tls = root(Host::kMaster) + "/etc/det/tls";
  fs::create_directories(master_tls);
  if (!Step({"/usr/bin/install", "-m", "0644", tls + "/cert.pem", master_tls + "/cert.pem"}, "installing cert") ||
      !Step({"/usr/bin/install", "-m", "0600", tls + "/key.pem", master_tls + "/key.pem"}, "installing key")) {
    return false;
  }
  for (Host h : {Host::kAgent1, Host::kAgent2, Host::kClient}) {
    const std::string d = root(h) + "/etc/det/tls";
    fs::create_directories(d);
    if (!Step({"/usr/bin/install", "-m", "0644", tls + "/ca.pem", d + "/ca.pem"}, "installing the CA")) return false;
  }
  return true;
}

bool OperatorCluster::EditConfig(const std::string& path,
                                 const std::vector<std::pair<std::string, std::string>>& keys) {
  std::string toml = ReadFile(path);
  if (toml.empty()) return Fail(path + " is missing or empty after deploy/install.sh");
  for (const auto& [key, value] : keys) {
    absl::Status s = SetTomlKey(&toml, key, value);
    if (!s.ok()) return Fail(absl::StrCat(path, ": ", s.message()));
  }
  WriteFile(path, toml);
  return true;
}

// The keys docs/operations/multi-node.md tells an operator to set on the
// master node, and the shared checkpoint root laid out as it says.
bool OperatorCluster::ConfigureMaster() {
  const std::string ck = checkpoint_root();
  std::error_code ec;
  fs::create_directories(fs::path(ck).parent_path(), ec);
  chmod(fs::path(ck).parent_path().c_str(), 0755);
  if (!Step({"/usr/bin/install", "-d", "-m", "3733", ck}, "creating the shared checkpoint root")) return false;
  const std::string etc = root(Host::kMaster) + "/etc/det";
  std::vector<std::pair<std::string, std::string>> keys = {
      {"advertise-address", Quote(kMasterName)},
      {"checkpoint-root", Quote(ck)},
      {"tls-cert", Quote(etc + "/tls/cert.pem")},
      {"tls-key", Quote(etc + "/tls/key.pem")},
  };
  if (options_.heartbeat_timeout_ms > 0) {
    keys.emplace_back("heartbeat-timeout-ms", std::to_string(options_.heartbeat_timeout_ms));
  }
  keys.insert(keys.end(), options_.master_keys.begin(), options_.master_keys.end());
  return EditConfig(etc + "/master.toml", keys);
}

// The keys the docs tell an operator to set on agent node `i`.
bool OperatorCluster::ConfigureAgent(int i) {
  const Host h = AgentHost(i);
  const std::string etc = root(h) + "/etc/det";
  std::vector<std::pair<std::string, std::string>> keys = {
      {"master", Quote(absl::StrCat(kMasterName, ":", kGrpcPort))},
      {"id", Quote(absl::StrCat("agent-", i))},
      {"slots", std::to_string(options_.agent_slots)},
      {"address", absl::StrCat("[", Quote(address(h)), "]")},
      {"tls-ca", Quote(etc + "/tls/ca.pem")},
  };
  keys.insert(keys.end(), options_.agent_keys.begin(), options_.agent_keys.end());
  return EditConfig(etc + "/agent.toml", keys);
}

// The installed unit's ExecStart, split on blanks (the shipped units quote
// nothing).
std::vector<std::string> OperatorCluster::ExecStart(Host host, const std::string& unit) const {
  const std::string path = root(host) + "/etc/systemd/system/det-" + unit + ".service";
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n')) {
    if (absl::ConsumePrefix(&line, "ExecStart=")) {
      return absl::StrSplit(line, ' ', absl::SkipEmpty());
    }
  }
  return {};
}

}  // namespace det::testing
