// The slots an agent offers: one CUDA slot per GPU when built with LibTorch
// and GPUs are visible, otherwise `cpu_slots` CPU slots.
#ifndef DET_AGENT_DEVICES_H_
#define DET_AGENT_DEVICES_H_

#include <string>
#include <vector>

#include "det/api/v1/cluster.pb.h"

namespace det::agent {

// CPU slots with ids 0..n-1 (brand: the CPU model when known).
std::vector<det::api::v1::Device> CpuDevices(int n);

// Parses `nvidia-smi --query-gpu=index,name,memory.total,uuid
// --format=csv,noheader,nounits` output (memory in MiB) into CUDA devices,
// one per well-formed line; malformed lines are skipped. Pure.
std::vector<det::api::v1::Device> ParseNvidiaSmi(const std::string& csv);

// GPUs of this node: from nvidia-smi (name, memory, UUID) when it runs,
// else LibTorch's CUDA device count (when built with LibTorch). Honours
// CUDA_VISIBLE_DEVICES only through LibTorch; set DET_AGENT_GPUS=none to
// offer no GPU. Empty when there is none.
std::vector<det::api::v1::Device> CudaDevices();

// CudaDevices() when non-empty, else CpuDevices(cpu_slots).
std::vector<det::api::v1::Device> DetectDevices(int cpu_slots);

}  // namespace det::agent

#endif  // DET_AGENT_DEVICES_H_
