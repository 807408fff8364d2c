// Trial checkpoints: a directory holding the wrapped models', optimizers' and
// LR schedulers' state (LibTorch serialization), RNG states, callbacks' state
// and metadata.json (batches trained, data position, hparams, config, and the
// runtime's own state). Written atomically: a temporary sibling directory is
// filled, synced, then renamed to <storage>/<uuid>.
#ifndef DET_TRIAL_RUNTIME_RUNTIME_CHECKPOINT_H_
#define DET_TRIAL_RUNTIME_RUNTIME_CHECKPOINT_H_

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "trial_runtime/runtime/trial_loader.h"

namespace det::runtime {

inline constexpr int kCheckpointFormatVersion = 1;

struct SavedCheckpoint {
  std::string uuid;
  std::string path;                        // <storage_dir>/<uuid>
  std::map<std::string, int64_t> resources;  // file -> size in bytes
};

// The random state of one rank: LibTorch's default CPU generator and the
// trial's std engine (TrialContext::random_engine()).
struct RngState {
  torch::Tensor cpu;       // at::Generator::get_state()
  std::string std_engine;  // the engine written with operator<<
};
RngState CaptureRngState(TrialContext& context);
// RngState as JSON (the generator state as a binary value) and back;
// InvalidArgument when malformed.
nlohmann::json RngStateToJson(const RngState& state);
absl::StatusOr<RngState> RngStateFromJson(const nlohmann::json& json);

// Saves the context's state plus `metadata` (merged into metadata.json; must
// hold "batches_trained") under storage_dir (created if missing).
// Callbacks' on_checkpoint_save sees the temporary directory. In a
// distributed trial only the chief saves, passing every rank's random state
// in `rank_rng_states` (index = rank; empty: this process's state only);
// LoadCheckpoint gives each rank its own. Errors: Internal on I/O or
// serialization failure (nothing is left at the final path).
absl::StatusOr<SavedCheckpoint> SaveCheckpoint(const std::string& storage_dir, TrialContext& context,
                                               const CallbackMap& callbacks, const nlohmann::json& metadata,
                                               const std::vector<RngState>& rank_rng_states = {});

// The prefix of trial `trial_id`'s temporary checkpoint directories in its
// storage directory: ".tmp-t<trial_id>-" (the uuid follows). Trial ids are
// unique in a cluster, so trials sharing a storage directory never share one.
std::string CheckpointTempPrefix(int64_t trial_id);

// Removes trial `trial_id`'s temporary checkpoint directories (left by an
// earlier run that died mid-save, e.g. on a full disk) from storage_dir: at
// most `max_entries` entries named CheckpointTempPrefix(trial_id)*; a symlink
// so named is removed itself, never followed. Only the trial's chief calls
// it, at start, before it saves: no process of the trial can be writing one
// then. Other trials' temporary directories and every checkpoint are left
// alone. Returns how many were removed (errors are skipped: best effort).
int RemoveStaleCheckpointTemps(const std::string& storage_dir, int64_t trial_id, int max_entries = 1000);

// Reads metadata.json of checkpoint `dir`. NotFound / InvalidArgument.
absl::StatusOr<nlohmann::json> ReadCheckpointMetadata(const std::string& dir);

// Restores the context's models, optimizers, LR schedulers, RNGs and the
// callbacks' state from `dir`; returns its metadata. The RNGs get the state
// of this process's rank (context.distributed().rank()) when the checkpoint
// holds one, else the chief's. The numbers of wrapped
// objects must match the checkpoint (FailedPrecondition otherwise).
absl::StatusOr<nlohmann::json> LoadCheckpoint(const std::string& dir, TrialContext& context,
                                              const CallbackMap& callbacks);

// Loads model_<i>.pt of checkpoint `dir` into each wrapped model of
// `context` (no other state), refusing a tensor of another shape
// (sdk/module_load.h). Throws c10::Error or std::runtime_error naming the
// file; the caller checked that the checkpoint holds as many models.
void LoadModelFiles(const std::string& dir, TrialContext& context);

// A random RFC 4122 version-4 UUID (does not touch the trial's RNGs).
std::string NewUuid();

}  // namespace det::runtime

#endif  // DET_TRIAL_RUNTIME_RUNTIME_CHECKPOINT_H_
