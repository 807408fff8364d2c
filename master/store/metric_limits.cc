#include "master/store/metric_limits.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "master/store/store.h"

namespace det {
namespace master {
namespace {

// At most 64 bytes of `name` for a message (whole UTF-8 characters).
std::string Shown(const std::string& name) {
  if (name.size() <= 64) return name;
  size_t keep = 64;
  while (keep > 0 && (static_cast<unsigned char>(name[keep]) & 0xC0) == 0x80) --keep;
  return absl::StrCat(name.substr(0, keep), "...");
}

absl::Status Refused(int64_t trial_id, const std::string& what, const char* flag) {
  return absl::ResourceExhaustedError(absl::StrCat("trial ", trial_id, ": ", what, " (det-master ", flag,
                                                   "); this metric report was refused and nothing of it stored"));
}

// The FNV-1a basis of this process: random, so that names colliding in one
// master do not collide in the next.
uint64_t HashBasis() {
  static const uint64_t basis = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ 0xcbf29ce484222325ULL;
  }();
  return basis;
}

// The profiler's checks of one row stored as `encoded` (see CheckMetricRows).
absl::Status CheckProfilerRow(int64_t trial_id, const MetricRow& r, const std::string& encoded,
                              const MetricLimits& limits, const MetricBudget& budget, MetricBudget* added) {
  for (const auto& [name, value] : r.metrics) {
    if (!IsProfilerKey(r.group, name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trial ", trial_id, ": metric group '", r.group, "' is the profiler's and has no key '", Shown(name),
          "' (see docs/guides/profiling.md for its keys); report your own metrics in another group"));
    }
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat("trial ", trial_id, ": metric group '", r.group, "' key '",
                                                     name, "' at total_batches ", r.total_batches, " is ", value,
                                                     "; the profiler's figures are finite and >= 0"));
    }
  }
  added->profiler_bytes += static_cast<int64_t>(encoded.size()) + MetricLimits::kRowOverhead;
  if (limits.max_profiler_bytes > 0 && budget.profiler_bytes + added->profiler_bytes > limits.max_profiler_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "trial ", trial_id, ": the profiler's groups (profiling and system) hold ", budget.profiler_bytes,
        " bytes; this report would pass their bound of ", limits.max_profiler_bytes,
        " bytes per trial (narrow profiling.begin_on_batch and profiling.end_after_batch); this metric report "
        "was refused and nothing of it stored"));
  }
  int64_t* rows = r.group == "profiling" ? &added->profiling_rows : &added->system_rows;
  const int64_t stored = r.group == "profiling" ? budget.profiling_rows : budget.system_rows;
  ++*rows;
  if (stored + *rows > kMaxProfilerRowsPerGroup) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "trial ", trial_id, ": metric group '", r.group, "' holds ", stored, " rows; at most ",
        kMaxProfilerRowsPerGroup, " per trial (the profiler's own bound; narrow profiling.begin_on_batch and "
        "profiling.end_after_batch); this metric report was refused and nothing of it stored"));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsProfilerGroup(const std::string& group) { return group == "profiling" || group == "system"; }

bool IsProfilerKey(const std::string& group, const std::string& key) {
  if (group == "profiling") {
    for (const char* k : {"wall_s", "data_loader_s", "forward_s", "backward_s", "allreduce_s", "optimizer_step_s",
                          "checkpoint_s", "validation_s", "runtime_s", "unattributed_s", "batches", "samples"}) {
      if (key == k) return true;
    }
    return false;
  }
  if (group != "system") return false;
  if (key == "cpu_ratio" || key == "rss_bytes") return true;
  if (key.size() < 4 || key.compare(0, 3, "gpu") != 0) return false;
  size_t i = 3;
  int index = 0;
  while (i < key.size() && i < 6 && key[i] >= '0' && key[i] <= '9') index = index * 10 + (key[i++] - '0');
  if (i == 3 || (key[3] == '0' && i > 4) || index >= kMaxProfilerGpus) return false;
  const std::string rest = key.substr(i);
  return rest == "_utilization_ratio" || rest == "_memory_used_bytes";
}

uint64_t MetricNameHash(const std::string& name) {
  uint64_t h = HashBasis();
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

bool MetricBudget::Has(uint64_t hash) const { return std::binary_search(names.begin(), names.end(), hash); }

void MetricBudget::Add(uint64_t hash) {
  auto it = std::lower_bound(names.begin(), names.end(), hash);
  if (it == names.end() || *it != hash) names.insert(it, hash);
}

absl::Status CheckMetricRows(int64_t trial_id, const std::vector<MetricRow>& rows,
                             const std::vector<std::string>& encoded, const MetricLimits& limits,
                             const MetricBudget& budget, MetricBudget* added) {
  *added = MetricBudget();
  for (size_t i = 0; i < rows.size(); ++i) {
    const MetricRow& r = rows[i];
    if (IsProfilerGroup(r.group)) {
      absl::Status st = CheckProfilerRow(trial_id, r, encoded[i], limits, budget, added);
      if (!st.ok()) return st;
      continue;
    }
    const int64_t values = static_cast<int64_t>(r.metrics.size());
    if (limits.max_values_per_report > 0 && values > limits.max_values_per_report) {
      return Refused(trial_id,
                     absl::StrCat("a ", r.group, " report of ", values, " metric values at total_batches ",
                                  r.total_batches, "; at most ", limits.max_values_per_report, " per report"),
                     "--max-metric-values-per-report");
    }
    for (const auto& [name, value] : r.metrics) {
      const int64_t len = static_cast<int64_t>(name.size());
      if (limits.max_name_bytes > 0 && len > limits.max_name_bytes) {
        return Refused(trial_id,
                       absl::StrCat(r.group, " metric name '", Shown(name), "' is ", len, " bytes; at most ",
                                    limits.max_name_bytes),
                       "--max-metric-name-bytes");
      }
      const uint64_t hash = MetricNameHash(name);
      if (!budget.Has(hash) && !added->Has(hash)) {
        added->Add(hash);
        if (added->example.empty()) added->example = name;
      }
    }
    added->bytes += static_cast<int64_t>(encoded[i].size()) + MetricLimits::kRowOverhead;
  }
  const int64_t names = static_cast<int64_t>(budget.names.size() + added->names.size());
  if (limits.max_trial_names > 0 && !added->names.empty() && names > limits.max_trial_names) {
    return Refused(trial_id,
                   absl::StrCat(added->names.size(), " new metric names (such as '", Shown(added->example),
                                "') would make ", names, " distinct names; at most ", limits.max_trial_names,
                                " per trial over all groups (names it already has are still accepted)"),
                   "--max-trial-metric-names");
  }
  if (limits.max_trial_bytes > 0 && budget.bytes + added->bytes > limits.max_trial_bytes) {
    return Refused(trial_id,
                   absl::StrCat("its stored metrics (", budget.bytes, " bytes) plus this report (", added->bytes,
                                " bytes) exceed the limit of ", limits.max_trial_bytes,
                                " bytes per trial; further reports are refused"),
                   "--max-trial-metric-mib");
  }
  return absl::OkStatus();
}

void ApplyMetricBudget(const MetricBudget& added, MetricBudget* budget) {
  for (uint64_t hash : added.names) budget->Add(hash);
  budget->bytes += added.bytes;
  budget->profiling_rows += added.profiling_rows;
  budget->system_rows += added.system_rows;
  budget->profiler_bytes += added.profiler_bytes;
}

absl::Status CheckCheckpointReport(int64_t trial_id, int64_t resources, int64_t metadata_bytes, int64_t row_bytes,
                                   const CheckpointLimits& limits, const CheckpointBudget& budget) {
  auto refused = [&](const std::string& what, const char* flag) {
    return absl::ResourceExhaustedError(absl::StrCat("trial ", trial_id, ": ", what, " (det-master ", flag,
                                                     "); this checkpoint report was refused and nothing of it "
                                                     "stored"));
  };
  if (limits.max_resources_per_report > 0 && resources > limits.max_resources_per_report) {
    return refused(absl::StrCat("a checkpoint of ", resources, " files; at most ", limits.max_resources_per_report,
                                " per report"),
                   "--max-checkpoint-resources");
  }
  if (limits.max_metadata_bytes > 0 && metadata_bytes > limits.max_metadata_bytes) {
    return refused(absl::StrCat("checkpoint metadata of ", metadata_bytes, " bytes; at most ",
                                limits.max_metadata_bytes, " per report"),
                   "--max-checkpoint-metadata-kib");
  }
  if (limits.max_trial_checkpoints > 0 && budget.rows >= limits.max_trial_checkpoints) {
    return refused(absl::StrCat("it has ", budget.rows, " checkpoints (deleted ones included); at most ",
                                limits.max_trial_checkpoints, " per trial"),
                   "--max-trial-checkpoints");
  }
  if (limits.max_trial_bytes > 0 && budget.bytes + row_bytes > limits.max_trial_bytes) {
    return refused(absl::StrCat("its checkpoint rows (", budget.bytes, " bytes) plus this one (", row_bytes,
                                " bytes) exceed the limit of ", limits.max_trial_bytes, " bytes per trial"),
                   "--max-trial-checkpoint-mib");
  }
  return absl::OkStatus();
}

}  // namespace master
}  // namespace det
