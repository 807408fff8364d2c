// An "operator's cluster" for end-to-end tests (issue 47): network
// namespaces joined by a Linux bridge, each a host with its own install done
// by deploy/install.sh (--root HOST_ROOT --no-system) and its own config dir,
// configured from the shipped deploy/config/*.toml changed only in the keys
// docs/operations/multi-node.md tells an operator to change, TLS on, and the
// master reached at its advertised name through per-namespace /etc/hosts.
//
//   host     namespace   address      role
//   master   NS-master   10.47.0.1    det-master (det-master.cluster.test)
//   agent1   NS-agent1   10.47.0.11   det-agent "agent-1", 2 slots
//   agent2   NS-agent2   10.47.0.12   det-agent "agent-2", 2 slots
//   client   NS-client   10.47.0.100  det-cli
//
// The bridge lives in a namespace of its own (NS-br); each host's veth pair
// has its host end (eth0) in the host's namespace and its bridge end in
// NS-br, so LinkDown(host) pulls that host's cable. Daemons run as root,
// started exactly as the installed systemd unit's ExecStart says, under
// `ip netns exec`. Requires root, iproute2 and /usr/bin/openssl: without
// them the constructor records a test failure naming what is missing.
//
// Not thread-safe: one test thread drives an OperatorCluster.
#ifndef DET_TESTS_MULTI_HOST_OPERATOR_CLUSTER_H_
#define DET_TESTS_MULTI_HOST_OPERATOR_CLUSTER_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "tests/test_util.h"

namespace det::testing {

// Sets `key` in the TOML text `*toml` to `value` (TOML syntax: "\"x\"", "2",
// "[\"a\"]"): the first line `key = ...` is replaced, else the first
// commented `# key = ...` line is uncommented with the new value. Returns
// InvalidArgument naming the key when it is in neither form (the shipped
// file and the docs drifted), leaving `*toml` unchanged. Thread-safe.
absl::Status SetTomlKey(std::string* toml, const std::string& key, const std::string& value);

// The value of `key` in the TOML text (the text after "key = " of its first
// uncommented line, quotes kept), "" when absent. Thread-safe.
std::string GetTomlKey(const std::string& toml, const std::string& key);

// The hosts of an OperatorCluster.
enum class Host { kMaster, kAgent1, kAgent2, kClient };

// How the cluster is built (fluent setters).
struct OperatorClusterOptions {
  // The master's heartbeat-timeout-ms (0: the shipped value).
  int heartbeat_timeout_ms = 0;
  // Slots of each agent (the agent.toml key `slots`).
  int agent_slots = 2;
  // More keys set in master.toml / both agents' agent.toml, after the
  // fixture's own ({key, TOML value}); each must already be in the shipped
  // file, commented or not (SetTomlKey).
  std::vector<std::pair<std::string, std::string>> master_keys;
  std::vector<std::pair<std::string, std::string>> agent_keys;
  // More environment of both agents ("KEY=VALUE", e.g.
  // "DET_MASTER_RETRY_TIMEOUT_S=5"); their trials inherit it.
  std::vector<std::string> agent_env;
  // Whether the constructor starts the master and both agents and waits
  // (up to 60 s) until both are connected and det-cli is logged in as admin.
  bool start = true;

  OperatorClusterOptions& set_heartbeat_timeout_ms(int ms) {
    heartbeat_timeout_ms = ms;
    return *this;
  }
  OperatorClusterOptions& set_agent_slots(int n) {
    agent_slots = n;
    return *this;
  }
  OperatorClusterOptions& add_master_key(std::string key, std::string value) {
    master_keys.emplace_back(std::move(key), std::move(value));
    return *this;
  }
  OperatorClusterOptions& add_agent_key(std::string key, std::string value) {
    agent_keys.emplace_back(std::move(key), std::move(value));
    return *this;
  }
  OperatorClusterOptions& add_agent_env(std::string entry) {
    agent_env.push_back(std::move(entry));
    return *this;
  }
  OperatorClusterOptions& set_start(bool s) {
    start = s;
    return *this;
  }
};

// One det-cli run's outcome.
struct CliResult {
  int rc = -1;
  std::string out;
  std::string err;
};

class OperatorCluster {
 public:
  // The master's advertised name, and the address every host's /etc/hosts
  // gives it.
  static constexpr const char* kMasterName = "det-master.cluster.test";

  // Builds the namespaces, bridge and hosts files, installs each host with
  // deploy/install.sh, writes the TLS CA and the master's certificate,
  // copies the master's cluster secret to the agents, edits the configs and,
  // with options.start, starts the master and agents (StartAll). A failing
  // step is a test failure (ADD_FAILURE with the step's output); ok() is
  // then false and the test should stop (ASSERT_TRUE(cluster.ok())).
  explicit OperatorCluster(OperatorClusterOptions options = {});
  // SIGTERMs the agents, then the master (up to 10 s each), SIGKILLs
  // whatever is left in the hosts' namespaces (trial processes of a killed
  // agent), then removes the namespaces, the bridge, the hosts files
  // (/etc/netns/NS) and the temp dir, also after a failed set-up.
  ~OperatorCluster();
  OperatorCluster(const OperatorCluster&) = delete;
  OperatorCluster& operator=(const OperatorCluster&) = delete;

  // Whether set-up (and, with options.start, StartAll) succeeded.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  // Starts the master, then both agents, waits (up to 60 s) until the
  // master reports both connected, and logs det-cli in on the client host
  // as admin with the install's initial password. Fatal test failures
  // (use ASSERT_NO_FATAL_FAILURE).
  void StartAll();

  // Starts det-master on the master host from its unit's ExecStart (on the
  // same data dir each time) and waits (up to 30 s) until its gRPC and
  // REST ports accept connections. Requires: no master running. Each run
  // logs to its own file (MasterLog shows the latest). Fatal test failure
  // when it does not come up.
  void StartMaster();
  // SIGKILLs the master host's processes (det-master) and waits up to 10 s
  // for them to exit. No-op when none runs.
  void KillMasterHard();
  // SIGTERMs the master and waits up to 30 s (its unit's TimeoutStopSec).
  void StopMaster();

  // Starts agent `i` (1 or 2) on its host from its unit's ExecStart, with
  // options.agent_env; returns at once (WaitForAgents waits). Requires: that
  // agent is not running.
  void StartAgent(int i);
  // SIGTERMs agent `i` and waits up to 90 s (its unit's TimeoutStopSec).
  void StopAgent(int i);
  // SIGKILLs agent `i` (its trial processes are left to its reaper's rules)
  // and waits up to 10 s.
  void KillAgentHard(int i);

  // Sets the bridge-side end of `host`'s link down / up (`ip link set`):
  // the host keeps its address but no packet passes until LinkUp. Fatal
  // test failure when ip fails.
  void LinkDown(Host host);
  void LinkUp(Host host);

  // Runs `det-cli ARGS` from the client host's prefix in its namespace,
  // with DET_MASTER=det-master.cluster.test:8090, DET_MASTER_CERT_FILE the
  // CA and DET_AUTH_FILE in the client's root, `stdin_text` on stdin;
  // bounded by `timeout`.
  CliResult Cli(const std::vector<std::string>& args, const std::string& stdin_text = "",
                std::chrono::milliseconds timeout = std::chrono::minutes(2));
  // Cli(args + {"--json"})'s stdout parsed; null when det-cli failed or
  // printed no JSON.
  nlohmann::json CliJson(std::vector<std::string> args);

  // A REST call as admin over HTTPS (verified against the CA, at
  // kMasterName) from the client host; returns the parsed body (null when
  // no answer or not JSON) and sets *status when not null. `method` is
  // GET, POST, PATCH, PUT or DELETE.
  nlohmann::json Rest(const std::string& method, const std::string& path, const std::string& body = "",
                      int* status = nullptr);

  // Agents the master reports connected (REST; 0 when it does not answer).
  int ConnectedAgents();
  // Polls until ConnectedAgents() == n; false after `timeout`.
  bool WaitForAgents(int n, std::chrono::milliseconds timeout);
  // Copies `config_yaml` to the client host and creates an experiment of it
  // with `trial_so` (default: the synthetic example) through det-cli;
  // returns its id, 0 on failure (a test failure with det-cli's output).
  int CreateExperiment(const std::string& config_yaml, const std::string& name,
                       const std::string& trial_so = "");
  // The experiment's state ("STATE_COMPLETED"...), "" when unknown.
  std::string ExperimentState(int id);
  // Polls until the experiment is COMPLETED, ERROR or CANCELED (or
  // `timeout`); returns its last state.
  std::string WaitUntilEnded(int id, std::chrono::milliseconds timeout);
  // The experiment's trials (REST; an empty array when unknown).
  nlohmann::json Trials(int experiment_id);
  // The trial's metrics of `group` ("training" or "validation").
  nlohmann::json Metrics(int64_t trial_id, const std::string& group);
  // det-cli trial logs ID's stdout ("" on failure).
  std::string TrialLogs(int64_t trial_id);

  // Polls `pred` every 100 ms (a REST poll is a TLS handshake) until true;
  // false after `timeout`.
  static bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

  // The master's SQLite file (read-only checks: open it with
  // SQLITE_OPEN_READONLY; the master may be writing).
  std::string db_path() const;
  // The root of `host`'s install (its /; binaries in ROOT/usr/local/bin,
  // configs in ROOT/etc/det).
  std::string root(Host host) const;
  // The network namespace and address of `host`.
  std::string netns(Host host) const;
  std::string address(Host host) const;
  // The shared checkpoint root (every host sees it at the same path).
  std::string checkpoint_root() const;
  // The test's temp dir (removed by the destructor).
  const std::string& dir() const { return dir_->path(); }
  // The current master's log and agent `i`'s (stdout + stderr).
  std::string MasterLog() const;
  std::string AgentLog(int i) const;
  // Every daemon's log, for failure messages.
  std::string Logs() const;
  // The pid of the running master (0 when none), of agent `i`.
  pid_t master_pid() const;
  pid_t agent_pid(int i) const;
  // Runs `argv` in `host`'s namespace (ip netns exec), bounded by `timeout`.
  CliResult RunOn(Host host, const std::vector<std::string>& argv,
                  std::chrono::milliseconds timeout = std::chrono::minutes(1));

 private:
  struct HostState;
  void SetUp();
  bool Step(const std::vector<std::string>& argv, const std::string& what);
  bool Fail(const std::string& why);
  bool BuildNetwork();
  bool WriteHostsFiles();
  bool InstallHosts();
  bool WriteTls();
  bool EditConfig(const std::string& path, const std::vector<std::pair<std::string, std::string>>& keys);
  bool ConfigureMaster();
  bool ConfigureAgent(int i);
  std::vector<std::string> ExecStart(Host host, const std::string& unit) const;
  std::unique_ptr<Subprocess> StartDaemon(Host host, const std::string& unit, const std::vector<std::string>& env,
                                          const std::string& log_name);
  bool PortsOpen();
  const std::string& AdminToken();
  HostState& state(Host host);
  const HostState& state(Host host) const;

  OperatorClusterOptions options_;
  std::unique_ptr<TempDir> dir_;
  std::string tag_;
  std::string ip_;
  std::string error_;
  std::vector<std::string> namespaces_;
  std::vector<std::unique_ptr<HostState>> hosts_;
  std::unique_ptr<Subprocess> master_;
  std::unique_ptr<Subprocess> agents_[2];
  int master_runs_ = 0;
  int agent_runs_[2] = {0, 0};
  std::string token_;
};

}  // namespace det::testing

#endif  // DET_TESTS_MULTI_HOST_OPERATOR_CLUSTER_H_
