// The job queue's pure parts (private to master/core; MasterCore's
// GetJobQueue and UpdateJob in job_queue.cc use them): the order jobs are
// listed and scheduled in, where a job moved ahead of / behind another one
// goes, and the bounds UpdateJob checks. No I/O, no locks; thread-safe.
#ifndef DET_MASTER_CORE_JOB_QUEUE_H_
#define DET_MASTER_CORE_JOB_QUEUE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "det/api/v1/cluster.pb.h"

namespace det::master {

struct ExperimentRuntime;

// Bounds of UpdateJob (and `experiment set priority|weight|max-slots`).
inline constexpr int kMinJobPriority = 1;
inline constexpr int kMaxJobPriority = 99;
inline constexpr int kMaxJobMaxSlots = 1000000;
// Allocations listed per Job (running first); the counts cover all.
inline constexpr int kMaxJobAllocationsListed = 100;
// Positions closer than this are renumbered before a job moves between them.
inline constexpr double kMinQueuePositionGap = 1e-6;

// What orders a pool's jobs: priority ascending (lower first), then fair
// share (slots held / weight) ascending, then queue_position, then id.
struct JobOrderKey {
  std::string pool;
  int priority = 42;
  double share = 0;
  double queue_position = 0;
  int64_t id = 0;
};
// Whether `a` comes before `b` (pools by name, then the order above).
bool JobBefore(const JobOrderKey& a, const JobOrderKey& b);

// A job of one priority level of one pool, by (position, id) ascending.
struct QueuedJob {
  int64_t id = 0;
  double position = 0;
};

// The position for a job moved just ahead of (`ahead`) or just behind the
// job at `target` of `level` (the same priority, the moving job excluded,
// ordered by position then id): midway to the neighbour on that side, or
// the target's position -/+ 1 when it has none. nullopt when the gap to the
// neighbour is below kMinQueuePositionGap (renumber first, then ask again).
// Requires target < level.size().
std::optional<double> PositionNextTo(const std::vector<QueuedJob>& level, size_t target, bool ahead);

// InvalidArgument naming the field for a value out of range: priority
// outside 1..99, weight not > 0 or not finite, max_slots outside
// 0..1,000,000, both ahead_of and behind, or a priority with one of them.
absl::Status ValidateUpdateJob(const ::det::api::v1::UpdateJobRequest& req);

// The experiment id of a job named "exp-<id>" or "<id>" in field `field`:
// InvalidArgument naming the field when malformed.
absl::StatusOr<int64_t> ParseJobRef(const std::string& ref, const std::string& field);

// Applies the knobs UpdateJob stored in e.row.job_* over those
// SetJobKnobsFromConfig took from the config (recovery calls it after that).
void ApplyStoredJobKnobs(ExperimentRuntime& e);

}  // namespace det::master

#endif  // DET_MASTER_CORE_JOB_QUEUE_H_
