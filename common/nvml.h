// NVIDIA's management library (NVML), loaded with dlopen when the machine
// has it: the per-device GPU utilisation and memory that the agent's
// /metrics (det_gpu_*) and the trial runtime's `system` metric group report.
// Nothing links against NVML and no NVML header is needed: a machine without
// a GPU driver gets no Nvml (Load() returns nullptr) and reports no GPU
// figures at all, never zeros.
#ifndef DET_COMMON_NVML_H_
#define DET_COMMON_NVML_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace det {

// One device's figures at one moment.
struct GpuSample {
  int index = 0;                    // NVML's device index (0-based)
  std::string uuid;                 // "GPU-..." (printable ASCII, at most 95 bytes)
  double utilization_ratio = 0;     // 0..1: share of the last sample period a kernel ran
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  // False when NVML refused that figure for this device (e.g. NOT_SUPPORTED
  // utilisation on a MIG-enabled GPU): the figure is then not reported.
  bool has_utilization = true;
  bool has_memory = true;
};

class Nvml {
 public:
  // At most this many devices are sampled (the first ones by index); a
  // machine that reports more gets a warning once and the first 64.
  static constexpr unsigned kMaxDevices = 64;

  // dlopen("libnvidia-ml.so.1"), else dlopen("libnvidia-ml.so"), resolves
  // the NVML entries and calls nvmlInit_v2. nullptr (and one log line at
  // info level saying why) when the library is absent, an entry is missing
  // or nvmlInit_v2 fails. Thread-safe.
  static std::unique_ptr<Nvml> Load();
  // The same with the library names tried in order (a name with a '/' is a
  // path). For tests and Load().
  static std::unique_ptr<Nvml> LoadFrom(const std::vector<std::string>& libraries);

  // Every device's figures (at most kMaxDevices), in index order. One
  // device's error leaves out only what it hides: no handle or UUID, the
  // device; no utilisation or memory, that figure (has_utilization,
  // has_memory); each logged once per device and call. Only the device
  // count failing (the driver unloaded) is an error: Unavailable naming the
  // call. Thread-safe (calls are serialised).
  absl::StatusOr<std::vector<GpuSample>> Sample();

  // The library it was loaded from (the name dlopen was given).
  const std::string& library() const { return library_; }

  // nvmlShutdown and dlclose.
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  struct Api;  // the resolved NVML entries (nvml.cc)

 private:
  Nvml(void* handle, std::string library, std::unique_ptr<Api> api);

  void* handle_;
  std::string library_;
  std::unique_ptr<Api> api_;
  std::mutex mu_;
  bool warned_count_ = false;
  std::set<std::string> warned_;  // "call device" already logged (at most 4 x kMaxDevices)
};

}  // namespace det

#endif  // DET_COMMON_NVML_H_
