#include "trial_runtime/runtime/system_sampler.h"

#include <unistd.h>

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/nvml.h"
#include "common/proc_stats.h"

namespace det::runtime {
namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class ProcessSystemSampler final : public SystemSampler {
 public:
  ProcessSystemSampler() : nvml_(Nvml::Load()) {}

  std::map<std::string, double> Sample() override {
    std::map<std::string, double> row;
    const double now = WallSeconds();
    if (auto stats = ReadProcStats(getpid()); stats.ok()) {
      // The first sample: the average since the process started.
      const double since = last_wall_ > 0 ? last_wall_ : stats->start_time_seconds;
      const double cpu_before = last_wall_ > 0 ? last_cpu_ : 0;
      if (now > since) row["cpu_ratio"] = (stats->cpu_seconds - cpu_before) / (now - since);
      row["rss_bytes"] = static_cast<double>(stats->rss_bytes);
      last_wall_ = now;
      last_cpu_ = stats->cpu_seconds;
    }
    if (nvml_ != nullptr) {
      if (auto gpus = nvml_->Sample(); gpus.ok()) {
        for (const GpuSample& g : *gpus) {
          row[absl::StrCat("gpu", g.index, "_utilization_ratio")] = g.utilization_ratio;
          row[absl::StrCat("gpu", g.index, "_memory_used_bytes")] = static_cast<double>(g.memory_used_bytes);
        }
      }
    }
    return row;
  }

 private:
  std::unique_ptr<Nvml> nvml_;
  double last_wall_ = 0;
  double last_cpu_ = 0;
};

}  // namespace

std::unique_ptr<SystemSampler> MakeProcessSystemSampler() { return std::make_unique<ProcessSystemSampler>(); }

}  // namespace det::runtime
