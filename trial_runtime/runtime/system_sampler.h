// The `system` metric group of the trial profiler (profiler.h): this
// process's CPU use and resident memory from /proc (common/proc_stats.h) and,
// when NVML loads (common/nvml.h), each local GPU's utilisation and memory.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_SYSTEM_SAMPLER_H_
#define DET_TRIAL_RUNTIME_RUNTIME_SYSTEM_SAMPLER_H_

#include <memory>

#include "trial_runtime/runtime/profiler.h"

namespace det::runtime {

// Rows of keys cpu_ratio (CPU seconds per wall second since the previous
// sample, or since the process started for the first; above 1 with several
// threads busy), rss_bytes and, per GPU index I that NVML reports,
// gpu<I>_utilization_ratio and gpu<I>_memory_used_bytes (no gpu keys
// without NVML). A figure that cannot be read is left out of the row.
std::unique_ptr<SystemSampler> MakeProcessSystemSampler();

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_SYSTEM_SAMPLER_H_
