// One reader for the daemons' secret token files (det-master's
// --metrics-token-file, det-agent's metrics-token-file): the same checks
// and the same errors on both. The checks depend on the reading daemon's
// user and group, so a file det-master (User=det) accepts may be refused by
// det-agent (root) and the other way round.
#ifndef DET_COMMON_SECRET_TOKEN_FILE_H_
#define DET_COMMON_SECRET_TOKEN_FILE_H_

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det {

inline constexpr size_t kMaxSecretTokenBytes = 4096;

// The token in `path` without surrounding white space, read as this process
// (geteuid(), getegid()). See ReadSecretTokenFileAs. Thread-safe.
absl::StatusOr<std::string> ReadSecretTokenFile(const std::string& path, absl::string_view flag);

// The same, checked for a daemon running as `euid`/`egid` (tests inject
// them). The file is opened O_RDONLY|O_NONBLOCK|O_CLOEXEC, following
// symbolic links (a Kubernetes Secret volume's key is a link into ..data),
// and every check applies to the opened target through fstat (no window
// between the check and the read): it must be a regular file (a FIFO would
// block the daemon at start), owned by `euid` or root (systemd's
// LoadCredential= writes root-owned credentials), with no "other" permission
// bits and no group write bit; group read only when the file's group is root
// or `egid` (systemd grants the daemon read through an ACL, which shows as
// group bits; 0440 root:det is the classic form); at most
// kMaxSecretTokenBytes, holding one non-empty word of printable ASCII
// (0x21..0x7e). InvalidArgument naming `flag`, the path and the fix
// otherwise.
absl::StatusOr<std::string> ReadSecretTokenFileAs(const std::string& path, absl::string_view flag, uid_t euid,
                                                  gid_t egid);

// The raw bytes of a secret file, with every check of ReadSecretTokenFileAs
// but the token's own (any content, at most `max_bytes`): used by readers
// of other secret files (the S3 credentials file). `content` names what the
// file should hold in the fixes ("the token", "the S3 credentials").
absl::StatusOr<std::string> ReadSecretFileAs(const std::string& path, absl::string_view flag, uid_t euid, gid_t egid,
                                             size_t max_bytes, absl::string_view content);

}  // namespace det

#endif  // DET_COMMON_SECRET_TOKEN_FILE_H_
