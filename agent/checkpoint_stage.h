// Staging another user's checkpoint for a warm start (issue 46): the agent,
// as root, copies the source checkpoint into the allocation's directory,
// owned by the trial's uid, so that the trial reads a copy instead of a
// directory of another user that it may not open.
#ifndef DET_AGENT_CHECKPOINT_STAGE_H_
#define DET_AGENT_CHECKPOINT_STAGE_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace det::agent {

// Bounds of one staged checkpoint.
struct StageLimits {
  int64_t max_entries = 10000;   // files and directories
  int max_depth = 16;
  int64_t max_bytes = int64_t{64} << 30;
};

// Copies directory `src` to `dst` (which must not exist): directories
// (0700) and regular files (0600), owned by uid/gid, read with O_NOFOLLOW;
// symlinks and other special files in `src` are skipped, never followed (a
// checkpoint can hold a symlink to a file only root may read).
// InvalidArgument naming `field` when `src` is not an absolute path of a
// directory; ResourceExhausted over `limits`; Internal on an I/O error (with
// the path). On failure `dst` is removed.
absl::Status StageCheckpoint(const std::string& src, const std::string& dst, uid_t uid, gid_t gid,
                             const std::string& field, const StageLimits& limits = {});

}  // namespace det::agent

#endif  // DET_AGENT_CHECKPOINT_STAGE_H_
