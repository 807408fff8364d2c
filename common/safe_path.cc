#include "common/safe_path.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/sha256.h"

namespace det {
namespace {

namespace fs = std::filesystem;

// `path` is `base` or below it (both already resolved), by components.
bool IsWithin(const fs::path& path, const fs::path& base) {
  auto p = path.begin();
  for (auto b = base.begin(); b != base.end(); ++b, ++p) {
    if (b->empty() && std::next(b) == base.end()) break;  // trailing '/'
    if (p == path.end() || *p != *b) return false;
  }
  return true;
}

}  // namespace

absl::Status ValidatePathComponent(absl::string_view name, absl::string_view field) {
  if (name.empty() || name.size() > 255 || name == "." || name == ".." ||
      name.find_first_of(absl::string_view("/\\\0", 3)) != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": '", name, "' must be a single file name (no '/', '..' or NUL)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRelativePath(absl::string_view path, absl::string_view field) {
  if (path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not contain NUL"));
  }
  if (!path.empty() && path.front() == '/') {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' must be a relative path"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(field, ": '", path, "' must not contain '..'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> JoinUnder(const std::string& base, absl::string_view relative, absl::string_view field) {
  if (absl::Status st = ValidateRelativePath(relative, field); !st.ok()) return st;
  fs::path joined = fs::path(base) / std::string(relative);
  std::error_code ec1, ec2;
  fs::path real_base = fs::weakly_canonical(fs::absolute(base), ec1);
  fs::path real = fs::weakly_canonical(fs::absolute(joined), ec2);
  if (ec1 || ec2 || !IsWithin(real, real_base)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", relative, "' leads outside ", base));
  }
  return joined.string();
}

absl::Status ValidateSha256(absl::string_view sha256, absl::string_view field) {
  if (!IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": '", sha256, "' is not a lower-case hex SHA-256"));
  }
  return absl::OkStatus();
}

}  // namespace det
