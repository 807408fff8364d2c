#include "tests/test_cluster.h"

#include <signal.h>

#include <utility>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace det::testing {

const char kTestBinDir[] = DET_BIN_DIR;
const char kTestSyntheticTrial[] = DET_TRIALS_DIR "/synthetic_trial.so";

using json = nlohmann::json;

TestCluster::TestCluster(const TempDir& dir, TestClusterOptions options) : dir_(dir), options_(std::move(options)) {
  IsolateCliAuth(dir.path());
  StartMaster(0);
}

TestCluster::~TestCluster() {
  for (auto& a : agents_) a->Signal(SIGTERM);
  for (auto& a : agents_) a->Wait(std::chrono::seconds(10));
  if (master_) {
    master_->Signal(SIGTERM);
    master_->Wait(std::chrono::seconds(10));
  }
}

void TestCluster::StartMaster(int grpc_port) {
  ++master_runs_;
  const std::string ports = dir_ / absl::StrCat("ports-", master_runs_, ".json");
  std::vector<std::string> argv = options_.master_prefix;
  for (const std::string& a : {std::string(kTestBinDir) + "/det-master", std::string("--data-dir"), dir_ / "master",
                               std::string("--grpc-port"), std::to_string(grpc_port), std::string("--http-port"),
                               std::string("0"), std::string("--ports-file"), ports}) {
    argv.push_back(a);
  }
  // The tests' configs keep checkpoints under dir/checkpoints.
  argv.insert(argv.end(), {std::string("--checkpoint-storage-root"), dir_ / "checkpoints"});
  // No health drain on SIGTERM (a test that wants one gives its own flag: the last wins).
  argv.insert(argv.end(), {std::string("--shutdown-drain-ms"), std::string("0")});
  argv.insert(argv.end(), options_.master_flags.begin(), options_.master_flags.end());
  master_ = std::make_unique<Subprocess>(argv, dir_ / absl::StrCat("master-", master_runs_, ".out"),
                                         dir_ / absl::StrCat("master-", master_runs_, ".err"));
  ASSERT_TRUE(PollUntil([&] { return !ReadFile(ports).empty(); }, std::chrono::seconds(30))) << MasterLog();
  auto j = json::parse(ReadFile(ports), nullptr, false);
  ASSERT_TRUE(j.is_object()) << "bad ports file: " << ReadFile(ports);
  grpc_port_ = j.value("grpc", 0);
  grpc_ = absl::StrCat(options_.master_address, ":", grpc_port_);
  http_port_ = j.value("http", 0);
}

void TestCluster::KillMaster() {
  master_->Signal(SIGKILL);
  master_->Wait(std::chrono::seconds(10));
}

Subprocess& TestCluster::StartAgent(const std::string& id, const AgentOptions& options) {
  size_t runs = 0;
  for (const auto& a : agent_ids_) runs += a == id ? 1 : 0;
  const std::string name = runs == 0 ? id : absl::StrCat(id, "-", runs);
  std::vector<std::string> argv = options.prefix;
  for (const std::string& a : {std::string(kTestBinDir) + "/det-agent", std::string("--master"), grpc_,
                               std::string("--id"), id, std::string("--slots"), std::to_string(options.slots),
                               std::string("--work-dir"), dir_ / ("agent-" + name)}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), options.flags.begin(), options.flags.end());
  agents_.push_back(std::make_unique<Subprocess>(argv, dir_ / (name + ".out"), dir_ / (name + ".err")));
  agent_ids_.push_back(id);
  return *agents_.back();
}

void TestCluster::KillAgent(const std::string& id) {
  for (size_t i = 0; i < agents_.size(); ++i) {
    if (agent_ids_[i] == id) {
      agents_[i]->Signal(SIGKILL);
      agents_[i]->Wait(std::chrono::seconds(10));
    }
  }
}

int TestCluster::Cli(std::vector<std::string> args, std::string* out, std::string* err,
                     const std::string& stdin_text) {
  std::vector<std::string> argv = options_.master_prefix;
  if (stdin_text.empty()) {
    for (const std::string& a : {std::string(kTestBinDir) + "/det-cli", std::string("-m"), grpc_}) argv.push_back(a);
    argv.insert(argv.end(), args.begin(), args.end());
  } else {
    // Through sh, to pipe `stdin_text` in (RunProcess gives /dev/null).
    std::string cmd = absl::StrCat("printf '%s' '", stdin_text, "' | '", kTestBinDir, "/det-cli' -m ", grpc_);
    for (const auto& a : args) absl::StrAppend(&cmd, " '", a, "'");
    for (const std::string& a : {std::string("/bin/sh"), std::string("-c"), cmd}) argv.push_back(a);
  }
  std::string o, e;
  int rc = RunProcess(argv, &o, &e, options_.cli_timeout);
  if (out) *out = o;
  if (err) *err = e;
  return rc;
}

void TestCluster::InMasterNetwork(const std::function<void()>& fn) {
  if (options_.in_master_network) {
    options_.in_master_network(fn);
  } else {
    fn();
  }
}

httplib::Result TestCluster::Http(const std::string& method, const std::string& path,
                                  const httplib::Headers& headers, const std::string& body) {
  // Unknown until the call ran (it may not, where the network is not reachable).
  httplib::Result result(nullptr, httplib::Error::Unknown, httplib::Headers{});
  InMasterNetwork([&] {
    httplib::Client client(options_.master_address, http_port_);
    client.set_read_timeout(options_.http_read_timeout);
    if (method == "GET") {
      result = client.Get(path.c_str(), headers);
    } else if (method == "POST") {
      result = client.Post(path.c_str(), headers, body, "application/json");
    } else if (method == "PATCH") {
      result = client.Patch(path.c_str(), headers, body, "application/json");
    } else if (method == "PUT") {
      result = client.Put(path.c_str(), headers, body, "application/json");
    } else {
      result = client.Delete(path.c_str(), headers, body, "application/json");
    }
  });
  return result;
}

const std::string& TestCluster::Token() {
  if (token_.empty()) {
    json body = {{"username", "determined"}, {"password", ""}};
    auto res = Http("POST", "/api/v1/auth/login", {}, body.dump());
    if (res && res->status == 200) {
      auto j = json::parse(res->body, nullptr, false);
      if (j.is_object() && j.contains("token") && j["token"].is_string()) token_ = j["token"].get<std::string>();
    }
  }
  return token_;
}

json TestCluster::Get(const std::string& path, int* status) {
  auto res = Http("GET", path, {{"Authorization", "Bearer " + Token()}});
  if (!res) return nullptr;
  if (status) *status = res->status;
  return json::parse(res->body, nullptr, false);
}

json TestCluster::Send(const std::string& method, const std::string& path, const std::string& body, int* status) {
  auto res = Http(method == "PATCH" ? "PATCH" : "POST", path, {{"Authorization", "Bearer " + Token()}}, body);
  if (!res) return nullptr;
  if (status) *status = res->status;
  return json::parse(res->body, nullptr, false);
}

int TestCluster::ConnectedAgents() {
  auto agents = Get("/api/v1/agents");
  int n = 0;
  if (agents.is_object() && agents.contains("agents")) {
    for (const auto& a : agents["agents"]) n += a.value("connected", false) ? 1 : 0;
  }
  return n;
}

int TestCluster::CreateExperiment(const std::string& yaml, const std::string& name, const std::string& trial_so) {
  std::string path = dir_ / (name + ".yaml");
  WriteFile(path, yaml);
  std::string out, err;
  int rc = Cli({"experiment", "create", path, trial_so}, &out, &err);
  EXPECT_EQ(rc, 0) << out << err;
  auto pos = out.find("Created experiment ");
  if (pos == std::string::npos) return 0;
  return std::atoi(out.c_str() + pos + 19);
}

std::string TestCluster::ExperimentState(int id) {
  auto e = Get(absl::StrCat("/api/v1/experiments/", id));
  if (!e.is_object() || !e.contains("experiment")) return "";
  return e["experiment"].value("state", "");
}

bool TestCluster::WaitForState(int id, const std::string& state, std::chrono::milliseconds timeout) {
  return PollUntil([&] { return ExperimentState(id) == state; }, timeout);
}

json TestCluster::Trials(int experiment_id) {
  auto t = Get(absl::StrCat("/api/v1/experiments/", experiment_id, "/trials"));
  if (!t.is_object() || !t.contains("trials")) return json::array();
  return t["trials"];
}

json TestCluster::Metrics(int trial_id, const std::string& group) {
  auto m = Get(absl::StrCat("/api/v1/trials/", trial_id, "/metrics?group=", group));
  if (!m.is_object() || !m.contains("metrics")) return json::array();
  return m["metrics"];
}

json TestCluster::Trial(int64_t trial_id) {
  return Get(absl::StrCat("/api/v1/trials/", trial_id)).value("trial", json::object());
}

std::string TestCluster::TrialLogs(int64_t trial_id) {
  std::string out, err;
  EXPECT_EQ(Cli({"trial", "logs", std::to_string(trial_id)}, &out, &err), 0) << err;
  return out;
}

int TestCluster::BusySlots() {
  auto s = Get("/api/v1/slots");
  int n = 0;
  if (s.is_object() && s.contains("slots")) {
    for (const auto& slot : s["slots"]) n += slot.value("allocation_id", "").empty() ? 0 : 1;
  }
  return n;
}

std::string TestCluster::AgentRunning(const std::string& allocation_id) {
  auto agents = Get("/api/v1/agents");
  if (!agents.is_object() || !agents.contains("agents")) return "";
  for (const auto& a : agents["agents"]) {
    for (const auto& id : a.value("allocation_ids", json::array())) {
      if (id == allocation_id) return a["id"];
    }
  }
  return "";
}

std::string TestCluster::MasterLog() const { return master_ ? master_->Stdout() + master_->Stderr() : ""; }

std::string TestCluster::AgentLogs() const {
  std::string out;
  for (size_t i = 0; i < agents_.size(); ++i) {
    out += "--- agent " + agent_ids_[i] + "\n" + agents_[i]->Stdout() + agents_[i]->Stderr();
  }
  return out;
}

}  // namespace det::testing
