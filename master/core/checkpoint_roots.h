// CheckpointRoots: the directories under which experiments may keep
// checkpoints (the master's checkpoint root and every
// --checkpoint-storage-root), and the only way the master deletes a
// checkpoint's files. A config's checkpoint_storage names a directory the
// master later deletes checkpoint directories in, and trial code (untrusted)
// reports the checkpoints: so a checkpoint directory is only ever deleted
// when it lies under a root, has a UUID for a name, and is reached from the
// root without following any symlink.
#ifndef DET_MASTER_CORE_CHECKPOINT_ROOTS_H_
#define DET_MASTER_CORE_CHECKPOINT_ROOTS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det::master {

class CheckpointRoots {
 public:
  // `roots`: the allowed roots as configured (made absolute; duplicates
  // dropped). `guarded`: the master's own files (data dir, database,
  // artifacts), which no root may contain: InvalidArgument naming both
  // otherwise. Empty `roots` is InvalidArgument.
  static absl::StatusOr<CheckpointRoots> Create(const std::vector<std::string>& roots,
                                                const std::vector<std::string>& guarded);

  // OK when directory `dir` (checkpoint_storage.host_path, joined with
  // storage_path) lies under a root, both lexically ('..' resolved) and with
  // the symlinks of its existing prefix resolved. Otherwise InvalidArgument
  // naming `field` and the allowed roots. Thread-safe.
  absl::Status Check(const std::string& dir, absl::string_view field) const;

  // Deletes checkpoint directory `storage_path` (<dir>/<uuid> as recorded)
  // of checkpoint `uuid`: only when `uuid` is a UUID, is the last component
  // of `storage_path`, and <dir> lies under a root; <dir> is opened from the
  // root without following symlinks and the tree is removed with
  // RemoveTreeNoFollow (common/safe_path.h). A directory that is already
  // gone is OK. Errors say why nothing (or not all) was deleted.
  // Thread-safe (no state changes).
  absl::Status RemoveCheckpoint(const std::string& storage_path, const std::string& uuid) const;

  // Opens checkpoint directory `storage_path` of checkpoint `uuid` read-only
  // under the same conditions as RemoveCheckpoint (a UUID that ends the
  // recorded path, under a root, no symlink followed below the root, the
  // directory itself included). Returns the descriptor, which the caller
  // closes. NotFound when it is gone; FailedPrecondition otherwise.
  // Thread-safe.
  absl::StatusOr<int> OpenCheckpoint(const std::string& storage_path, const std::string& uuid) const;

  // Removes det-trial's unfinished saves (".tmp-t<TRIAL>-<uuid>", left by a
  // run that died mid-save, e.g. on a full disk) directly in checkpoint
  // storage directory `dir`, for each TRIAL `removable` accepts (trials that
  // are not running). `dir` must lie under a root; it is opened from the
  // root and each tree removed without following a symlink
  // (RemoveTreeNoFollow). At most `max_entries` entries are looked at.
  // Returns how many directories were removed (a missing `dir`: 0).
  // Thread-safe (no state changes).
  absl::StatusOr<int> RemoveStaleTemps(const std::string& dir, const std::function<bool(int64_t)>& removable,
                                       int max_entries = 100000) const;

  // The roots as configured (absolute, normal), comma-separated.
  std::string Describe() const;

 private:
  // The parent directory of checkpoint `uuid`'s `storage_path`, opened as
  // RemoveCheckpoint describes.
  absl::StatusOr<int> OpenParent(const std::string& storage_path, const std::string& uuid) const;
  struct Root {
    std::string lexical;   // absolute, normal
    std::string resolved;  // and with its symlinks resolved
  };
  std::vector<Root> roots_;
};

}  // namespace det::master

#endif  // DET_MASTER_CORE_CHECKPOINT_ROOTS_H_
