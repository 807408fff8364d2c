#include "trial_runtime/runtime/system_sampler.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/proc_stats.h"

namespace det::runtime {
namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool IsUuid(const std::string& s) {
  if (s.size() <= 4 || s.size() > kMaxGpuUuidBytes) return false;
  if (s.compare(0, 4, "GPU-") != 0 && s.compare(0, 4, "MIG-") != 0) return false;
  for (char c : s) {
    if (c <= 0x20 || c >= 0x7f || c == ',') return false;
  }
  return true;
}

bool IsIndex(const std::string& s) {
  if (s.empty() || s.size() > 3) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

absl::StatusOr<TrialGpus> FromDetGpuUuids(const std::string& value) {
  TrialGpus gpus;
  gpus.all = false;
  if (value.empty()) return gpus;  // a CPU slot: no GPU
  const std::vector<std::string> entries = absl::StrSplit(value, ',');
  if (entries.size() > kMaxTrialGpus) {
    return absl::InvalidArgumentError(absl::StrCat("DET_GPU_UUIDS lists ", entries.size(), " GPUs; at most ",
                                                   kMaxTrialGpus, " (it names the allocation's GPUs: det-agent "
                                                   "sets it; unset it to sample every GPU)"));
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    bool printable = !entries[i].empty() && entries[i].size() <= kMaxGpuUuidBytes;
    for (char c : entries[i]) printable = printable && c > 0x20 && c < 0x7f;
    if (!printable) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DET_GPU_UUIDS entry ", i, " is not a GPU UUID (1 to ", kMaxGpuUuidBytes,
          " printable bytes, no space; the list is comma-separated with no empty entry): it names the "
          "allocation's GPUs (det-agent sets it); unset it to sample every GPU"));
    }
    gpus.ids.push_back(entries[i]);
  }
  return gpus;
}

TrialGpus FromCudaVisibleDevices(const std::string& value) {
  TrialGpus gpus;
  gpus.all = false;
  gpus.uuid_prefix = true;
  // CUDA reads the list up to its first invalid entry ("-1" hides every GPU).
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    const std::string e(absl::StripAsciiWhitespace(entry));
    if (gpus.ids.size() >= kMaxTrialGpus || (!IsIndex(e) && !IsUuid(e))) break;
    gpus.ids.push_back(e);
  }
  return gpus;
}

bool Matches(const TrialGpus& gpus, const std::string& id, const GpuSample& g) {
  if (IsIndex(id)) return std::atoi(id.c_str()) == g.index;
  if (gpus.uuid_prefix) return g.uuid.compare(0, id.size(), id) == 0;
  return g.uuid == id;
}

void AddKeys(size_t index, const GpuSample& g, std::map<std::string, double>* row) {
  if (g.has_utilization) (*row)[absl::StrCat("gpu", index, "_utilization_ratio")] = g.utilization_ratio;
  if (g.has_memory) (*row)[absl::StrCat("gpu", index, "_memory_used_bytes")] = static_cast<double>(g.memory_used_bytes);
}

class ProcessSystemSampler final : public SystemSampler {
 public:
  explicit ProcessSystemSampler(TrialGpus gpus) : gpus_(std::move(gpus)) {
    if (gpus_.all || !gpus_.ids.empty()) nvml_ = Nvml::Load();  // no GPU of its own: no NVML
  }

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
      if (auto gpus = nvml_->Sample(); gpus.ok()) row.merge(TrialGpuKeys(gpus_, *gpus));
    }
    return row;
  }

 private:
  TrialGpus gpus_;
  std::unique_ptr<Nvml> nvml_;
  double last_wall_ = 0;
  double last_cpu_ = 0;
};

}  // namespace

absl::StatusOr<TrialGpus> SelectTrialGpus(const char* det_gpu_uuids, const char* cuda_visible_devices) {
  if (det_gpu_uuids != nullptr) {
    const std::string value(det_gpu_uuids);
    if (value.size() > kMaxTrialGpus * (kMaxGpuUuidBytes + 1)) {
      return absl::InvalidArgumentError(absl::StrCat("DET_GPU_UUIDS is ", value.size(), " bytes; at most ",
                                                     kMaxTrialGpus * (kMaxGpuUuidBytes + 1),
                                                     " (it names the allocation's GPUs: det-agent sets it; unset "
                                                     "it to sample every GPU)"));
    }
    return FromDetGpuUuids(value);
  }
  if (cuda_visible_devices != nullptr) return FromCudaVisibleDevices(cuda_visible_devices);
  return TrialGpus();
}

std::map<std::string, double> TrialGpuKeys(const TrialGpus& gpus, const std::vector<GpuSample>& samples) {
  std::map<std::string, double> row;
  if (gpus.all) {
    for (const GpuSample& g : samples) AddKeys(static_cast<size_t>(g.index), g, &row);
    return row;
  }
  for (size_t local = 0; local < gpus.ids.size(); ++local) {
    for (const GpuSample& g : samples) {
      if (!Matches(gpus, gpus.ids[local], g)) continue;
      AddKeys(local, g, &row);
      break;
    }
  }
  return row;
}

absl::StatusOr<std::unique_ptr<SystemSampler>> MakeProcessSystemSampler() {
  absl::StatusOr<TrialGpus> gpus = SelectTrialGpus(std::getenv("DET_GPU_UUIDS"), std::getenv("CUDA_VISIBLE_DEVICES"));
  if (!gpus.ok()) return gpus.status();
  return std::unique_ptr<SystemSampler>(std::make_unique<ProcessSystemSampler>(*std::move(gpus)));
}

}  // namespace det::runtime
