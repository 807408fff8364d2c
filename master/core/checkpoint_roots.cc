#include "master/core/checkpoint_roots.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/safe_path.h"
#include "common/status_macros.h"

namespace det::master {
namespace fs = std::filesystem;

absl::StatusOr<CheckpointRoots> CheckpointRoots::Create(const std::vector<std::string>& roots,
                                                        const std::vector<std::string>& guarded) {
  CheckpointRoots out;
  for (const std::string& r : roots) {
    if (r.empty()) return absl::InvalidArgumentError("--checkpoint-storage-root: must not be empty");
    Root root{LexicalPath(r), ResolvedPath(r)};
    bool seen = false;
    for (const Root& o : out.roots_) seen |= o.lexical == root.lexical;
    if (seen) continue;
    for (const std::string& g : guarded) {
      if (g.empty()) continue;
      if (PathWithin(LexicalPath(g), root.lexical) || PathWithin(ResolvedPath(g), root.resolved)) {
        return absl::InvalidArgumentError(absl::StrCat("checkpoint storage root ", root.lexical,
                                                       " contains the master's own ", g,
                                                       ": choose a root outside the data dir"));
      }
    }
    out.roots_.push_back(std::move(root));
  }
  if (out.roots_.empty()) return absl::InvalidArgumentError("no checkpoint storage root");
  return out;
}

std::string CheckpointRoots::Describe() const {
  std::vector<std::string> names;
  for (const Root& r : roots_) names.push_back(r.lexical);
  return absl::StrJoin(names, ", ");
}

absl::Status CheckpointRoots::Check(const std::string& dir, absl::string_view field) const {
  if (!dir.empty() && dir.front() == '/') {
    const std::string lexical = LexicalPath(dir), resolved = ResolvedPath(dir);
    for (const Root& r : roots_) {
      // Both: '..' cannot climb out, and no existing symlink leads out.
      if (PathWithin(lexical, r.lexical) && PathWithin(resolved, r.resolved)) return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": '", dir.substr(0, 256),
                                                 "' is not under an allowed checkpoint storage root (",
                                                 Describe(), "; see det-master --checkpoint-storage-root)"));
}

absl::StatusOr<int> CheckpointRoots::OpenParent(const std::string& storage_path, const std::string& uuid) const {
  DET_RETURN_IF_ERROR(ValidateUuid(uuid, "checkpoint uuid"));
  const fs::path path = LexicalPath(storage_path);
  if (path.filename() != uuid) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", uuid, ": its recorded path ", storage_path, " does not end in its uuid"));
  }
  const std::string dir = path.parent_path().string();
  for (const Root& r : roots_) {
    if (!PathWithin(dir, r.lexical)) continue;
    // The part below the root may hold symlinks made since (by trial code):
    // opened component by component, never following one.
    const std::string relative = fs::path(dir).lexically_relative(r.lexical).string();
    return OpenDirNoFollow(r.lexical, relative);
  }
  return absl::FailedPreconditionError(absl::StrCat("checkpoint ", uuid, ": ", dir,
                                                    " is not under an allowed checkpoint storage root (", Describe(),
                                                    ")"));
}

absl::Status CheckpointRoots::RemoveCheckpoint(const std::string& storage_path, const std::string& uuid) const {
  DET_ASSIGN_OR_RETURN(int fd, OpenParent(storage_path, uuid));
  absl::Status st = RemoveTreeNoFollow(fd, uuid);
  close(fd);
  return st;
}

absl::StatusOr<int> CheckpointRoots::OpenCheckpoint(const std::string& storage_path, const std::string& uuid) const {
  DET_ASSIGN_OR_RETURN(int parent, OpenParent(storage_path, uuid));
  int fd = openat(parent, uuid.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int err = errno;
  close(parent);
  if (fd >= 0) return fd;
  if (err == ENOENT) return absl::NotFoundError(absl::StrCat("checkpoint ", uuid, ": ", storage_path, " is gone"));
  return absl::FailedPreconditionError(absl::StrCat("checkpoint ", uuid, ": cannot open ", storage_path,
                                                    " (no symlink is followed): ", std::strerror(err)));
}

namespace {

// The trial id of det-trial's temporary checkpoint directory name
// ".tmp-t<ID>-<rest>"; 0 when `name` is not one.
int64_t TempDirTrial(const std::string& name) {
  constexpr char kPrefix[] = ".tmp-t";
  if (name.rfind(kPrefix, 0) != 0) return 0;
  const size_t start = sizeof(kPrefix) - 1;
  const size_t dash = name.find('-', start);
  if (dash == std::string::npos || dash == start || dash - start > 18) return 0;
  int64_t id = 0;
  for (size_t i = start; i < dash; ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    id = id * 10 + (name[i] - '0');
  }
  return id;
}

}  // namespace

absl::StatusOr<int> CheckpointRoots::RemoveStaleTemps(const std::string& dir,
                                                      const std::function<bool(int64_t)>& removable,
                                                      int max_entries) const {
  const std::string lexical = LexicalPath(dir);
  int fd = -1;
  for (const Root& r : roots_) {
    if (!PathWithin(lexical, r.lexical)) continue;
    auto opened = OpenDirNoFollow(r.lexical, fs::path(lexical).lexically_relative(r.lexical).string());
    if (!opened.ok()) return absl::IsNotFound(opened.status()) ? absl::StatusOr<int>(0) : opened.status();
    fd = *opened;
    break;
  }
  if (fd < 0) return absl::FailedPreconditionError(absl::StrCat(dir, " is not under a checkpoint root"));
  std::vector<std::string> doomed;
  const int list_fd = dup(fd);
  DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr;
  if (d == nullptr && list_fd >= 0) close(list_fd);
  for (int seen = 0; d != nullptr && seen < max_entries; ++seen) {
    const dirent* e = readdir(d);
    if (e == nullptr) break;
    const int64_t trial = TempDirTrial(e->d_name);
    if (trial > 0 && removable(trial)) doomed.emplace_back(e->d_name);
  }
  if (d != nullptr) closedir(d);
  int removed = 0;
  absl::Status first;
  for (const std::string& name : doomed) {
    absl::Status st = RemoveTreeNoFollow(fd, name);
    if (st.ok()) ++removed;
    if (!st.ok() && first.ok()) first = st;
  }
  close(fd);
  if (!first.ok() && removed == 0) return first;
  return removed;
}

}  // namespace det::master
