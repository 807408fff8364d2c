#include "agent/metrics.h"

#include <deque>
#include <sstream>
#include <utility>

#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace det::agent {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

class Families {
 public:
  MetricFamily& Add(std::string name, std::string help, MetricType type) {
    families_.push_back(MetricFamily{std::move(name), std::move(help), type, {}});
    return families_.back();
  }
  static void Gauge(MetricFamily& f, Labels labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    m.gauge.value = value;
    f.metric.push_back(std::move(m));
  }
  static void Counter(MetricFamily& f, Labels labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    m.counter.value = value;
    f.metric.push_back(std::move(m));
  }
  // The families with at least one series.
  std::vector<MetricFamily> Take() {
    std::vector<MetricFamily> out;
    for (MetricFamily& f : families_) {
      if (!f.metric.empty()) out.push_back(std::move(f));
    }
    return out;
  }

 private:
  std::deque<MetricFamily> families_;  // Add's references stay valid
};

void AddGpus(const AgentMetricsInput& in, Families& fams) {
  if (!in.gpus) return;
  MetricFamily& util = fams.Add("det_gpu_utilization_ratio",
                                "Share of the last NVML sample period a kernel ran on the GPU (0..1)",
                                MetricType::Gauge);
  MetricFamily& used = fams.Add("det_gpu_memory_used_bytes", "GPU memory in use (NVML)", MetricType::Gauge);
  MetricFamily& total = fams.Add("det_gpu_memory_total_bytes", "GPU memory in all (NVML)", MetricType::Gauge);
  for (const GpuSample& g : *in.gpus) {
    Labels labels{{"agent", in.agent_id}, {"slot", std::to_string(g.index)}, {"uuid", g.uuid}};
    // A figure NVML refused for this device (GpuSample::has_*) has no series.
    if (g.has_utilization) Families::Gauge(util, labels, g.utilization_ratio);
    if (g.has_memory) Families::Gauge(used, labels, static_cast<double>(g.memory_used_bytes));
    if (g.has_memory) Families::Gauge(total, labels, static_cast<double>(g.memory_total_bytes));
  }
}

void AddTrialProcesses(const AgentMetricsInput& in, Families& fams) {
  MetricFamily& cpu = fams.Add("det_trial_process_cpu_seconds_total",
                               "CPU time (user + system) of a trial rank's det-trial process on this agent",
                               MetricType::Counter);
  MetricFamily& rss = fams.Add("det_trial_process_resident_memory_bytes",
                               "Resident memory of a trial rank's det-trial process on this agent",
                               MetricType::Gauge);
  for (const TrialProcessSample& p : in.trial_processes) {
    Labels labels{{"agent", in.agent_id},
                  {"trial", std::to_string(p.trial_id)},
                  {"allocation", p.allocation_id},
                  {"rank", std::to_string(p.rank)}};
    Families::Counter(cpu, labels, p.stats.cpu_seconds);
    Families::Gauge(rss, labels, static_cast<double>(p.stats.rss_bytes));
  }
}

void AddSelf(const ProcStats& self, Families& fams) {
  Families::Counter(fams.Add("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
                             MetricType::Counter),
                    {}, self.cpu_seconds);
  Families::Gauge(fams.Add("process_resident_memory_bytes", "Resident memory size in bytes.", MetricType::Gauge),
                  {}, static_cast<double>(self.rss_bytes));
  MetricFamily& open = fams.Add("process_open_fds", "Number of open file descriptors.", MetricType::Gauge);
  if (self.open_fds >= 0) Families::Gauge(open, {}, static_cast<double>(self.open_fds));
  MetricFamily& max = fams.Add("process_max_fds", "Maximum number of open file descriptors.", MetricType::Gauge);
  if (self.max_fds >= 0) Families::Gauge(max, {}, static_cast<double>(self.max_fds));
  Families::Gauge(fams.Add("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
                           MetricType::Gauge),
                  {}, self.start_time_seconds);
}

}  // namespace

std::string RenderAgentMetrics(const AgentMetricsInput& in) {
  Families fams;
  Families::Gauge(fams.Add("det_agent_slots", "Slots this agent offers", MetricType::Gauge),
                  {{"agent", in.agent_id}}, in.slots);
  Families::Gauge(fams.Add("det_agent_slots_used", "Slots of this agent that hold an allocation", MetricType::Gauge),
                  {{"agent", in.agent_id}}, in.slots_used);
  AddGpus(in, fams);
  AddTrialProcesses(in, fams);
  if (in.self) AddSelf(*in.self, fams);
  Families::Gauge(fams.Add("det_build_info", "det-cpp's version (always 1)", MetricType::Gauge),
                  {{"version", in.version}}, 1);
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, fams.Take());
  return out.str();
}

}  // namespace det::agent
