#include "common/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace det {
namespace {

// NVML's types, as its documentation (nvml.h, API version 11+) lays them
// out. nvmlReturn_t is a C enum: an int, NVML_SUCCESS = 0.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;     // percent of the sample period a kernel ran
  unsigned int memory;  // percent of the period device memory was read/written
};
struct nvmlMemory_t {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

// The printable ASCII of a NUL-terminated buffer of `size` bytes (a label
// value must not carry control bytes or invalid UTF-8).
std::string PrintableUuid(const char* buffer, size_t size) {
  std::string out;
  for (size_t i = 0; i < size && buffer[i] != '\0'; ++i) {
    char c = buffer[i];
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  return out;
}

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init)();
  nvmlReturn_t (*shutdown)();
  nvmlReturn_t (*get_count)(unsigned int*);
  nvmlReturn_t (*get_handle)(unsigned int, nvmlDevice_t*);
  nvmlReturn_t (*get_utilization)(nvmlDevice_t, nvmlUtilization_t*);
  nvmlReturn_t (*get_memory)(nvmlDevice_t, nvmlMemory_t*);
  nvmlReturn_t (*get_uuid)(nvmlDevice_t, char*, unsigned int);
  const char* (*error_string)(nvmlReturn_t);  // optional

  std::string Error(nvmlReturn_t code) const {
    const char* text = error_string != nullptr ? error_string(code) : nullptr;
    return absl::StrCat("NVML error ", code, text != nullptr ? absl::StrCat(" (", text, ")") : "");
  }
};

namespace {

// Resolves every entry; false (and `missing` names the first one absent).
bool Resolve(void* handle, Nvml::Api* api, std::string* missing) {
  auto sym = [&](const char* name, auto* out) {
    void* p = dlsym(handle, name);
    if (p == nullptr && missing->empty()) *missing = name;
    *out = reinterpret_cast<std::remove_pointer_t<decltype(out)>>(p);
  };
  sym("nvmlInit_v2", &api->init);
  sym("nvmlShutdown", &api->shutdown);
  sym("nvmlDeviceGetCount_v2", &api->get_count);
  sym("nvmlDeviceGetHandleByIndex_v2", &api->get_handle);
  sym("nvmlDeviceGetUtilizationRates", &api->get_utilization);
  sym("nvmlDeviceGetMemoryInfo", &api->get_memory);
  sym("nvmlDeviceGetUUID", &api->get_uuid);
  api->error_string = reinterpret_cast<const char* (*)(nvmlReturn_t)>(dlsym(handle, "nvmlErrorString"));
  return missing->empty();
}

}  // namespace

std::unique_ptr<Nvml> Nvml::Load() { return LoadFrom({"libnvidia-ml.so.1", "libnvidia-ml.so"}); }

std::unique_ptr<Nvml> Nvml::LoadFrom(const std::vector<std::string>& libraries) {
  void* handle = nullptr;
  std::string library;
  std::string last_error = "no library named";
  for (const std::string& name : libraries) {
    handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      library = name;
      break;
    }
    const char* e = dlerror();
    last_error = e != nullptr ? e : "unknown dlopen error";
  }
  if (handle == nullptr) {
    spdlog::info("NVML not loaded (no GPU figures will be reported): {}", last_error);
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  std::string missing;
  if (!Resolve(handle, api.get(), &missing)) {
    spdlog::info("NVML not loaded from {}: it has no {} (no GPU figures will be reported)", library, missing);
    dlclose(handle);
    return nullptr;
  }
  nvmlReturn_t rc = api->init();
  if (rc != kNvmlSuccess) {
    spdlog::info("NVML not loaded from {}: nvmlInit_v2 failed: {} (no GPU figures will be reported)", library,
                 api->Error(rc));
    dlclose(handle);
    return nullptr;
  }
  return std::unique_ptr<Nvml>(new Nvml(handle, std::move(library), std::move(api)));
}

Nvml::Nvml(void* handle, std::string library, std::unique_ptr<Api> api)
    : handle_(handle), library_(std::move(library)), api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  dlclose(handle_);
}

absl::StatusOr<std::vector<GpuSample>> Nvml::Sample() {
  std::lock_guard<std::mutex> lock(mu_);
  unsigned int count = 0;
  nvmlReturn_t rc = api_->get_count(&count);
  if (rc != kNvmlSuccess) return absl::UnavailableError(absl::StrCat("nvmlDeviceGetCount_v2: ", api_->Error(rc)));
  if (count > kMaxDevices) {
    if (!warned_count_) {
      spdlog::warn("NVML reports {} devices; only the first {} are sampled", count, kMaxDevices);
      warned_count_ = true;
    }
    count = kMaxDevices;
  }
  std::vector<GpuSample> samples;
  for (unsigned int i = 0; i < count; ++i) {
    // A failing call costs only what it reads (one device, one figure).
    auto ok = [&](const char* call, nvmlReturn_t code) {
      if (code == kNvmlSuccess) return true;
      if (warned_.insert(absl::StrCat(call, " ", i)).second) {
        spdlog::warn("NVML {} for device {} failed: {} (left out of the GPU figures)", call, i, api_->Error(code));
      }
      return false;
    };
    nvmlDevice_t device = nullptr;
    if (!ok("nvmlDeviceGetHandleByIndex_v2", api_->get_handle(i, &device))) continue;
    char uuid[kUuidBufferSize] = {};
    if (!ok("nvmlDeviceGetUUID", api_->get_uuid(device, uuid, kUuidBufferSize))) continue;
    GpuSample s;
    s.index = static_cast<int>(i);
    s.uuid = PrintableUuid(uuid, kUuidBufferSize - 1);
    nvmlUtilization_t util{};
    s.has_utilization = ok("nvmlDeviceGetUtilizationRates", api_->get_utilization(device, &util));
    if (s.has_utilization) s.utilization_ratio = std::min(util.gpu, 100u) / 100.0;
    nvmlMemory_t memory{};
    s.has_memory = ok("nvmlDeviceGetMemoryInfo", api_->get_memory(device, &memory));
    if (s.has_memory) {
      s.memory_used_bytes = memory.used;
      s.memory_total_bytes = memory.total;
    }
    samples.push_back(std::move(s));
  }
  return samples;
}

}  // namespace det
