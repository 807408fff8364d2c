#include "master/core/checkpoint_files_s3.h"

#include <openssl/evp.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace det::master {
namespace {

namespace apiv1 = ::det::api::v1;

struct Md5CtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using Md5Ctx = std::unique_ptr<EVP_MD_CTX, Md5CtxFree>;

std::string HexOf(const unsigned char* bytes, unsigned int n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out.push_back(kHex[bytes[i] >> 4]);
    out.push_back(kHex[bytes[i] & 15]);
  }
  return out;
}

// The S3 source: each file read in ranges, its size checked first and its
// MD5 at its end against the manifest's.
class S3CheckpointFiles final : public CheckpointFiles {
 public:
  S3CheckpointFiles(std::unique_ptr<s3::S3Client> client, s3::S3Location checkpoint, std::string uuid,
                    std::vector<File> files, std::vector<std::string> md5, int64_t total, int64_t chunk)
      : CheckpointFiles(std::move(uuid), std::move(files), total, chunk),
        client_(std::move(client)),
        checkpoint_(std::move(checkpoint)),
        md5_(std::move(md5)) {}
  absl::StatusOr<bool> Next(apiv1::DownloadCheckpointResponse* out) override;

 private:
  std::string Key(const File& f) const { return absl::StrCat(checkpoint_.key_prefix, "/", f.path); }
  absl::Status Lost(const File& f, const std::string& why) const {
    return absl::DataLossError(absl::StrCat("checkpoint ", uuid_, ": file ", f.path, " (s3://", checkpoint_.bucket,
                                            "/", Key(f), "): ", why));
  }
  // HeadObject: the object exists at its recorded size; starts the MD5.
  absl::Status StartFile(const File& f);
  // Reads [offset_, offset_ + n) into `data`.
  absl::Status ReadRange(const File& f, int64_t n, std::string* data);
  // Compares the file's MD5 with the manifest's.
  absl::Status FinishFile(const File& f);

  const std::unique_ptr<s3::S3Client> client_;
  const s3::S3Location checkpoint_;
  const std::vector<std::string> md5_;  // the manifest's, parallel to files_
  size_t index_ = 0;                    // the file being sent
  int64_t offset_ = 0;                  // within it
  Md5Ctx ctx_;                          // files_[index_]'s MD5 once started
};

absl::Status S3CheckpointFiles::StartFile(const File& f) {
  absl::StatusOr<s3::ObjectInfo> head = client_->HeadObject(checkpoint_.bucket, Key(f));
  if (absl::IsNotFound(head.status())) return Lost(f, "missing");
  if (!head.ok()) {
    return absl::Status(head.status().code(),
                        absl::StrCat("checkpoint ", uuid_, ": file ", f.path, ": ", head.status().message()));
  }
  if (head->size != f.size) return Lost(f, absl::StrCat(head->size, " bytes in S3; ", f.size, " recorded"));
  ctx_.reset(EVP_MD_CTX_new());
  if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_md5(), nullptr) != 1) {
    return absl::InternalError("cannot start an MD5 digest");
  }
  return absl::OkStatus();
}

absl::Status S3CheckpointFiles::ReadRange(const File& f, int64_t n, std::string* data) {
  data->clear();
  data->reserve(static_cast<size_t>(n));
  bool longer = false;
  absl::Status st = client_->GetObjectRange(checkpoint_.bucket, Key(f), offset_, n, [&](absl::string_view piece) {
    if (static_cast<int64_t>(data->size() + piece.size()) > n) {
      longer = true;  // never more than asked for in memory
      return;
    }
    data->append(piece.data(), piece.size());
  });
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("checkpoint ", uuid_, ": file ", f.path, ": ", st.message()));
  }
  if (longer || static_cast<int64_t>(data->size()) != n) {
    return Lost(f, absl::StrCat("a range of ", n, " bytes at ", offset_, " read back as ",
                                longer ? "more" : std::to_string(data->size())));
  }
  EVP_DigestUpdate(ctx_.get(), data->data(), data->size());
  return absl::OkStatus();
}

absl::Status S3CheckpointFiles::FinishFile(const File& f) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_.get(), digest, &len);
  ctx_.reset();
  const std::string got = HexOf(digest, len);
  if (got != md5_[index_]) return Lost(f, absl::StrCat("MD5 ", got, "; the manifest says ", md5_[index_]));
  return absl::OkStatus();
}

absl::StatusOr<bool> S3CheckpointFiles::Next(apiv1::DownloadCheckpointResponse* out) {
  if (index_ >= files_.size()) return false;
  const File& f = files_[index_];
  if (!ctx_) DET_RETURN_IF_ERROR(StartFile(f));
  const int64_t n = std::min(chunk_, f.size - offset_);
  out->Clear();
  out->set_path(f.path);
  out->set_offset(offset_);
  out->set_file_size(f.size);
  if (n > 0) DET_RETURN_IF_ERROR(ReadRange(f, n, out->mutable_data()));
  offset_ += n;
  if (offset_ >= f.size) {
    // The last chunk goes out only when the whole file matched.
    DET_RETURN_IF_ERROR(FinishFile(f));
    offset_ = 0;
    ++index_;
  }
  return true;
}

}  // namespace

absl::StatusOr<s3::S3Location> S3CheckpointOfRow(const s3::S3Location& experiment, const CheckpointRow& row) {
  auto refuse = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", row.uuid, ": its recorded path '",
                                                      row.storage_path.substr(0, 256), "' ", why,
                                                      "; nothing is read or deleted"));
  };
  absl::StatusOr<s3::S3Location> expected = s3::CheckpointLocation(experiment, row.uuid);
  if (!expected.ok()) return refuse(std::string(expected.status().message()));
  absl::StatusOr<s3::S3Location> recorded = s3::ParseS3Url(row.storage_path);
  if (!recorded.ok()) return refuse(absl::StrCat("is not an s3:// URL (", recorded.status().message(), ")"));
  if (recorded->bucket != expected->bucket || recorded->key_prefix != expected->key_prefix) {
    return refuse(absl::StrCat("is not ", s3::FormatS3Url(*expected), ", its place under experiment ",
                               row.experiment_id, "'s storage ", s3::FormatS3Url(experiment)));
  }
  return *std::move(expected);
}

absl::StatusOr<std::optional<int64_t>> CheckManifestAgainstReport(const s3::Manifest& manifest,
                                                                  const std::map<std::string, int64_t>& resources,
                                                                  const std::string& uuid, const std::string& url) {
  auto incomplete = [&](const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", uuid, ": its objects in ", url, " are incomplete (", why,
                     "); it is not recorded: save it again (det-trial reports a checkpoint only after its "
                     "manifest is written)"));
  };
  std::map<std::string, int64_t> listed;
  for (const s3::ManifestFile& f : manifest.files) listed[f.path] = f.size;
  for (const auto& [path, size] : resources) {
    auto it = listed.find(path);
    if (it == listed.end()) return incomplete(absl::StrCat("file ", path.substr(0, 256), " missing"));
    if (it->second != size) {
      return incomplete(absl::StrCat("file ", path.substr(0, 256), " is ", it->second, " bytes; ", size, " reported"));
    }
  }
  // Files the report did not list (a callback's subdirectories: det-trial
  // reports only the top-level files but uploads the whole directory) may
  // be there; the manifest's own rules bound them. metadata.json must be.
  auto meta = listed.find(kCheckpointMetadataFile);
  if (meta == listed.end()) return incomplete(absl::StrCat("file ", kCheckpointMetadataFile, " missing"));
  if (resources.count(kCheckpointMetadataFile)) return std::optional<int64_t>();
  return std::optional<int64_t>(meta->second);
}

absl::StatusOr<std::optional<int64_t>> VerifyS3CheckpointReport(s3::S3Client& client,
                                                                const s3::S3Location& checkpoint,
                                                                const std::map<std::string, int64_t>& resources,
                                                                const std::string& uuid) {
  const std::string url = s3::FormatS3Url(checkpoint);
  absl::StatusOr<s3::Manifest> manifest = s3::ReadManifest(client, checkpoint);
  if (absl::IsNotFound(manifest.status())) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", uuid, ": its objects in ", url,
                                                      " are incomplete (no manifest ", s3::kManifestName,
                                                      "); it is not recorded"));
  }
  if (absl::IsInvalidArgument(manifest.status())) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", uuid, ": its manifest in ", url,
                                                      " is malformed: ", manifest.status().message()));
  }
  if (!manifest.ok()) return manifest.status();
  return CheckManifestAgainstReport(*manifest, resources, uuid, url);
}

absl::StatusOr<int64_t> DeleteS3CheckpointRow(s3::S3Client& client, const s3::S3Location& experiment,
                                              const CheckpointRow& row) {
  DET_ASSIGN_OR_RETURN(s3::S3Location checkpoint, S3CheckpointOfRow(experiment, row));
  return s3::DeleteCheckpoint(client, checkpoint, experiment.key_prefix);
}

absl::StatusOr<std::unique_ptr<CheckpointFiles>> OpenS3CheckpointFiles(std::unique_ptr<s3::S3Client> client,
                                                                       const s3::S3Location& experiment,
                                                                       const CheckpointRow& row,
                                                                       const CheckpointFileLimits& limits) {
  DET_ASSIGN_OR_RETURN(s3::S3Location checkpoint, S3CheckpointOfRow(experiment, row));
  int64_t total = 0;
  DET_ASSIGN_OR_RETURN(std::vector<CheckpointFiles::File> files,
                       CheckpointFiles::CheckResources(row, limits, &total));
  absl::StatusOr<s3::Manifest> manifest = s3::ReadManifest(*client, checkpoint);
  if (absl::IsNotFound(manifest.status())) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", row.uuid, ": its manifest in ",
                                            s3::FormatS3Url(checkpoint), " is gone"));
  }
  if (!manifest.ok()) {
    return absl::Status(manifest.status().code(),
                        absl::StrCat("checkpoint ", row.uuid, ": ", manifest.status().message()));
  }
  std::map<std::string, const s3::ManifestFile*> listed;
  for (const s3::ManifestFile& f : manifest->files) listed[f.path] = &f;
  for (const CheckpointFiles::File& f : files) {
    auto it = listed.find(f.path);
    if (it == listed.end() || it->second->size != f.size) {
      return absl::DataLossError(absl::StrCat("checkpoint ", row.uuid, ": file ", f.path, ": ",
                                              it == listed.end() ? "not in" : "another size in", " the manifest of ",
                                              s3::FormatS3Url(checkpoint)));
    }
  }
  // Every file of the manifest goes out (metadata.json and what a callback
  // wrote in subdirectories, which the report does not list), so that the
  // download restores whole; the same bounds as for recorded resources.
  CheckpointRow whole = row;
  whole.resources.clear();
  for (const s3::ManifestFile& f : manifest->files) whole.resources[f.path] = f.size;
  DET_ASSIGN_OR_RETURN(files, CheckpointFiles::CheckResources(whole, limits, &total));
  std::vector<std::string> md5;
  for (const CheckpointFiles::File& f : files) md5.push_back(listed.at(f.path)->md5);
  return std::unique_ptr<CheckpointFiles>(new S3CheckpointFiles(std::move(client), std::move(checkpoint), row.uuid,
                                                                std::move(files), std::move(md5), total,
                                                                std::max<int64_t>(1, limits.chunk_bytes)));
}

}  // namespace det::master
