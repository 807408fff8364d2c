// The agent's /metrics in the Prometheus text format (0.0.4): its slots,
// per-slot GPU figures from NVML, per-trial-process CPU and memory from
// /proc, its own process_* series and det_build_info. Every label is
// bounded: by the agent's slots (at most one series per device) and by the
// processes it runs (a process that exited has no series).
#ifndef DET_AGENT_METRICS_H_
#define DET_AGENT_METRICS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/nvml.h"
#include "common/proc_stats.h"

namespace det::agent {

// One running rank of a trial on this agent.
struct TrialProcessSample {
  int64_t trial_id = 0;
  std::string allocation_id;
  int rank = 0;
  ProcStats stats;  // of the rank's det-trial process
};

// Everything one scrape reports.
struct AgentMetricsInput {
  std::string agent_id;
  std::string version;  // det_build_info's
  int slots = 0;
  int slots_used = 0;
  // Unset: no NVML (or its sample failed), and no det_gpu_* family at all.
  std::optional<std::vector<GpuSample>> gpus;
  std::vector<TrialProcessSample> trial_processes;
  // The agent's own process; unset: no process_* series.
  std::optional<ProcStats> self;
};

// The exposition text of `input` (prometheus-cpp's TextSerializer):
//   det_agent_slots{agent}, det_agent_slots_used{agent} gauges;
//   det_gpu_utilization_ratio, det_gpu_memory_used_bytes,
//     det_gpu_memory_total_bytes{agent,slot,uuid} gauges (slot = NVML index);
//   det_trial_process_cpu_seconds_total{agent,trial,allocation,rank} counter,
//   det_trial_process_resident_memory_bytes{...} gauge;
//   process_cpu_seconds_total, process_resident_memory_bytes,
//     process_open_fds, process_max_fds, process_start_time_seconds;
//   det_build_info{version} = 1.
// A family with no series is left out. Thread-safe (pure).
std::string RenderAgentMetrics(const AgentMetricsInput& input);

}  // namespace det::agent

#endif  // DET_AGENT_METRICS_H_
