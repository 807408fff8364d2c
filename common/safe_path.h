// Checks for paths built from client input (checkpoint uuids, storage paths,
// artifact hashes, ids), so that none can name a file outside the directory
// it belongs in: no "..", no absolute paths, no symlink that leads out.
#ifndef DET_COMMON_SAFE_PATH_H_
#define DET_COMMON_SAFE_PATH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det {

// OK when `name` is one usable file name: non-empty, at most 255 bytes, not
// "." or "..", no '/', '\\' or NUL. Otherwise InvalidArgument naming `field`.
absl::Status ValidatePathComponent(absl::string_view name, absl::string_view field);

// OK when `path` is relative and none of its components is ".." (empty
// components and "." are allowed); no NUL. Otherwise InvalidArgument naming
// `field`.
absl::Status ValidateRelativePath(absl::string_view path, absl::string_view field);

// `base`/`relative` after ValidateRelativePath, and only if the result,
// with every symlink of its existing part resolved, stays inside `base`
// (also resolved): InvalidArgument naming `field` otherwise. The result is
// the joined (unresolved) path.
absl::StatusOr<std::string> JoinUnder(const std::string& base, absl::string_view relative, absl::string_view field);

// OK when `sha256` is 64 lower-case hex digits.
absl::Status ValidateSha256(absl::string_view sha256, absl::string_view field);

}  // namespace det

#endif  // DET_COMMON_SAFE_PATH_H_
