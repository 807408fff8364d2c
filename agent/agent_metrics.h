// The agent's /metrics figures at one scrape: its work (Agent::ViewWork),
// each running rank's process stats from /proc, NVML's per-device sample
// and its own process stats.
#ifndef DET_AGENT_AGENT_METRICS_H_
#define DET_AGENT_AGENT_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/agent.h"
#include "agent/metrics.h"
#include "agent/metrics_server.h"
#include "common/nvml.h"

namespace det::agent {

// The /proc stats of each running rank's process. A rank whose process has
// exited is left out: gone, or exited and not yet reaped (a zombie, state Z
// or X, whose RSS reads 0).
std::vector<TrialProcessSample> SampleTrialProcesses(const std::vector<Agent::RunningRank>& ranks);

// `nvml` null (no NVML on this node): no GPU figures. A rank whose process
// cannot be read (it just exited) is left out. Thread-safe.
AgentMetricsInput CollectAgentMetrics(Agent& agent, const std::string& agent_id, Nvml* nvml);

// det-agent's metrics flags (keys of its TOML config).
struct AgentMetricsFlags {
  std::string listen;        // metrics-listen ADDR:PORT; empty: no /metrics
  std::string token_file;    // metrics-token-file
  std::string nvml_library;  // nvml-library: empty: the loader's libnvidia-ml.so.1, .so; "none": no NVML
};

// The running /metrics of an agent; members end in reverse order (the
// server before NVML).
struct AgentMetricsEndpoint {
  std::unique_ptr<Nvml> nvml;
  std::unique_ptr<MetricsServer> server;
};

// Checks the flags (InvalidArgument naming the key and the fix: a bad
// metrics-listen, an unsafe metrics-token-file, metrics-token-file or
// nvml-library without metrics-listen, an nvml-library longer than 4096
// bytes), loads NVML and starts the listener (FailedPrecondition for a
// non-loopback address without a token; Unavailable when it cannot bind).
// `agent` must outlive the endpoint. flags.listen empty: an empty endpoint.
absl::StatusOr<AgentMetricsEndpoint> StartAgentMetrics(const AgentMetricsFlags& flags, Agent& agent,
                                                       const std::string& agent_id);

}  // namespace det::agent

#endif  // DET_AGENT_AGENT_METRICS_H_
