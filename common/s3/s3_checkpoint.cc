#include "common/s3/s3_checkpoint.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/safe_path.h"
#include "nlohmann/json.hpp"

namespace det::s3 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool HasControlChar(absl::string_view s) {
  for (char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7f) return true;
  }
  return false;
}

// Why `path` is not a usable relative path of a checkpoint file ("" when
// it is): '/'-separated, no empty, "." or ".." segment, no backslash or
// control character.
std::string PathProblem(absl::string_view path) {
  if (path.empty()) return "is empty";
  if (path.front() == '/') return "is absolute";
  if (HasControlChar(path) || absl::StrContains(path, "\\")) return "has a backslash or control character";
  for (absl::string_view seg : absl::StrSplit(path, '/')) {
    if (seg.empty() || seg == "." || seg == "..") return "has an empty, \".\" or \"..\" segment";
  }
  return "";
}

std::string Key(const S3Location& checkpoint, absl::string_view path) {
  return absl::StrCat(checkpoint.key_prefix, "/", path);
}

// The checks of one file path of checkpoint `checkpoint`.
absl::Status CheckFilePath(absl::string_view path, const S3Location& checkpoint, const S3Limits& limits,
                           absl::string_view what) {
  if (std::string problem = PathProblem(path); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " \"", path.substr(0, 256), "\" ", problem));
  }
  if (path == kManifestName) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", path, "\" has the manifest's name: rename the file (", kManifestName,
                     " at the top of a checkpoint is det-cpp's)"));
  }
  const size_t key_bytes = checkpoint.key_prefix.size() + 1 + path.size();
  if (key_bytes > static_cast<size_t>(limits.max_key_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " \"", path.substr(0, 256), "\" makes the object key ",
                                                   key_bytes, " bytes long, over the limit of ", limits.max_key_bytes,
                                                   ": use shorter file names or a shorter checkpoint_storage.prefix"));
  }
  return absl::OkStatus();
}

bool IsLowerHex(absl::string_view s, size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

absl::StatusOr<ManifestFile> ParseEntry(const json& e, size_t i, const S3Location& checkpoint,
                                        const S3Limits& limits) {
  const std::string what = absl::StrCat("manifest files[", i, "]");
  if (!e.is_object() || e.size() != 3 || !e.contains("path") || !e.contains("size") || !e.contains("md5")) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not {\"path\", \"size\", \"md5\"}"));
  }
  const json& path = e["path"];
  const json& size = e["size"];
  const json& md5 = e["md5"];
  if (!path.is_string() || !md5.is_string() || !size.is_number_integer()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": path and md5 must be strings, size an integer"));
  }
  ManifestFile f;
  f.path = path.get<std::string>();
  if (absl::Status s = CheckFilePath(f.path, checkpoint, limits, what + " path"); !s.ok()) return s;
  f.size = size.is_number_unsigned() && size.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? -1
                                                                                                : size.get<int64_t>();
  if (f.size < 0 || f.size > limits.max_object_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " (", f.path, "): size must be 0..", limits.max_object_bytes));
  }
  f.md5 = md5.get<std::string>();
  if (!IsLowerHex(f.md5, 32)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " (", f.path, "): md5 must be 32 lower-case hex digits"));
  }
  return f;
}

// Every regular file under `dir`, relative, sorted; a symlink or another
// kind of file is an error naming it.
absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::status(dir, ec))) {  // `dir` is the caller's; its contents are checked
    return absl::InvalidArgumentError(absl::StrCat("checkpoint directory ", dir, " is not a directory"));
  }
  std::vector<std::string> files;
  fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    // Lexically: fs::relative would resolve a symlink to its target's path.
    const std::string rel = it->path().lexically_relative(dir).generic_string();
    if (fs::is_directory(st)) continue;
    if (!fs::is_regular_file(st)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint file ", rel, " in ", dir, " is ", fs::is_symlink(st) ? "a symbolic link" : "not a regular file",
          ": a checkpoint uploaded to S3 holds regular files only (copy the target in instead)"));
    }
    if (files.size() >= static_cast<size_t>(kMaxCheckpointFiles)) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint directory ", dir, " holds more than ",
                                                     kMaxCheckpointFiles, " files: save fewer, larger files"));
    }
    files.push_back(rel);
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list checkpoint directory ", dir, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

// Uploads one file and returns its manifest entry.
absl::StatusOr<ManifestFile> UploadFile(S3Client& client, const S3Location& checkpoint, const std::string& dir,
                                        const std::string& rel) {
  const std::string path = dir + "/" + rel;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint file ", path, " vanished or changed kind"));
  }
  absl::StatusOr<std::string> md5 = FileMd5Hex(path);
  if (!md5.ok()) return md5.status();
  absl::StatusOr<ObjectInfo> info = client.PutObjectFromFile(checkpoint.bucket, Key(checkpoint, rel), path);
  if (!info.ok()) return info.status();
  // info->md5 is the MD5 of the bytes sent (S3 checked each request's
  // Content-MD5), so this holds with SSE-KMS/SSE-C too, whose ETags are not MD5s.
  if (info->size != st.st_size || info->md5 != *md5) {
    return absl::DataLossError(absl::StrCat("checkpoint file ", path, " changed while it was uploaded to ",
                                            FormatS3Url({checkpoint.bucket, Key(checkpoint, rel)})));
  }
  return ManifestFile{rel, static_cast<int64_t>(st.st_size), *md5};
}

// Creates the parent directories of `rel` under `root` (all 0700).
absl::Status MakeParents(const std::string& root, absl::string_view rel) {
  std::string dir = root;
  std::vector<absl::string_view> segs = absl::StrSplit(rel, '/');
  segs.pop_back();
  for (absl::string_view seg : segs) {
    absl::StrAppend(&dir, "/", seg);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status DownloadInto(S3Client& client, const S3Location& checkpoint, const Manifest& manifest,
                          const std::string& tmp) {
  for (const ManifestFile& f : manifest.files) {
    if (absl::Status s = MakeParents(tmp, f.path); !s.ok()) return s;
    if (absl::Status s = client.GetObjectToFile(checkpoint.bucket, Key(checkpoint, f.path), tmp + "/" + f.path,
                                                f.size, f.md5);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// The file system that will hold `dir` (its parent's) must have room for
// the manifest's bytes plus kDownloadDiskMarginBytes, checked before the
// first GET (a manifest may claim up to 10k x 5 TiB).
absl::Status CheckFreeSpace(const S3Location& checkpoint, const Manifest& manifest, const std::string& dir) {
  std::string parent = fs::path(dir).parent_path().string();
  if (parent.empty()) parent = ".";
  struct statvfs vfs {};
  if (::statvfs(parent.c_str(), &vfs) != 0) {
    return absl::InternalError(absl::StrCat("cannot read the free space of ", parent, ": ", std::strerror(errno)));
  }
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const uint64_t needed = static_cast<uint64_t>(manifest.total_bytes()) + kDownloadDiskMarginBytes;
  if (needed > free_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cannot download checkpoint ", FormatS3Url(checkpoint), " into ", dir, ": its manifest lists ",
        manifest.total_bytes(), " bytes (", manifest.files.size(), " files), which with a margin of ",
        kDownloadDiskMarginBytes, " bytes needs ", needed, " bytes, but the file system of ", parent, " has ",
        free_bytes, " bytes free; free disk space there (or check that the checkpoint is the one you meant)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<S3Location> ParseS3Url(absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "s3://")) {
    return absl::InvalidArgumentError(absl::StrCat("\"", url.substr(0, 256), "\" is not an s3://bucket/prefix URL"));
  }
  const size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (!ValidBucketName(loc.bucket)) {
    return absl::InvalidArgumentError(absl::StrCat("s3 URL \"", url.substr(0, 256), "\": bucket \"",
                                                   loc.bucket.substr(0, 64),
                                                   "\" is not a valid bucket name (3-63 of a-z, 0-9, '.', '-')"));
  }
  absl::string_view prefix = slash == absl::string_view::npos ? "" : rest.substr(slash + 1);
  absl::ConsumeSuffix(&prefix, "/");
  if (prefix.size() > kMaxPrefixBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("s3 URL \"", url.substr(0, 256), "...\": the prefix is longer than ", kMaxPrefixBytes, " bytes"));
  }
  if (!prefix.empty()) {
    if (std::string problem = PathProblem(prefix); !problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("s3 URL \"", url, "\": the prefix ", problem));
    }
  }
  loc.key_prefix = std::string(prefix);
  return loc;
}

std::string FormatS3Url(const S3Location& location) {
  return location.key_prefix.empty() ? absl::StrCat("s3://", location.bucket)
                                     : absl::StrCat("s3://", location.bucket, "/", location.key_prefix);
}

bool IsS3Url(absl::string_view storage_path) { return absl::StartsWith(storage_path, "s3://"); }

absl::StatusOr<S3Location> CheckpointLocation(const S3Location& storage, absl::string_view uuid) {
  if (absl::Status s = ValidateUuid(uuid, "checkpoint uuid"); !s.ok()) return s;
  S3Location loc = storage;
  loc.key_prefix = storage.key_prefix.empty() ? std::string(uuid) : absl::StrCat(storage.key_prefix, "/", uuid);
  return loc;
}

int64_t Manifest::total_bytes() const {
  int64_t total = 0;
  for (const ManifestFile& f : files) total += f.size;
  return total;
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view text, const S3Location& checkpoint,
                                       const S3Limits& limits) {
  if (text.size() > static_cast<size_t>(kMaxManifestBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("manifest is larger than ", kMaxManifestBytes, " bytes"));
  }
  const json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return absl::InvalidArgumentError("manifest is not a JSON object");
  if (!j.contains("format") || j["format"] != 1) {
    return absl::InvalidArgumentError("manifest format is not 1 (written by a newer det-cpp?)");
  }
  if (!j.contains("files") || !j["files"].is_array()) return absl::InvalidArgumentError("manifest has no files array");
  const json& files = j["files"];
  if (files.size() > static_cast<size_t>(kMaxCheckpointFiles)) {
    return absl::InvalidArgumentError(absl::StrCat("manifest lists more than ", kMaxCheckpointFiles, " files"));
  }
  Manifest m;
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    absl::StatusOr<ManifestFile> f = ParseEntry(files[i], i, checkpoint, limits);
    if (!f.ok()) return f.status();
    if (!seen.insert(f->path).second) {
      return absl::InvalidArgumentError(absl::StrCat("manifest lists ", f->path, " twice"));
    }
    m.files.push_back(*std::move(f));
  }
  std::sort(m.files.begin(), m.files.end(),
            [](const ManifestFile& a, const ManifestFile& b) { return a.path < b.path; });
  return m;
}

std::string ManifestJson(const Manifest& manifest) {
  json files = json::array();
  for (const ManifestFile& f : manifest.files) files.push_back({{"path", f.path}, {"size", f.size}, {"md5", f.md5}});
  return json{{"format", 1}, {"files", std::move(files)}}.dump();
}

absl::StatusOr<Manifest> UploadCheckpoint(S3Client& client, const S3Location& checkpoint, const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> files = ListFiles(dir);
  if (!files.ok()) return files.status();
  for (const std::string& rel : *files) {
    if (absl::Status s = CheckFilePath(rel, checkpoint, client.limits(), "checkpoint file"); !s.ok()) return s;
  }
  Manifest manifest;
  for (const std::string& rel : *files) {
    absl::StatusOr<ManifestFile> f = UploadFile(client, checkpoint, dir, rel);
    if (!f.ok()) return f.status();
    manifest.files.push_back(*std::move(f));
  }
  const std::string text = ManifestJson(manifest);
  if (text.size() > static_cast<size_t>(kMaxManifestBytes)) {
    return absl::InvalidArgumentError(absl::StrCat("the manifest of ", dir, " would be ", text.size(),
                                                   " bytes, over ", kMaxManifestBytes, ": save fewer files"));
  }
  absl::StatusOr<ObjectInfo> put = client.PutObject(checkpoint.bucket, Key(checkpoint, kManifestName), text);
  if (!put.ok()) return put.status();
  return manifest;
}

absl::StatusOr<Manifest> ReadManifest(S3Client& client, const S3Location& checkpoint) {
  absl::StatusOr<std::string> text =
      client.GetObjectToString(checkpoint.bucket, Key(checkpoint, kManifestName), kMaxManifestBytes);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("checkpoint ", FormatS3Url(checkpoint), " has no ", kManifestName,
                                            ": it is incomplete (its upload did not finish) or deleted"));
  }
  if (!text.ok()) return text.status();
  absl::StatusOr<Manifest> m = ParseManifest(*text, checkpoint, client.limits());
  if (!m.ok()) {
    return absl::DataLossError(absl::StrCat("checkpoint ", FormatS3Url(checkpoint), ": ", m.status().message()));
  }
  return m;
}

absl::StatusOr<Manifest> DownloadCheckpoint(S3Client& client, const S3Location& checkpoint, const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(absl::StrCat("cannot download ", FormatS3Url(checkpoint), " into ", dir,
                                                 ": it exists; name a new directory"));
  }
  absl::StatusOr<Manifest> manifest = ReadManifest(client, checkpoint);
  if (!manifest.ok()) return manifest.status();
  if (absl::Status s = CheckFreeSpace(checkpoint, *manifest, dir); !s.ok()) return s;
  std::string tmp = dir + ".det-download-XXXXXX";
  if (::mkdtemp(tmp.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a directory beside ", dir, ": ", std::strerror(errno)));
  }
  absl::Status s = DownloadInto(client, checkpoint, *manifest, tmp);
  if (s.ok() && ::rename(tmp.c_str(), dir.c_str()) != 0) {
    s = absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", dir, ": ", std::strerror(errno)));
  }
  if (!s.ok()) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // never follows a symlink
    return s;
  }
  return manifest;
}

absl::StatusOr<int64_t> DeleteCheckpoint(S3Client& client, const S3Location& checkpoint,
                                         absl::string_view experiment_prefix) {
  absl::string_view uuid = checkpoint.key_prefix;
  const bool inside = experiment_prefix.empty() || absl::ConsumePrefix(&uuid, absl::StrCat(experiment_prefix, "/"));
  if (!inside || !ValidateUuid(uuid, "checkpoint uuid").ok() || !ValidBucketName(checkpoint.bucket)) {
    return absl::InvalidArgumentError(absl::StrCat("refusing to delete ", FormatS3Url(checkpoint),
                                                   ": not <uuid> under the experiment's prefix \"", experiment_prefix,
                                                   "\""));
  }
  const std::string prefix = checkpoint.key_prefix + "/";
  absl::StatusOr<std::vector<ObjectInfo>> objects = client.ListObjects(checkpoint.bucket, prefix);
  if (!objects.ok()) return objects.status();
  const std::string manifest_key = Key(checkpoint, kManifestName);
  std::vector<std::string> rest;
  bool has_manifest = false;
  for (const ObjectInfo& o : *objects) {
    if (!absl::StartsWith(o.key, prefix)) {
      return absl::FailedPreconditionError(absl::StrCat("listing ", FormatS3Url(checkpoint), "/ returned key \"",
                                                        o.key.substr(0, 256), "\" outside it; nothing deleted"));
    }
    if (o.key == manifest_key) {
      has_manifest = true;
    } else {
      rest.push_back(o.key);
    }
  }
  if (has_manifest) {  // first: a half-deleted checkpoint is incomplete
    if (absl::Status s = client.DeleteObjects(checkpoint.bucket, {manifest_key}); !s.ok()) return s;
  }
  if (!rest.empty()) {
    if (absl::Status s = client.DeleteObjects(checkpoint.bucket, rest); !s.ok()) return s;
  }
  return static_cast<int64_t>(rest.size()) + (has_manifest ? 1 : 0);
}

}  // namespace det::s3
