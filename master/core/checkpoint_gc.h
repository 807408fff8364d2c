// The checkpoint garbage-collection policy: which checkpoints an experiment
// keeps (Determined's save_experiment_best, save_trial_best,
// save_trial_latest). Pure functions, no I/O; thread-safe. MasterCore
// applies the decision (marks the others DELETED, then deletes their files)
// to the trials that have ended.
#ifndef DET_MASTER_CORE_CHECKPOINT_GC_H_
#define DET_MASTER_CORE_CHECKPOINT_GC_H_

#include <set>
#include <string>
#include <vector>

#include "common/experiment_config.h"
#include "det/api/v1/experiment.pb.h"
#include "master/store/store.h"

namespace det::master {

// The policy in effect: the config's checkpoint_storage.save_* (their
// defaults when the config has no checkpoint_storage), each overridden by
// the same key of `override_json`, the policy PatchExperiment stored
// ({"save_experiment_best": n, ...}; "" or anything but an object: none).
::det::api::v1::CheckpointGcPolicy EffectiveGcPolicy(const ExperimentConfig& config,
                                                     const std::string& override_json);

// The uuids of `checkpoints` that `policy` keeps. Only COMPLETED checkpoints
// count; the others are neither kept nor listed. Kept:
//   * the save_experiment_best best by searcher metric over all trials,
//   * each trial's save_trial_best best by searcher metric,
//   * each trial's save_trial_latest latest (by total_batches, then time).
// "Best" follows `smaller_is_better`; a checkpoint without a searcher metric
// (or a NaN one) is never "best"; ties go to the later checkpoint (more
// batches). Counts below 0 are taken as 0.
std::set<std::string> CheckpointsToKeep(const std::vector<CheckpointRow>& checkpoints,
                                        const ::det::api::v1::CheckpointGcPolicy& policy, bool smaller_is_better);

}  // namespace det::master

#endif  // DET_MASTER_CORE_CHECKPOINT_GC_H_
