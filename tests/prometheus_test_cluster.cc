#include "tests/prometheus_test_cluster.h"

#include <sys/stat.h>

#include <chrono>

#include "absl/strings/str_cat.h"

namespace det::testing {

const char kScrapeToken[] = "det-scrape-token-4f9c2a7e81b05d36";

using namespace std::chrono_literals;
using json = nlohmann::json;

void Prometheus::SetUp() { ASSERT_EQ(MissingPrometheusTools(), ""); }

void Prometheus::StartCluster(int slots, bool agent_metrics, const std::string& nvml_library) {
  token_file_ = dir_ / "metrics-token";
  WriteFile(token_file_, kScrapeToken);
  ASSERT_EQ(chmod(token_file_.c_str(), 0600), 0);
  cluster_ = std::make_unique<TestCluster>(
      dir_, TestClusterOptions().add_master_flags({"--metrics-token-file", token_file_}).set_cli_timeout(3min));
  if (::testing::Test::HasFatalFailure()) return;
  AgentOptions agent = AgentOptions().set_slots(slots);
  if (agent_metrics) agent.add_flags({"--metrics-listen", "127.0.0.1:0"});
  if (!nvml_library.empty()) agent.add_flags({"--nvml-library", nvml_library});
  cluster_->StartAgent("agent-one", agent);
  ASSERT_TRUE(PollUntil([&] { return cluster_->ConnectedAgents() == 1; }, 60s))
      << cluster_->MasterLog() << cluster_->AgentLogs();
  if (!agent_metrics) return;
  ASSERT_TRUE(PollUntil(
      [&] { return !(agent_address_ = AddressAfter(cluster_->AgentLogs(), "metrics listening on ")).empty(); }, 30s))
      << "the agent never logged 'metrics listening on HOST:PORT':\n"
      << cluster_->AgentLogs();
}

void Prometheus::StartPrometheus() {
  prom_ = std::make_unique<PrometheusServer>(
      dir_, std::vector<ScrapeTarget>{{"det-master", MasterAddress(), token_file_}, {"det-agent", agent_address_, ""}});
  const std::string error = prom_->Start(60s);
  ASSERT_EQ(error, "");
}

std::string Prometheus::MasterAddress() const { return absl::StrCat("127.0.0.1:", cluster_->http_port()); }

std::vector<std::string> Prometheus::Pools() {
  std::vector<std::string> pools;
  json r = cluster_->Get("/api/v1/resource-pools");
  if (!r.is_object()) return pools;
  for (const auto& p : r.value("resource_pools", json::array())) pools.push_back(p.value("name", ""));
  return pools;
}

std::string Prometheus::TrialStateLabel(const std::string& state) {
  json q = prom_->Query("det_trials");
  if (q.is_array()) {
    for (const auto& s : q) {
      const std::string v = s["metric"].value("state", "");
      if (v == state || v == "STATE_" + state) return v;
    }
  }
  return state;
}

}  // namespace det::testing
