// The only agent file that includes torch headers.
#include "agent/devices.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
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

namespace {

std::string Trim(std::string s) {
  const char* ws = " \t\r\n";
  s.erase(0, s.find_first_not_of(ws));
  auto end = s.find_last_not_of(ws);
  s.erase(end == std::string::npos ? 0 : end + 1);
  return s;
}

// nvidia-smi's output, or "" when it is missing or fails.
std::string RunNvidiaSmi() {
  FILE* p = popen("nvidia-smi --query-gpu=index,name,memory.total,uuid --format=csv,noheader,nounits 2>/dev/null",
                  "r");
  if (p == nullptr) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  return pclose(p) == 0 ? out : "";
}

}  // namespace

std::vector<det::api::v1::Device> ParseNvidiaSmi(const std::string& csv) {
  std::vector<det::api::v1::Device> out;
  std::istringstream in(csv);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::istringstream ls(line);
    std::string f;
    while (std::getline(ls, f, ',')) fields.push_back(Trim(f));
    if (fields.size() != 4 || fields[0].empty()) continue;
    char* end = nullptr;
    long index = std::strtol(fields[0].c_str(), &end, 10);
    if (*end != '\0' || index < 0) continue;
    long long mib = std::strtoll(fields[2].c_str(), &end, 10);
    det::api::v1::Device d;
    d.set_id(static_cast<int32_t>(index));
    d.set_type(det::api::v1::DEVICE_TYPE_CUDA);
    d.set_brand(fields[1]);
    if (*end == '\0' && mib > 0) d.set_memory_bytes(mib * 1024 * 1024);
    d.set_uuid(fields[3]);
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<det::api::v1::Device> CudaDevices() {
  const char* gpus = std::getenv("DET_AGENT_GPUS");
  if (gpus != nullptr && std::string(gpus) == "none") return {};
  std::vector<det::api::v1::Device> out = ParseNvidiaSmi(RunNvidiaSmi());
  if (!out.empty()) return out;
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
