// Reading a small file whole (a config, a job file, an overrides file)
// without ever holding more than a bound in memory, whatever the file is:
// the files named on a command line or in a config are not trusted to be
// small.
#ifndef DET_COMMON_BOUNDED_FILE_H_
#define DET_COMMON_BOUNDED_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace det {

// The contents of the file at `path` if it has at most `max_bytes` bytes
// (at most max_bytes + 1 bytes are read). Otherwise InvalidArgument that
// starts with `name` (how the caller names the file, e.g. "resource pools
// file '/etc/det/pools.yaml'"): "<name>: cannot read it" for a file that
// does not exist, cannot be opened or read (a directory), "<name> is larger
// than <max_bytes> bytes" for one too large. Requires max_bytes >= 0.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, int64_t max_bytes, absl::string_view name);

}  // namespace det

#endif  // DET_COMMON_BOUNDED_FILE_H_
