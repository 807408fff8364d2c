// det-agent: one per node; registers its slots with the master and runs
// trial processes (det-trial --managed) for it.
//
//   det-agent --master HOST:PORT [--id ID] [--slots N] [--resource-pool P]
//             [--work-dir DIR] [--det-trial PATH] [--hostname H]
//             [--address A]... [--rendezvous-ports FIRST-LAST]
//             [--cluster-secret-file F] [--trial-user NAME] [--no-cgroups]
//             [--tls-ca PEM] [--metrics-listen ADDR:PORT]
//             [--metrics-token-file F] [--nvml-library PATH] [--prestart-pool N]
//             [--log-level L]
//
// The cluster secret comes from a file only (argv and the environment are
// readable by others: /proc/PID/cmdline, /proc/PID/environ).
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "agent/agent.h"
#include "agent/agent_metrics.h"
#include "agent/devices.h"
#include "spdlog/spdlog.h"

namespace {

std::string Hostname() {
  char buf[HOST_NAME_MAX + 1] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// The det-trial binary next to this executable.
std::string DefaultDetTrial() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "det-trial";
  return (self.parent_path() / "det-trial").string();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The file's contents without surrounding whitespace (files usually end in a
// newline; the master trims the same way).
std::string ReadSecretFile(const std::string& path) {
  std::string secret = ReadFile(path);
  const char* ws = " \t\r\n";
  secret.erase(secret.find_last_not_of(ws) + 1);
  secret.erase(0, secret.find_first_not_of(ws));
  return secret;
}

// The uid, gid and groups of user `name` (a name or a numeric uid).
absl::StatusOr<det::agent::RunAs> LookUpUser(const std::string& name) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  if (found == nullptr && !name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
    getpwuid_r(static_cast<uid_t>(std::stoul(name)), &pw, buf.data(), buf.size(), &found);
  }
  if (found == nullptr) return absl::NotFoundError("--trial-user " + name + ": no such user");
  det::agent::RunAs user;
  user.uid = found->pw_uid;
  user.gid = found->pw_gid;
  int n = 64;
  std::vector<gid_t> groups(n);
  if (getgrouplist(found->pw_name, found->pw_gid, groups.data(), &n) < 0) {
    groups.resize(n);
    getgrouplist(found->pw_name, found->pw_gid, groups.data(), &n);
  }
  groups.resize(n);
  user.groups = groups;
  if (user.uid == 0) return absl::InvalidArgumentError("--trial-user " + name + " is root: name an unprivileged user");
  return user;
}

// --trial-user: false (logged) when the agent is no root or there is no
// such user.
bool SetTrialUser(const std::string& name, det::agent::AgentOptions* opts) {
  if (geteuid() != 0) {
    spdlog::error("--trial-user {} needs det-agent to run as root (it is uid {})", name, geteuid());
    return false;
  }
  absl::StatusOr<det::agent::RunAs> user = LookUpUser(name);
  if (!user.ok()) {
    spdlog::error("{}", user.status().ToString());
    return false;
  }
  opts->trial_user = *user;
  spdlog::info("trial processes run as {} (uid {}, gid {})", name, user->uid, user->gid);
  return true;
}

// "FIRST-LAST" within 1..65535, FIRST <= LAST; false (outputs untouched)
// otherwise.
bool ParsePortRange(const std::string& spec, int* first_out, int* last_out) {
  int first = 0, last = 0;
  char dash = 0;
  if (std::sscanf(spec.c_str(), "%d%c%d", &first, &dash, &last) != 3 || dash != '-' || first < 1 ||
      last > 65535 || first > last) {
    return false;
  }
  *first_out = first;
  *last_out = last;
  return true;
}

// --tls-ca: reach the master over TLS with this CA.
void UseTlsCa(const std::string& tls_ca, det::agent::AgentOptions* opts) {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(tls_ca);
  opts->credentials = grpc::SslCredentials(ssl);
  // det-trial (managed mode) reaches the master over TLS with this CA.
  setenv("DET_MASTER_CERT_FILE", std::filesystem::absolute(tls_ca).c_str(), 1);
}

// The /metrics flags (agent_metrics.h).
void AddMetricsFlags(CLI::App& app, det::agent::AgentMetricsFlags* flags) {
  app.add_option("--metrics-listen", flags->listen,
                 "ADDR:PORT: serve Prometheus' GET /metrics there (port 0: the OS chooses; a non-loopback ADDR "
                 "needs --metrics-token-file); unset: no /metrics");
  app.add_option("--metrics-token-file", flags->token_file,
                 "file (owned by det-agent's user or root, no access for others: 0600, 0400, or 0440 with group root "
                 "or det-agent's group; links followed) holding the bearer token every /metrics request "
                 "must carry");
  app.add_option("--nvml-library", flags->nvml_library,
                 "NVML library for the GPU series of /metrics (default: libnvidia-ml.so.1 from the loader's path; "
                 "'none': no GPU series)");
}

// --prestart-pool (prestart_pool.h).
void AddPrestartPoolFlag(CLI::App& app, det::agent::AgentOptions* opts) {
  app.add_option("--prestart-pool", opts->prestart_pool,
                 "keep this many det-trial processes started ahead, LibTorch loaded, each serving the next rank "
                 "of an allocation on this node and then exiting (docs/operations/prestart-pool.md); 0: off, "
                 "each rank starts a fresh process")
      ->check(CLI::Range(0, det::agent::kMaxPrestartPool));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"det-agent: runs trial processes on this node for the det master"};
  // Every flag can also come from a TOML file (keys = flag names without
  // "--"), e.g. deploy/config/agent.toml; flags on the command line win.
  app.set_config("--config", "", "Read flags from this TOML file (see deploy/config/agent.toml)");
  // A key that names no flag (a typo) is an error naming it, not ignored.
  app.allow_config_extras(CLI::config_extras_mode::error);
  // --help shows every option's default.
  app.option_defaults()->always_capture_default();
  det::agent::AgentOptions opts;
  opts.master_address = Env("DET_MASTER");
  int slots = 1;
  std::string log_level = "info";
  app.add_option("--master", opts.master_address, "master address HOST:PORT (env DET_MASTER)");
  app.add_option("--id", opts.agent_id, "agent id (default: the hostname)");
  app.add_option("--slots", slots, "number of CPU slots when there is no GPU")
      ->check(CLI::Range(1, 4096));
  app.add_option("--resource-pool", opts.resource_pool, "resource pool to join");
  app.add_option("--work-dir", opts.work_dir,
                 "artifact cache and allocation directories (default ./det-agent-<id>)");
  app.add_option("--det-trial", opts.det_trial_path,
                 "det-trial binary (default: next to det-agent)");
  app.add_option("--hostname", opts.hostname, "this host's name (default: gethostname)");
  app.add_option("--address", opts.addresses,
                 "address other nodes reach this host at (repeatable; default: hostname)");
  std::string rendezvous_ports;
  app.add_option("--rendezvous-ports", rendezvous_ports,
                 "FIRST-LAST: ports a distributed trial's chief may listen on here (default 29400-29499)");
  std::string secret_file;
  app.add_option("--cluster-secret-file", secret_file,
                 "file holding the cluster's agent secret (mode 0600; the only way to give it)")
      ->check(CLI::ExistingFile);
  std::string trial_user;
  app.add_option("--trial-user", trial_user,
                 "run trial processes as this user (det-agent must run as root) when the master sends no uid of "
                 "the trial's owner (det-master --trial-uid-range); one uid shared by every user's trials");
  bool no_cgroups = false;
  AddPrestartPoolFlag(app, &opts);
  app.add_flag("--no-cgroups", no_cgroups,
               "do not put trial processes in cgroups (they are still contained by process group and reaper)");
  std::string tls_ca;
  app.add_option("--tls-ca", tls_ca, "PEM CA certificate: reach the master over TLS")
      ->check(CLI::ExistingFile);
  det::agent::AgentMetricsFlags metrics_flags;
  AddMetricsFlags(app, &metrics_flags);
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  if (!secret_file.empty()) {
    opts.cluster_secret = ReadSecretFile(secret_file);
    if (opts.cluster_secret.empty()) {
      spdlog::error("--cluster-secret-file {} is empty", secret_file);
      return 2;
    }
  }
  // Trial processes never get it either way (trial_env.h).
  if (std::getenv("DET_CLUSTER_SECRET") != nullptr) {
    spdlog::warn("DET_CLUSTER_SECRET is ignored (environments leak): use --cluster-secret-file");
    unsetenv("DET_CLUSTER_SECRET");
  }
  if (!trial_user.empty() && !SetTrialUser(trial_user, &opts)) return 2;
  opts.use_cgroups = !no_cgroups;
  if (!tls_ca.empty()) UseTlsCa(tls_ca, &opts);
  if (opts.master_address.empty()) {
    spdlog::error("--master (or DET_MASTER) is required");
    return 2;
  }
  if (!rendezvous_ports.empty() &&
      !ParsePortRange(rendezvous_ports, &opts.rendezvous_first_port, &opts.rendezvous_last_port)) {
    spdlog::error("--rendezvous-ports must be FIRST-LAST within 1-65535, got '{}'", rendezvous_ports);
    return 2;
  }
  if (opts.hostname.empty()) opts.hostname = Hostname();
  if (opts.agent_id.empty()) opts.agent_id = opts.hostname;
  if (opts.work_dir.empty()) opts.work_dir = "./det-agent-" + opts.agent_id;
  opts.work_dir = std::filesystem::absolute(opts.work_dir).string();
  if (opts.det_trial_path.empty()) opts.det_trial_path = DefaultDetTrial();
  opts.det_trial_path = std::filesystem::absolute(opts.det_trial_path).string();
  if (access(opts.det_trial_path.c_str(), X_OK) != 0) {
    spdlog::warn("det-trial binary {} is not executable; allocations will fail to start",
                 opts.det_trial_path);
  }
  opts.devices = det::agent::DetectDevices(slots);
  spdlog::info("agent '{}': {} {} slot(s), work dir {}, det-trial {}", opts.agent_id,
               opts.devices.size(),
               opts.devices.front().type() == det::api::v1::DEVICE_TYPE_CUDA ? "CUDA" : "CPU",
               opts.work_dir, opts.det_trial_path);

  // SIGINT/SIGTERM end Run(); every other thread inherits the blocked mask,
  // the launcher resets it for children.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  det::agent::Agent agent(opts);
  absl::StatusOr<det::agent::AgentMetricsEndpoint> metrics =
      det::agent::StartAgentMetrics(metrics_flags, agent, opts.agent_id);
  if (!metrics.ok()) {
    spdlog::error("det-agent: {}", std::string(metrics.status().message()));
    return 2;
  }
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (sig != 0) spdlog::info("received signal {}; shutting down", sig);
    agent.Shutdown();
  });
  absl::Status st = agent.Run();
  // Wake the signal thread if Run() ended on its own.
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  if (!st.ok()) {
    spdlog::error("det-agent: {}", st.ToString());
    return 1;
  }
  return 0;
}
