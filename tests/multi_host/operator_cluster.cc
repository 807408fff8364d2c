// OperatorCluster: the TOML key setter, set-up and tear-down, the network.
#include "tests/multi_host/operator_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/multi_host/netns.h"
#include "tests/multi_host/operator_cluster_internal.h"

namespace det::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct HostSpec {
  Host host;
  const char* name;
  const char* address;
};
constexpr HostSpec kHosts[] = {{Host::kMaster, "master", "10.47.0.1"},
                               {Host::kAgent1, "agent1", "10.47.0.11"},
                               {Host::kAgent2, "agent2", "10.47.0.12"},
                               {Host::kClient, "client", "10.47.0.100"}};

}  // namespace

const char kOperatorSourceDir[] = DET_SOURCE_DIR;
const char kOperatorBuildDir[] = DET_BUILD_ROOT;
const char kOperatorTrialsDir[] = DET_TRIALS_DIR;

// ------------------------------------------------------------------ TOML

absl::Status SetTomlKey(std::string* toml, const std::string& key, const std::string& value) {
  std::vector<std::string> lines = absl::StrSplit(*toml, '\n');
  const std::string set = key + " = ", commented = "# " + key + " = ";
  int at = -1;
  for (int pass = 0; pass < 2 && at < 0; ++pass) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (absl::StartsWith(lines[i], pass == 0 ? set : commented)) {
        at = static_cast<int>(i);
        break;
      }
    }
  }
  if (at < 0) {
    return absl::InvalidArgumentError(absl::StrCat("TOML key '", key,
                                                   "' is not in the shipped file (neither set nor commented out): "
                                                   "the docs name a key the file lacks"));
  }
  lines[at] = set + value;
  *toml = absl::StrJoin(lines, "\n");
  return absl::OkStatus();
}

std::string GetTomlKey(const std::string& toml, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(toml, '\n')) {
    if (absl::ConsumePrefix(&line, key + " = ")) return std::string(line);
  }
  return "";
}

// ------------------------------------------------------------- lifecycle

OperatorCluster::OperatorCluster(OperatorClusterOptions options) : options_(std::move(options)) {
  SetUp();
  if (!ok()) {
    ADD_FAILURE() << "operator cluster set-up failed: " << error_;
    return;
  }
  if (options_.start) {
    StartAll();
    if (::testing::Test::HasFatalFailure() && error_.empty()) error_ = "starting the cluster failed";
  }
}

OperatorCluster::~OperatorCluster() {
  for (auto& a : agents_) {
    if (a) a->Signal(SIGTERM);
  }
  for (auto& a : agents_) {
    if (a) a->Wait(std::chrono::seconds(10));
  }
  if (master_) {
    master_->Signal(SIGTERM);
    master_->Wait(std::chrono::seconds(10));
  }
  // Whatever is left in the hosts' namespaces (trial processes of a killed
  // agent), then the namespaces (their veth pairs and the bridge with them).
  for (const auto& ns : namespaces_) KillNetnsProcesses(ip_, ns);
  std::string out, err;
  for (const auto& ns : namespaces_) {
    RunProcess({ip_, "netns", "del", ns}, &out, &err);
    std::error_code ec;
    fs::remove_all("/etc/netns/" + ns, ec);
  }
}

bool OperatorCluster::Fail(const std::string& why) {
  if (error_.empty()) error_ = why;
  return false;
}

bool OperatorCluster::Step(const std::vector<std::string>& argv, const std::string& what) {
  std::string out, err;
  int rc = RunProcess(argv, &out, &err, std::chrono::minutes(2));
  if (rc != 0) {
    return Fail(absl::StrCat(what, " failed (exit ", rc, "): ", absl::StrJoin(argv, " "), "\n", out, err));
  }
  return true;
}

void OperatorCluster::SetUp() {
  if (geteuid() != 0) {
    Fail("needs root (network namespaces, a bridge, /etc/netns): run the test as root, as CI does");
    return;
  }
  ip_ = IpBinary();
  if (ip_.empty()) {
    Fail("the ip command (iproute2) is not installed: apt-get install iproute2 (deploy/install-deps.sh)");
    return;
  }
  if (access("/usr/bin/openssl", X_OK) != 0) {
    Fail("/usr/bin/openssl is missing: apt-get install openssl (deploy/install-deps.sh)");
    return;
  }
  dir_ = std::make_unique<TempDir>();
  // Trials run as uids of the master's trial-uid-range: they must reach
  // the hosts' installs below the temp dir.
  chmod(dir_->path().c_str(), 0755);
  static std::atomic<int> runs{0};
  tag_ = absl::StrCat(getpid(), "-", runs++);
  for (const auto& spec : kHosts) {
    auto h = std::make_unique<HostState>();
    h->host = spec.host;
    h->name = spec.name;
    h->netns = absl::StrCat("det-mh-", tag_, "-", spec.name);
    h->address = spec.address;
    h->root = dir_->path() + "/" + spec.name;
    h->bridge_end = absl::StrCat("v-", spec.name);
    hosts_.push_back(std::move(h));
  }
  if (!BuildNetwork() || !WriteHostsFiles() || !InstallHosts() || !WriteTls() || !ConfigureMaster() ||
      !ConfigureAgent(1) || !ConfigureAgent(2)) {
    return;
  }
}

OperatorCluster::HostState& OperatorCluster::state(Host host) { return *hosts_[static_cast<int>(host)]; }
const OperatorCluster::HostState& OperatorCluster::state(Host host) const {
  return *hosts_[static_cast<int>(host)];
}

// ---------------------------------------------------------------- network

bool OperatorCluster::BuildNetwork() {
  const std::string br = absl::StrCat("det-mh-", tag_, "-br");
  if (!Step({ip_, "netns", "add", br}, "creating the bridge's namespace")) return false;
  namespaces_.push_back(br);
  if (!Step({ip_, "-n", br, "link", "add", "br0", "type", "bridge"}, "creating the bridge") ||
      !Step({ip_, "-n", br, "link", "set", "br0", "up"}, "setting the bridge up")) {
    return false;
  }
  for (auto& h : hosts_) {
    if (!Step({ip_, "netns", "add", h->netns}, "creating host " + h->name + "'s namespace")) return false;
    namespaces_.push_back(h->netns);
    const std::vector<std::vector<std::string>> steps = {
        {ip_, "link", "add", "eth0", "netns", h->netns, "type", "veth", "peer", "name", h->bridge_end, "netns", br},
        {ip_, "-n", br, "link", "set", h->bridge_end, "master", "br0"},
        {ip_, "-n", br, "link", "set", h->bridge_end, "up"},
        {ip_, "-n", h->netns, "addr", "add", h->address + "/24", "dev", "eth0"},
        {ip_, "-n", h->netns, "link", "set", "eth0", "up"},
        {ip_, "-n", h->netns, "link", "set", "lo", "up"},
    };
    for (const auto& s : steps) {
      if (!Step(s, "wiring host " + h->name)) return false;
    }
  }
  return true;
}

// `ip netns exec NS` bind-mounts /etc/netns/NS/hosts over /etc/hosts: each
// host resolves the master's advertised name and the other hosts' names.
bool OperatorCluster::WriteHostsFiles() {
  std::string hosts = "127.0.0.1 localhost\n";
  absl::StrAppend(&hosts, state(Host::kMaster).address, " ", kMasterName, " det-master\n");
  for (const auto& h : hosts_) {
    if (h->host != Host::kMaster) absl::StrAppend(&hosts, h->address, " ", h->name, ".cluster.test ", h->name, "\n");
  }
  for (const auto& h : hosts_) {
    std::error_code ec;
    fs::create_directories("/etc/netns/" + h->netns, ec);
    if (ec) return Fail("creating /etc/netns/" + h->netns + ": " + ec.message());
    WriteFile("/etc/netns/" + h->netns + "/hosts", hosts);
  }
  return true;
}

void OperatorCluster::LinkDown(Host host) {
  ASSERT_TRUE(Step({ip_, "-n", namespaces_[0], "link", "set", state(host).bridge_end, "down"}, "link down")) << error_;
}

void OperatorCluster::LinkUp(Host host) {
  ASSERT_TRUE(Step({ip_, "-n", namespaces_[0], "link", "set", state(host).bridge_end, "up"}, "link up")) << error_;
}

std::string OperatorCluster::netns(Host host) const { return state(host).netns; }
std::string OperatorCluster::address(Host host) const { return state(host).address; }
std::string OperatorCluster::root(Host host) const { return state(host).root; }
std::string OperatorCluster::checkpoint_root() const { return dir_->path() + "/shared/det-checkpoints"; }
std::string OperatorCluster::db_path() const { return root(Host::kMaster) + "/var/lib/det/det.db"; }

CliResult OperatorCluster::RunOn(Host host, const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  std::vector<std::string> full = {ip_, "netns", "exec", state(host).netns};
  full.insert(full.end(), argv.begin(), argv.end());
  CliResult r;
  r.rc = RunProcess(full, &r.out, &r.err, timeout);
  return r;
}

bool OperatorCluster::WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

}  // namespace det::testing
