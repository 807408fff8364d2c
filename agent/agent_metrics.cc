// det::agent::Agent, part 4 of 4: what the agent's /metrics reports
// (agent/metrics.h renders it).
#include "agent/agent_metrics.h"

#include <unistd.h>

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace det::agent {

Agent::WorkView Agent::ViewWork() {
  absl::MutexLock lock(&mu_);
  WorkView view;
  view.slots = static_cast<int>(options_.devices.size());
  view.slots_used = static_cast<int>(busy_devices_.size());
  for (const auto& [id, alloc] : allocations_) {
    for (const auto& [rank, proc] : alloc->procs) {
      if (proc.process == nullptr || proc.pid <= 0 || proc.done) continue;
      view.ranks.push_back(RunningRank{alloc->trial_id, id, rank, proc.pid});
    }
  }
  return view;
}

std::vector<TrialProcessSample> SampleTrialProcesses(const std::vector<Agent::RunningRank>& ranks) {
  std::vector<TrialProcessSample> samples;
  for (const Agent::RunningRank& r : ranks) {
    // A rank that exited since the view was taken has no series: gone, or a
    // zombie the reaper has not waited for yet (its RSS reads 0).
    absl::StatusOr<ProcStats> stats = ReadProcStats(static_cast<pid_t>(r.pid));
    if (stats.ok() && !stats->exited()) {
      samples.push_back(TrialProcessSample{r.trial_id, r.allocation_id, r.rank, *stats});
    }
  }
  return samples;
}

AgentMetricsInput CollectAgentMetrics(Agent& agent, const std::string& agent_id, Nvml* nvml) {
  AgentMetricsInput in;
  in.agent_id = agent_id;
  in.version = kDetVersion;
  Agent::WorkView view = agent.ViewWork();
  in.slots = view.slots;
  in.slots_used = view.slots_used;
  in.trial_processes = SampleTrialProcesses(view.ranks);
  if (nvml != nullptr) {
    // Warned once per run of failures, not at every scrape.
    static std::atomic<bool> warned{false};
    absl::StatusOr<std::vector<GpuSample>> gpus = nvml->Sample();
    if (gpus.ok()) {
      in.gpus = std::move(*gpus);
      warned = false;
    } else if (!warned.exchange(true)) {
      spdlog::warn("NVML sample failed (no GPU series until it works again): {}", gpus.status().ToString());
    }
  }
  absl::StatusOr<ProcStats> self = ReadProcStats(getpid());
  if (self.ok()) in.self = *self;
  return in;
}

absl::StatusOr<AgentMetricsEndpoint> StartAgentMetrics(const AgentMetricsFlags& flags, Agent& agent,
                                                       const std::string& agent_id) {
  AgentMetricsEndpoint endpoint;
  if (flags.listen.empty()) {
    for (const auto& [key, value] : {std::pair{"metrics-token-file", flags.token_file},
                                     std::pair{"nvml-library", flags.nvml_library}}) {
      if (!value.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(key, " is set but metrics-listen is not: set metrics-listen "
                                                            "ADDR:PORT to serve /metrics, or drop ", key));
      }
    }
    return endpoint;
  }
  if (flags.nvml_library.size() > 4096) {
    return absl::InvalidArgumentError("nvml-library is longer than 4096 bytes: name the library's path");
  }
  DET_ASSIGN_OR_RETURN(MetricsListenAddress address, ParseMetricsListen(flags.listen));
  std::string token;
  if (!flags.token_file.empty()) {
    DET_ASSIGN_OR_RETURN(token, ReadMetricsToken(flags.token_file));
  }
  if (flags.nvml_library.empty()) {
    endpoint.nvml = Nvml::Load();
  } else if (flags.nvml_library != "none") {
    endpoint.nvml = Nvml::LoadFrom({flags.nvml_library});
  }
  if (endpoint.nvml != nullptr) spdlog::info("NVML loaded from {}: /metrics has det_gpu_* series", endpoint.nvml->library());
  Nvml* nvml = endpoint.nvml.get();
  MetricsServer::Render render = [&agent, agent_id, nvml] {
    return RenderAgentMetrics(CollectAgentMetrics(agent, agent_id, nvml));
  };
  DET_ASSIGN_OR_RETURN(endpoint.server, MetricsServer::Start(address, std::move(token), std::move(render)));
  return endpoint;
}

}  // namespace det::agent
