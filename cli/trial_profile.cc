#include "cli/trial_profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/table.h"

namespace det::cli {
namespace {

namespace v1 = det::api::v1;

// The value of `name` in `r`, 0 when absent, non-finite or negative.
double Value(const v1::MetricsReport& r, const std::string& name) {
  auto it = r.metrics().find(name);
  if (it == r.metrics().end() || !std::isfinite(it->second) || it->second < 0) return 0;
  return it->second;
}

bool Has(const v1::MetricsReport& r, const std::string& name) {
  auto it = r.metrics().find(name);
  return it != r.metrics().end() && std::isfinite(it->second);
}

// "gpu3_utilization_ratio" -> 3 with `suffix` "_utilization_ratio"; -1 when
// the name is not of that form or the index is out of bounds.
int GpuIndex(const std::string& name, const std::string& suffix) {
  if (name.size() <= 3 + suffix.size() || name.compare(0, 3, "gpu") != 0) return -1;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return -1;
  const std::string digits = name.substr(3, name.size() - 3 - suffix.size());
  if (digits.empty() || digits.size() > 2 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
  int index = 0;
  if (!absl::SimpleAtoi(digits, &index) || index >= kMaxProfileGpus) return -1;
  return index;
}

struct GpuSums {
  int64_t util_samples = 0;
  double util_sum = 0;
  double mem_max = 0;
  bool seen = false;
};

void SummarizeSystem(const std::vector<v1::MetricsReport>& system, TrialProfile* p) {
  double cpu_sum = 0;
  int64_t cpu_samples = 0;
  std::map<int, GpuSums> gpus;
  for (const auto& r : system) {
    if (r.group() != "system") continue;
    ++p->system_samples;
    if (Has(r, "cpu_ratio")) {
      const double cpu = Value(r, "cpu_ratio");
      cpu_sum += cpu;
      ++cpu_samples;
      p->cpu_ratio_max = std::max(p->cpu_ratio_max, cpu);
    }
    p->rss_max_bytes = std::max(p->rss_max_bytes, Value(r, "rss_bytes"));
    for (const auto& [name, value] : r.metrics()) {
      if (int i = GpuIndex(name, "_utilization_ratio"); i >= 0) {
        GpuSums& g = gpus[i];
        g.seen = true;
        if (std::isfinite(value)) {
          g.util_sum += Value(r, name);
          ++g.util_samples;
        }
      } else if (int j = GpuIndex(name, "_memory_used_bytes"); j >= 0) {
        GpuSums& g = gpus[j];
        g.seen = true;
        g.mem_max = std::max(g.mem_max, Value(r, name));
      }
    }
  }
  if (cpu_samples > 0) p->cpu_ratio_mean = cpu_sum / static_cast<double>(cpu_samples);
  for (const auto& [index, g] : gpus) {
    GpuProfile out;
    out.index = index;
    out.samples = g.util_samples;
    out.utilization_mean = g.util_samples > 0 ? g.util_sum / static_cast<double>(g.util_samples) : 0;
    out.memory_used_max_bytes = g.mem_max;
    p->gpus.push_back(out);
  }
}

std::string Seconds(double s) { return absl::StrFormat("%.3f", s); }
std::string Percent(double share) { return absl::StrFormat("%.1f%%", 100 * share); }
std::string Rate(double r) { return absl::StrFormat("%.2f", r); }

std::string Bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", bytes) : absl::StrFormat("%.1f %s", bytes, units[u]);
}

}  // namespace

const std::vector<ProfilePhaseName>& ProfilePhaseNames() {
  static const std::vector<ProfilePhaseName> kPhases = {
      {"data_loader_s", "data loader"}, {"forward_s", "forward"},
      {"backward_s", "backward"},       {"allreduce_s", "all-reduce"},
      {"optimizer_step_s", "optimizer step"}, {"checkpoint_s", "checkpoint"},
      {"validation_s", "validation"},   {"runtime_s", "runtime"},
      {"unattributed_s", "unattributed"},  // last: in no phase (older trials: 0)
  };
  return kPhases;
}

TrialProfile SummarizeProfile(const std::vector<v1::MetricsReport>& profiling,
                              const std::vector<v1::MetricsReport>& system) {
  TrialProfile p;
  for (const auto& n : ProfilePhaseNames()) p.phases.push_back({n.metric, n.label, 0, 0});
  bool first = true;
  for (const auto& r : profiling) {
    if (r.group() != "profiling") continue;
    ++p.windows;
    p.first_batch = first ? r.total_batches() : std::min(p.first_batch, r.total_batches());
    p.last_batch = first ? r.total_batches() : std::max(p.last_batch, r.total_batches());
    first = false;
    p.wall_seconds += Value(r, "wall_s");
    p.batches += Value(r, "batches");
    p.samples += Value(r, "samples");
    for (auto& phase : p.phases) phase.seconds += Value(r, phase.metric);
  }
  for (auto& phase : p.phases) {
    if (phase.metric != "unattributed_s") p.phase_seconds += phase.seconds;
    phase.share = p.wall_seconds > 0 ? phase.seconds / p.wall_seconds : 0;
  }
  if (p.wall_seconds > 0) {
    p.batches_per_second = p.batches / p.wall_seconds;
    p.samples_per_second = p.samples / p.wall_seconds;
  }
  SummarizeSystem(system, &p);
  return p;
}

std::string FormatProfile(int64_t trial_id, const TrialProfile& p) {
  std::ostringstream out;
  out << "Trial " << trial_id << ": " << p.windows << " profiled window" << (p.windows == 1 ? "" : "s")
      << ", batches " << p.first_batch << " to " << p.last_batch << ", " << Seconds(p.wall_seconds)
      << " s of wall time\n\n";
  Table t({"PHASE", "SECONDS", "SHARE"});
  for (const auto& phase : p.phases) t.AddRow({phase.label, Seconds(phase.seconds), Percent(phase.share)});
  t.AddRow({"measured phases", Seconds(p.phase_seconds),
            Percent(p.wall_seconds > 0 ? p.phase_seconds / p.wall_seconds : 0)});
  t.AddRow({"wall", Seconds(p.wall_seconds), Percent(p.wall_seconds > 0 ? 1 : 0)});
  t.Print(out);
  out << "\nThroughput: " << Rate(p.batches_per_second) << " batches/s, " << Rate(p.samples_per_second)
      << " samples/s (" << absl::StrFormat("%.0f", p.batches) << " batches, " << absl::StrFormat("%.0f", p.samples)
      << " samples)\n";
  if (p.system_samples == 0) {
    out << "System: no samples\n";
    return out.str();
  }
  out << "System (" << p.system_samples << " sample" << (p.system_samples == 1 ? "" : "s") << "): CPU "
      << absl::StrFormat("%.2f", p.cpu_ratio_mean) << " mean, " << absl::StrFormat("%.2f", p.cpu_ratio_max)
      << " max (cores busy); RSS " << Bytes(p.rss_max_bytes) << " max\n";
  for (const auto& g : p.gpus) {
    out << "GPU " << g.index << ": " << Percent(g.utilization_mean) << " mean utilisation, "
        << Bytes(g.memory_used_max_bytes) << " max memory used\n";
  }
  return out.str();
}

nlohmann::json ProfileJson(int64_t trial_id, const TrialProfile& p) {
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& phase : p.phases) {
    phases.push_back({{"phase", phase.label}, {"metric", phase.metric}, {"seconds", phase.seconds},
                      {"share", phase.share}});
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : p.gpus) {
    gpus.push_back({{"index", g.index}, {"samples", g.samples}, {"utilization_ratio_mean", g.utilization_mean},
                    {"memory_used_bytes_max", g.memory_used_max_bytes}});
  }
  return {{"trial_id", trial_id},
          {"windows", p.windows},
          {"first_batch", p.first_batch},
          {"last_batch", p.last_batch},
          {"wall_seconds", p.wall_seconds},
          {"phase_seconds", p.phase_seconds},
          {"phases", phases},
          {"batches", p.batches},
          {"samples", p.samples},
          {"batches_per_second", p.batches_per_second},
          {"samples_per_second", p.samples_per_second},
          {"system",
           {{"samples", p.system_samples},
            {"cpu_ratio_mean", p.cpu_ratio_mean},
            {"cpu_ratio_max", p.cpu_ratio_max},
            {"rss_bytes_max", p.rss_max_bytes},
            {"gpus", gpus}}}};
}

}  // namespace det::cli
