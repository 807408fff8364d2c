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

// OK when `id` is a canonical lower-case UUID: 8-4-4-4-12 hex digits
// ("0f3c9a1e-5b2d-4c6e-8f10-112233445566"). Otherwise InvalidArgument naming
// `field`.
absl::Status ValidateUuid(absl::string_view id, absl::string_view field);

// `path` made absolute and lexically normal ("." and ".." resolved, no
// trailing '/'), with every symlink of its existing prefix resolved.
std::string ResolvedPath(const std::string& path);

// `path` made absolute and lexically normal, no symlink resolved, no
// trailing '/'.
std::string LexicalPath(const std::string& path);

// Whether `path` is `root` or below it, component by component (both in the
// same form: both ResolvedPath or both LexicalPath).
bool PathWithin(const std::string& path, const std::string& root);

// Opens directory `root`/`relative` read-only (O_DIRECTORY, O_CLOEXEC):
// `root` is trusted (symlinks in it are followed); every component of
// `relative` is opened with O_NOFOLLOW, so that none of them can be a
// symlink ("" or "." components are skipped, ".." is refused). Returns the
// descriptor, which the caller closes. Errors name the path (NotFound when a
// component does not exist, FailedPrecondition for a symlink).
absl::StatusOr<int> OpenDirNoFollow(const std::string& root, const std::string& relative);

// Removes `name` in directory `dirfd` and, when it is a directory,
// everything below it, never following a symlink: a symlink met anywhere is
// removed itself, its target untouched; `name` itself being a symlink is
// FailedPrecondition (nothing removed). At most `max_depth` levels of
// directories (deeper: FailedPrecondition, the part removed so far stays
// removed). A missing `name` is OK. Not thread-safe against other writers
// of the tree, but a race can only make it fail, never leave the tree.
absl::Status RemoveTreeNoFollow(int dirfd, const std::string& name, int max_depth = 64);

}  // namespace det

#endif  // DET_COMMON_SAFE_PATH_H_
