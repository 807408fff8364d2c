// The `system` metric group of the trial profiler (profiler.h): this
// process's CPU use and resident memory from /proc (common/proc_stats.h) and,
// when NVML loads (common/nvml.h), the utilisation and memory of the trial's
// own GPUs (never another allocation's: NVML sees every GPU of the node).
#ifndef DET_TRIAL_RUNTIME_RUNTIME_SYSTEM_SAMPLER_H_
#define DET_TRIAL_RUNTIME_RUNTIME_SYSTEM_SAMPLER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/nvml.h"
#include "trial_runtime/runtime/profiler.h"

namespace det::runtime {

// The GPUs of this trial among those NVML reports, in the trial's order
// (its local device index: gpu0 is the first).
struct TrialGpus {
  bool all = true;  // no selection: every device NVML reports, keyed by NVML's index
  // Each an NVML device index ("3") or a UUID ("GPU-...", "MIG-...").
  std::vector<std::string> ids;
  bool uuid_prefix = false;  // a UUID entry matches a UUID it begins (CUDA_VISIBLE_DEVICES' rule)
};
inline constexpr size_t kMaxTrialGpus = 64;       // entries read (Nvml::kMaxDevices)
inline constexpr size_t kMaxGpuUuidBytes = 95;    // NVML_DEVICE_UUID_V2_BUFFER_SIZE - 1

// From the environment's values (nullptr: unset):
// - DET_GPU_UUIDS (det-agent sets it for every process it starts: the
//   allocation's GPU UUIDs, comma-separated, in its device order; empty for
//   a CPU slot): exactly those. At most kMaxTrialGpus entries of 1 to
//   kMaxGpuUuidBytes printable bytes (no space or comma), else
//   INVALID_ARGUMENT naming DET_GPU_UUIDS, the entry and how to fix it.
// - else CUDA_VISIBLE_DEVICES (det-trial --local): as CUDA reads it, device
//   indexes or UUIDs (or UUID prefixes), up to the first entry that is
//   neither (an empty value or "-1": no GPU), at most kMaxTrialGpus.
// - else every device NVML reports.
absl::StatusOr<TrialGpus> SelectTrialGpus(const char* det_gpu_uuids, const char* cuda_visible_devices);

// The row keys gpu<I>_utilization_ratio and gpu<I>_memory_used_bytes of the
// selected devices among `samples`, I the trial's local index (NVML's index
// when `gpus.all`). A selected device NVML does not report, or a figure it
// refused, has no key.
std::map<std::string, double> TrialGpuKeys(const TrialGpus& gpus, const std::vector<GpuSample>& samples);

// Rows of keys cpu_ratio (CPU seconds per wall second since the previous
// sample, or since the process started for the first; above 1 with several
// threads busy), rss_bytes and TrialGpuKeys (no gpu keys without NVML), the
// GPUs selected by SelectTrialGpus from this process's environment (its
// error when that is invalid). A figure that cannot be read is left out.
absl::StatusOr<std::unique_ptr<SystemSampler>> MakeProcessSystemSampler();

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_SYSTEM_SAMPLER_H_
