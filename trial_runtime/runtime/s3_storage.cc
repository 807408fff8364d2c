#include "trial_runtime/runtime/s3_storage.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace det::runtime {
namespace fs = std::filesystem;
namespace {

// `path` as a directory of this uid with mode 0700: created when missing; an
// existing entry that is not such a directory (a symlink, a file, another
// uid's directory) is an error naming it.
absl::Status MakePrivateDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create the S3 staging directory ", path, ": ",
                                            std::strerror(errno), " (det-trial stages S3 checkpoints in its working "
                                            "directory; it must be writable)"));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat("the S3 staging directory ", path,
                                                      " is not a directory of this user (uid ", geteuid(),
                                                      "); remove it"));
  }
  if ((st.st_mode & 07777) != 0700 && chmod(path.c_str(), 0700) != 0) {
    return absl::InternalError(absl::StrCat("cannot make the S3 staging directory ", path, " 0700: ",
                                            std::strerror(errno)));
  }
  return absl::OkStatus();
}

void RemoveQuietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);  // never follows a symlink: a link is removed itself
}

}  // namespace

absl::StatusOr<s3::Addressing> ParseAddressing(absl::string_view addressing) {
  if (addressing == "path") return s3::Addressing::kPath;
  if (addressing == "virtual") return s3::Addressing::kVirtual;
  return absl::InvalidArgumentError(absl::StrCat("the master's S3 access has addressing '",
                                                 addressing.substr(0, 32), "'; expected path or virtual"));
}

absl::Status CheckLocalCheckpointStorage(absl::string_view storage_type, absl::string_view checkpoint_dir_flag) {
  if (storage_type != "s3" || !checkpoint_dir_flag.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "checkpoint_storage.type: s3 needs a cluster: det-master hands the trial its S3 credentials, and local mode has "
      "no master. Create the experiment on a cluster (det-cli experiment create without --local), or keep this "
      "local run's checkpoints in a directory with --checkpoint-dir DIR");
}

absl::StatusOr<std::string> PrepareStagingDir(const std::string& parent, int rank) {
  if (rank < 0) return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is negative"));
  const std::string root = (fs::path(parent) / "det-s3-staging").string();
  DET_RETURN_IF_ERROR(MakePrivateDir(root));
  const std::string dir = (fs::path(root) / absl::StrCat("rank-", rank)).string();
  // An earlier run of this rank died mid-upload or mid-restore: its copies go.
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot remove the stale S3 staging directory ", dir, ": ",
                                                  ec.message()));
  DET_RETURN_IF_ERROR(MakePrivateDir(dir));
  return dir;
}

S3CheckpointStorage::S3CheckpointStorage(S3AccessFetcher fetch, std::string staging_dir, s3::S3RetryPolicy retry,
                                         s3::S3Limits limits)
    : fetch_(std::move(fetch)), staging_(std::move(staging_dir)), retry_(retry), limits_(limits) {}

std::string S3CheckpointStorage::save_dir() const { return (fs::path(staging_) / "save").string(); }

absl::Status S3CheckpointStorage::Open(const std::string& storage_path) {
  return ClientFor(storage_path).status();
}

absl::StatusOr<s3::S3Client*> S3CheckpointStorage::ClientFor(const std::string& storage_path) {
  auto it = clients_.find(storage_path);
  if (it != clients_.end()) return it->second.get();
  absl::StatusOr<S3Access> access = fetch_(storage_path);
  if (!access.ok()) {
    return absl::Status(access.status().code(), absl::StrCat("the S3 credentials for ", storage_path, ": ",
                                                             access.status().message()));
  }
  absl::StatusOr<std::unique_ptr<s3::S3Client>> client =
      s3::S3Client::Create(std::move(access->endpoint), std::move(access->credentials), retry_, limits_);
  if (!client.ok()) {
    return absl::Status(client.status().code(), absl::StrCat("the S3 client for ", storage_path, ": ",
                                                             client.status().message()));
  }
  s3::S3Client* raw = client->get();
  clients_[storage_path] = *std::move(client);
  return raw;
}

absl::StatusOr<SavedCheckpoint> S3CheckpointStorage::Upload(const std::string& storage_url,
                                                            const SavedCheckpoint& local) {
  auto fail = [&](const absl::Status& st) {
    RemoveQuietly(local.path);
    return absl::Status(st.code(), absl::StrCat("checkpoint ", local.uuid, ": upload to ", storage_url,
                                                " failed: ", st.message()));
  };
  absl::StatusOr<s3::S3Location> storage = s3::ParseS3Url(storage_url);
  if (!storage.ok()) return fail(storage.status());
  absl::StatusOr<s3::S3Location> where = s3::CheckpointLocation(*storage, local.uuid);
  if (!where.ok()) return fail(where.status());
  absl::StatusOr<s3::S3Client*> client = ClientFor(storage_url);
  if (!client.ok()) return fail(client.status());
  // Before the upload: a trial killed mid-way (a pause past det-master's
  // --stop-timeout-s, a lost node) shows it in its log without the
  // "uploaded" line below.
  int64_t bytes = 0;
  for (const auto& [name, size] : local.resources) bytes += size;
  std::printf("[det-trial] uploading checkpoint %s to %s (%lld bytes and metadata)\n", local.uuid.c_str(),
              s3::FormatS3Url(*where).c_str(), static_cast<long long>(bytes));
  std::fflush(stdout);
  absl::StatusOr<s3::Manifest> manifest = s3::UploadCheckpoint(**client, *where, local.path);
  if (!manifest.ok()) {
    // No manifest was written: the objects so far are an incomplete
    // checkpoint nobody restores; remove them if S3 lets us.
    (void)s3::DeleteCheckpoint(**client, *where, storage->key_prefix);
    return fail(manifest.status());
  }
  RemoveQuietly(local.path);
  SavedCheckpoint out = local;
  out.path = s3::FormatS3Url(*where);
  std::printf("[det-trial] checkpoint %s uploaded to %s (%zu objects, %lld bytes)\n", local.uuid.c_str(),
              out.path.c_str(), manifest->files.size() + 1, static_cast<long long>(manifest->total_bytes()));
  std::fflush(stdout);
  return out;
}

absl::StatusOr<std::string> S3CheckpointStorage::Download(const std::string& checkpoint_url) {
  absl::StatusOr<s3::S3Location> where = s3::ParseS3Url(checkpoint_url);
  if (!where.ok()) return where.status();
  DET_ASSIGN_OR_RETURN(s3::S3Client * client, ClientFor(checkpoint_url));
  const std::string dir = (fs::path(staging_) / absl::StrCat("restore-", ++downloads_)).string();
  RemoveQuietly(dir);
  absl::StatusOr<s3::Manifest> manifest = s3::DownloadCheckpoint(*client, *where, dir);
  if (!manifest.ok()) {
    RemoveQuietly(dir);
    return absl::Status(manifest.status().code(), absl::StrCat("restoring checkpoint ", checkpoint_url, ": ",
                                                               manifest.status().message()));
  }
  std::printf("[det-trial] checkpoint %s downloaded (%zu files, %lld bytes)\n", checkpoint_url.c_str(),
              manifest->files.size(), static_cast<long long>(manifest->total_bytes()));
  std::fflush(stdout);
  return dir;
}

void S3CheckpointStorage::Discard(const std::string& local_dir) {
  // Only what this object made: a directory directly under staging.
  if (fs::path(local_dir).parent_path() != fs::path(staging_)) return;
  RemoveQuietly(local_dir);
}

}  // namespace det::runtime
