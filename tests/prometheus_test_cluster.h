// The fixture of the Prometheus tests (prometheus_test.cc,
// prometheus_cardinality_test.cc): a TestCluster whose master takes a
// scrape token (--metrics-token-file) and whose one agent serves its own
// /metrics (--metrics-listen 127.0.0.1:0), and a real Prometheus scraping
// both. Prometheus and promtool are required: SetUp fails without them.
#ifndef DET_TESTS_PROMETHEUS_TEST_CLUSTER_H_
#define DET_TESTS_PROMETHEUS_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/prometheus_harness.h"
#include "tests/test_cluster.h"

namespace det::testing {

// The scrape token the master is given (in a 0600 file).
extern const char kScrapeToken[];

class Prometheus : public ::testing::Test {
 protected:
  // A fatal failure when /usr/bin/prometheus or /usr/bin/promtool is missing.
  void SetUp() override;

  // Writes the token file, starts the master with --metrics-token-file and
  // agent "agent-one" with `slots` slots (and, with `agent_metrics`,
  // --metrics-listen 127.0.0.1:0), waits (bounded) until the agent is
  // connected and has logged "metrics listening on HOST:PORT"
  // (agent_address_). `nvml_library` non-empty: the agent's
  // --nvml-library (e.g. the stub of tests/nvml_stub). Fatal failures.
  void StartCluster(int slots, bool agent_metrics = true, const std::string& nvml_library = "");
  // Starts Prometheus scraping the master (job det-master, with the token
  // file) and the agent (job det-agent); a fatal failure unless both are up
  // within 60 s.
  void StartPrometheus();
  // The master's REST address (HOST:PORT), where it serves /metrics.
  std::string MasterAddress() const;
  // The master's resource pools (GET /api/v1/resource-pools).
  std::vector<std::string> Pools();
  // The label value of trial state `state` (e.g. "COMPLETED") in
  // det_trials as Prometheus has it: `state` or "STATE_" + `state`,
  // whichever the master exposes; `state` when neither is there.
  std::string TrialStateLabel(const std::string& state);

  TempDir dir_;
  std::string token_file_;
  std::unique_ptr<TestCluster> cluster_;
  std::string agent_address_;
  std::unique_ptr<PrometheusServer> prom_;  // destroyed first
};

}  // namespace det::testing

#endif  // DET_TESTS_PROMETHEUS_TEST_CLUSTER_H_
