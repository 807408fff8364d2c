// A real det-master and det-agents for an end-to-end test: started on ports
// the OS chooses, driven through det-cli and the REST API, and stopped when
// the test ends. Not thread-safe: one test thread drives a TestCluster.
#ifndef DET_TESTS_TEST_CLUSTER_H_
#define DET_TESTS_TEST_CLUSTER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace det::testing {

// The directory holding det-master, det-agent and det-cli, and the synthetic
// example's trial library.
extern const char kTestBinDir[];
extern const char kTestSyntheticTrial[];

// How one det-agent is started (fluent setters, e.g.
// AgentOptions().set_slots(2).add_flags({"--cluster-secret-file", path})).
struct AgentOptions {
  // CPU slots (--slots).
  int slots = 1;
  // Extra det-agent flags, appended after the standard ones.
  std::vector<std::string> flags;
  // A command the agent runs under, e.g. {"ip", "netns", "exec", "ns1"}.
  std::vector<std::string> prefix;

  AgentOptions& set_slots(int n) {
    slots = n;
    return *this;
  }
  AgentOptions& add_flags(const std::vector<std::string>& f) {
    flags.insert(flags.end(), f.begin(), f.end());
    return *this;
  }
  AgentOptions& set_prefix(std::vector<std::string> p) {
    prefix = std::move(p);
    return *this;
  }
};

// How the master is started and reached (fluent setters).
struct TestClusterOptions {
  // Extra det-master flags, appended after the standard ones.
  std::vector<std::string> master_flags;
  // The address the master's ports are reached at (gRPC and REST).
  std::string master_address = "127.0.0.1";
  // A command the master and det-cli run under (e.g. ip netns exec NAME).
  std::vector<std::string> master_prefix;
  // Runs `fn` where the master's address is reachable (e.g. on a thread in
  // the master's network namespace); unset: runs it directly.
  std::function<void(const std::function<void()>&)> in_master_network;
  // The bound on one det-cli run.
  std::chrono::milliseconds cli_timeout = std::chrono::minutes(2);
  // The read timeout of one REST call.
  std::chrono::seconds http_read_timeout = std::chrono::seconds(10);

  TestClusterOptions& add_master_flags(const std::vector<std::string>& f) {
    master_flags.insert(master_flags.end(), f.begin(), f.end());
    return *this;
  }
  TestClusterOptions& set_master_address(std::string a) {
    master_address = std::move(a);
    return *this;
  }
  TestClusterOptions& set_master_prefix(std::vector<std::string> p) {
    master_prefix = std::move(p);
    return *this;
  }
  TestClusterOptions& set_in_master_network(std::function<void(const std::function<void()>&)> f) {
    in_master_network = std::move(f);
    return *this;
  }
  TestClusterOptions& set_cli_timeout(std::chrono::milliseconds t) {
    cli_timeout = t;
    return *this;
  }
  TestClusterOptions& set_http_read_timeout(std::chrono::seconds t) {
    http_read_timeout = t;
    return *this;
  }
};

class TestCluster {
 public:
  // Isolates det-cli's token file in `dir` and starts a master on `dir`
  // (data in dir/master; configs may keep checkpoints under dir/checkpoints,
  // its --checkpoint-storage-root). Requires: `dir` outlives this object. A master that
  // writes no ports file within 30 s is a test failure (with its log).
  explicit TestCluster(const TempDir& dir, TestClusterOptions options = {});
  // SIGTERMs the agents, then the master, waiting up to 10 s for each.
  virtual ~TestCluster();
  TestCluster(const TestCluster&) = delete;
  TestCluster& operator=(const TestCluster&) = delete;

  // Starts a master on the data dir and `grpc_port` (0: the OS chooses) and
  // waits (up to 30 s) for its ports file; a fatal test failure if it never
  // comes. Each run logs to its own dir/master-N.{out,err}.
  void StartMaster(int grpc_port);
  // kill -9 of the master; waits up to 10 s for it to exit.
  void KillMaster();
  // Starts the master again on the same data dir and gRPC port (the agents
  // know that address).
  void RestartMaster() { StartMaster(grpc_port_); }

  // Starts agent `id` (work dir dir/agent-ID, logs dir/ID.{out,err}; an id
  // started before gets "-N" appended to those names) and returns its
  // process, valid as long as this object.
  Subprocess& StartAgent(const std::string& id, const AgentOptions& options = {});
  // kill -9 of every agent started as `id`; waits up to 10 s for each.
  void KillAgent(const std::string& id);

  // Runs det-cli -m MASTER ARGS (bounded by options' cli_timeout), with
  // `stdin_text` on its standard input (none when empty); returns its exit
  // status and fills `out`/`err` when not null.
  int Cli(std::vector<std::string> args, std::string* out = nullptr, std::string* err = nullptr,
          const std::string& stdin_text = "");

  // A REST call with the given headers (no token unless there); null when
  // the master did not answer.
  httplib::Result Http(const std::string& method, const std::string& path, const httplib::Headers& headers,
                       const std::string& body = "{}");
  // GET `path` as `determined`; returns the parsed body (null when no
  // answer, discarded when not JSON) and sets *status when not null.
  nlohmann::json Get(const std::string& path, int* status = nullptr);
  // POST (or PATCH when `method` is "PATCH") of a JSON `body` as
  // `determined`; like Get otherwise.
  nlohmann::json Send(const std::string& method, const std::string& path, const std::string& body,
                      int* status = nullptr);
  // A REST token of `determined` (logged in once; tokens live in the
  // database, so they survive a master restart). "" when login failed.
  const std::string& Token();

  // Agents the master reports as connected (0 when it does not answer).
  int ConnectedAgents();
  // Writes `yaml` to dir/NAME.yaml and creates an experiment of it with
  // `trial_so` through det-cli (a test failure when that fails); returns its
  // id, 0 on failure.
  int CreateExperiment(const std::string& yaml, const std::string& name,
                       const std::string& trial_so = kTestSyntheticTrial);
  // The experiment's state ("STATE_COMPLETED"...), "" when unknown.
  std::string ExperimentState(int id);
  // Polls until experiment `id` is in `state`; false after `timeout`.
  bool WaitForState(int id, const std::string& state, std::chrono::milliseconds timeout);
  // The experiment's trials (a JSON array, empty when unknown).
  nlohmann::json Trials(int experiment_id);
  // The trial's metrics of `group` (a JSON array, empty when unknown).
  nlohmann::json Metrics(int trial_id, const std::string& group);
  // The trial's REST object (GET /api/v1/trials/ID's "trial"; {} when unknown).
  nlohmann::json Trial(int64_t trial_id);
  // det-cli trial logs ID's output; a non-zero exit is a test failure (with
  // det-cli's stderr).
  std::string TrialLogs(int64_t trial_id);
  // Slots that hold an allocation.
  int BusySlots();
  // The agent whose slot runs `allocation_id` ("" if none).
  std::string AgentRunning(const std::string& allocation_id);

  // The current master's log (spdlog writes to stdout) and every agent's.
  std::string MasterLog() const;
  std::string AgentLogs() const;
  Subprocess& master() { return *master_; }
  // "ADDRESS:PORT" of the master's gRPC API; its REST port.
  const std::string& grpc_address() const { return grpc_; }
  int http_port() const { return http_port_; }
  std::string db_path() const { return dir_ / "master/det.db"; }
  const TempDir& dir() const { return dir_; }

 private:
  void InMasterNetwork(const std::function<void()>& fn);

  const TempDir& dir_;
  TestClusterOptions options_;
  std::unique_ptr<Subprocess> master_;
  std::vector<std::unique_ptr<Subprocess>> agents_;
  std::vector<std::string> agent_ids_;
  std::string grpc_;
  int grpc_port_ = 0;
  int http_port_ = 0;
  int master_runs_ = 0;
  std::string token_;
};

}  // namespace det::testing

#endif  // DET_TESTS_TEST_CLUSTER_H_
