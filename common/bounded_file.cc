#include "common/bounded_file.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace det {

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, int64_t max_bytes, absl::string_view name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(name, ": cannot read it"));
  std::string text(static_cast<size_t>(max_bytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  // A short read sets eof and fail; bad means the read itself failed (a
  // directory opens, but cannot be read).
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(name, ": cannot read it"));
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<int64_t>(text.size()) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is larger than ", max_bytes, " bytes"));
  }
  return text;
}

}  // namespace det
