// The slots an agent offers: one CUDA slot per GPU when built with LibTorch
// and GPUs are visible, otherwise `cpu_slots` CPU slots.
#ifndef DET_AGENT_DEVICES_H_
#define DET_AGENT_DEVICES_H_

#include <vector>

#include "det/api/v1/cluster.pb.h"

namespace det::agent {

// CPU slots with ids 0..n-1 (brand: the CPU model when known).
std::vector<det::api::v1::Device> CpuDevices(int n);

// GPUs visible to this process (empty without LibTorch or without CUDA).
std::vector<det::api::v1::Device> CudaDevices();

// CudaDevices() when non-empty, else CpuDevices(cpu_slots).
std::vector<det::api::v1::Device> DetectDevices(int cpu_slots);

}  // namespace det::agent

#endif  // DET_AGENT_DEVICES_H_
