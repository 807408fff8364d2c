// One reader for the daemons' secret token files (det-master's
// --metrics-token-file, det-agent's metrics-token-file): the same checks
// and the same errors on both, so a file one accepts the other accepts too.
#ifndef DET_COMMON_SECRET_TOKEN_FILE_H_
#define DET_COMMON_SECRET_TOKEN_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det {

inline constexpr size_t kMaxSecretTokenBytes = 4096;

// The token in `path` without surrounding white space. The file is opened
// O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC and checked on that descriptor
// (fstat; no window between the check and the read): it must be a regular
// file (not a symlink, FIFO or directory: a FIFO would block the daemon at
// start), owned by this process's effective uid, with no group or other
// permission bits (chmod 600), at most kMaxSecretTokenBytes, and hold one
// non-empty word of printable ASCII (0x21..0x7e). InvalidArgument naming
// `flag`, the path and the fix otherwise. Thread-safe.
absl::StatusOr<std::string> ReadSecretTokenFile(const std::string& path, absl::string_view flag);

}  // namespace det

#endif  // DET_COMMON_SECRET_TOKEN_FILE_H_
