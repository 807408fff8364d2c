// The summary `det-cli trial profile` prints: where a trial's profiled time
// went, from the metric rows of its `profiling` and `system` groups (written
// by the trial runtime when the experiment config has
// `profiling: {enabled: true}`; docs/guides/profiling.md).
//
// A `profiling` row is one window of profiled batches on rank 0: seconds
// summed over the window (wall_s and one per phase) and the counts
// `batches` and `samples`. A `system` row is one sample of rank 0's process:
// cpu_ratio, rss_bytes and, per local GPU I, gpuI_utilization_ratio and
// gpuI_memory_used_bytes. Pure: no I/O, thread-compatible.
#ifndef DET_CLI_TRIAL_PROFILE_H_
#define DET_CLI_TRIAL_PROFILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "det/api/v1/metrics.pb.h"

namespace det::cli {

// The phases in the order they are printed: the metric name in a
// `profiling` row and the label det-cli shows.
struct ProfilePhaseName {
  const char* metric;
  const char* label;
};
const std::vector<ProfilePhaseName>& ProfilePhaseNames();

struct ProfilePhase {
  std::string metric;  // "data_loader_s"
  std::string label;   // "data loader"
  double seconds = 0;
  double share = 0;  // seconds / wall seconds (0 when no wall time)
};

struct GpuProfile {
  int index = 0;
  int64_t samples = 0;
  double utilization_mean = 0;  // ratio 0..1 over the samples that had it
  double memory_used_max_bytes = 0;
};

struct TrialProfile {
  int64_t windows = 0;      // `profiling` rows summed
  int64_t first_batch = 0;  // the first window's batch key
  int64_t last_batch = 0;
  double wall_seconds = 0;
  std::vector<ProfilePhase> phases;  // every phase of ProfilePhaseNames()
  double phase_seconds = 0;          // the measured phases' sum (unattributed_s not in it)
  double batches = 0;
  double samples = 0;
  double batches_per_second = 0;  // over the profiled wall time
  double samples_per_second = 0;
  // `system` rows.
  int64_t system_samples = 0;
  double cpu_ratio_mean = 0;
  double cpu_ratio_max = 0;
  double rss_max_bytes = 0;
  std::vector<GpuProfile> gpus;  // by index; empty without NVML
};

// The most GPUs a system row's names are read for (gpu0 .. gpu63); others
// are ignored.
constexpr int kMaxProfileGpus = 64;

// Sums the rows (each group's rows in any order; other groups ignored).
// Non-finite or negative values count as 0. Shares are of wall_seconds.
TrialProfile SummarizeProfile(const std::vector<det::api::v1::MetricsReport>& profiling,
                              const std::vector<det::api::v1::MetricsReport>& system);

// The human form: a phase table (PHASE | SECONDS | SHARE), the throughput
// lines and the system summary. Ends with a newline.
std::string FormatProfile(int64_t trial_id, const TrialProfile& p);

// The --json form (field names in docs/guides/profiling.md).
nlohmann::json ProfileJson(int64_t trial_id, const TrialProfile& p);

}  // namespace det::cli

#endif  // DET_CLI_TRIAL_PROFILE_H_
