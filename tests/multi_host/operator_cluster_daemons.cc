// OperatorCluster's daemons: started as their installed systemd units'
// ExecStart says, under `ip netns exec`, with systemd's bare environment.
#include <signal.h>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/multi_host/netns.h"
#include "tests/multi_host/operator_cluster.h"
#include "tests/multi_host/operator_cluster_internal.h"

namespace det::testing {
namespace {

// systemd's default PATH for services: the units set no other environment.
constexpr char kSystemdPath[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// The TCP sockets and neighbours of each host (ss and ip from iproute2),
// for a failure message.
std::string NetworkState(OperatorCluster& c) {
  std::string out;
  for (Host h : {Host::kMaster, Host::kAgent1, Host::kAgent2}) {
    CliResult ss = c.RunOn(h, {"/usr/bin/env", "ss", "-tan"}, std::chrono::seconds(10));
    CliResult neigh = c.RunOn(h, {"/usr/bin/env", "ip", "neigh"}, std::chrono::seconds(10));
    absl::StrAppend(&out, "--- ", c.netns(h), " (", c.address(h), ")\n", ss.out, ss.err, neigh.out, neigh.err);
  }
  return out;
}

}  // namespace

std::unique_ptr<Subprocess> OperatorCluster::StartDaemon(Host host, const std::string& unit,
                                                         const std::vector<std::string>& env,
                                                         const std::string& log_name) {
  std::vector<std::string> exec = ExecStart(host, unit);
  EXPECT_EQ(exec.size(), 3u) << "det-" << unit << ".service's ExecStart";
  if (exec.empty()) return nullptr;
  // The unit names the binary of this host's prefix and its config.
  EXPECT_EQ(exec[0], root(host) + "/usr/local/bin/det-" + unit);
  std::vector<std::string> argv = {ip_, "netns", "exec", netns(host), "/usr/bin/env", "-i", kSystemdPath};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.insert(argv.end(), exec.begin(), exec.end());
  return std::make_unique<Subprocess>(argv, dir() + "/" + log_name + ".out", dir() + "/" + log_name + ".err");
}

bool OperatorCluster::PortsOpen() {
  return TcpConnects(netns(Host::kClient), address(Host::kMaster), kGrpcPort) &&
         TcpConnects(netns(Host::kClient), address(Host::kMaster), kHttpPort);
}

void OperatorCluster::StartAll() {
  ASSERT_TRUE(ok()) << error_;
  ASSERT_NO_FATAL_FAILURE(StartMaster());
  StartAgent(1);
  StartAgent(2);
  ASSERT_TRUE(WaitForAgents(2, std::chrono::seconds(60))) << Logs() << NetworkState(*this);
  const std::string password = ReadFile(root(Host::kMaster) + "/etc/det/initial-admin-password");
  CliResult login = Cli({"user", "login", "admin", "--password-stdin"}, password);
  ASSERT_EQ(login.rc, 0) << login.out << login.err << Logs();
}

void OperatorCluster::StartMaster() {
  ASSERT_TRUE(master_ == nullptr || master_->Wait(std::chrono::milliseconds(0)) >= 0) << "a master is running";
  master_ = StartDaemon(Host::kMaster, "master", {}, absl::StrCat("master-", ++master_runs_));
  ASSERT_NE(master_, nullptr);
  // Until its ports are open, or it exited.
  WaitFor([&] { return master_->Wait(std::chrono::milliseconds(0)) >= 0 || PortsOpen(); }, std::chrono::seconds(30));
  ASSERT_TRUE(master_->Wait(std::chrono::milliseconds(0)) < 0 && PortsOpen())
      << "det-master did not open ports " << kGrpcPort << " and " << kHttpPort << " on " << address(Host::kMaster)
      << ":\n"
      << MasterLog();
}

void OperatorCluster::KillMasterHard() {
  if (master_ == nullptr) return;
  KillNetnsProcesses(ip_, netns(Host::kMaster));
  master_->Wait(std::chrono::seconds(10));
}

void OperatorCluster::StopMaster() {
  if (master_ == nullptr) return;
  master_->Signal(SIGTERM);
  master_->Wait(std::chrono::seconds(30));
}

void OperatorCluster::StartAgent(int i) {
  auto& a = agents_[i - 1];
  if (a != nullptr && a->Wait(std::chrono::milliseconds(0)) < 0) {
    ADD_FAILURE() << "agent " << i << " is running";
    return;
  }
  a = StartDaemon(AgentHost(i), "agent", options_.agent_env, absl::StrCat("agent", i, "-", ++agent_runs_[i - 1]));
}

void OperatorCluster::StopAgent(int i) {
  auto& a = agents_[i - 1];
  if (a == nullptr) return;
  a->Signal(SIGTERM);
  a->Wait(std::chrono::seconds(90));
}

void OperatorCluster::KillAgentHard(int i) {
  auto& a = agents_[i - 1];
  if (a == nullptr) return;
  a->Signal(SIGKILL);
  a->Wait(std::chrono::seconds(10));
}

pid_t OperatorCluster::master_pid() const { return master_ ? master_->pid() : 0; }
pid_t OperatorCluster::agent_pid(int i) const { return agents_[i - 1] ? agents_[i - 1]->pid() : 0; }

std::string OperatorCluster::MasterLog() const { return master_ ? master_->Stdout() + master_->Stderr() : ""; }

std::string OperatorCluster::AgentLog(int i) const {
  const auto& a = agents_[i - 1];
  return a ? a->Stdout() + a->Stderr() : "";
}

std::string OperatorCluster::Logs() const {
  std::string out = "--- master\n" + MasterLog();
  for (int i = 1; i <= 2; ++i) absl::StrAppend(&out, "--- agent ", i, "\n", AgentLog(i));
  return out;
}

}  // namespace det::testing
