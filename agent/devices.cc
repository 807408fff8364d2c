// The only agent file that includes torch headers.
#include "agent/devices.h"

#include <fstream>
#include <string>

#include "spdlog/spdlog.h"

#ifdef DET_AGENT_WITH_TORCH
#include <torch/cuda.h>
#endif

namespace det::agent {
namespace {

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) {
        auto v = line.substr(pos + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  }
  return "cpu";
}

}  // namespace

std::vector<det::api::v1::Device> CpuDevices(int n) {
  std::vector<det::api::v1::Device> out;
  const std::string brand = CpuModel();
  for (int i = 0; i < n; ++i) {
    det::api::v1::Device d;
    d.set_id(i);
    d.set_type(det::api::v1::DEVICE_TYPE_CPU);
    d.set_brand(brand);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<det::api::v1::Device> CudaDevices() {
  std::vector<det::api::v1::Device> out;
#ifdef DET_AGENT_WITH_TORCH
  size_t n = 0;
  try {
    n = torch::cuda::device_count();
  } catch (const std::exception& e) {
    spdlog::warn("CUDA device detection failed: {}", e.what());
    n = 0;
  }
  for (size_t i = 0; i < n; ++i) {
    det::api::v1::Device d;
    d.set_id(static_cast<int32_t>(i));
    d.set_type(det::api::v1::DEVICE_TYPE_CUDA);
    d.set_brand("cuda");
    out.push_back(std::move(d));
  }
#endif
  return out;
}

std::vector<det::api::v1::Device> DetectDevices(int cpu_slots) {
  auto gpus = CudaDevices();
  if (!gpus.empty()) return gpus;
  return CpuDevices(cpu_slots);
}

}  // namespace det::agent
