#include "agent/artifact_cache.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/safe_path.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace det::agent {

namespace fs = std::filesystem;

ArtifactCache::ArtifactCache(std::string dir) : dir_(std::move(dir)) {}

std::string ArtifactCache::PathFor(const std::string& sha256) const {
  return (fs::path(dir_) / (sha256 + ".so")).string();
}

absl::StatusOr<std::string> ArtifactCache::Get(const std::string& sha256, const Fetcher& fetch) {
  // The hash names a file: never let it name one outside dir_.
  DET_RETURN_IF_ERROR(ValidateSha256(sha256, "sha256"));
  DET_ASSIGN_OR_RETURN(const std::string path, JoinUnder(dir_, sha256 + ".so", "sha256"));
  {
    absl::MutexLock lock(&mu_);
    // Wait for another download of the same hash to finish.
    auto not_in_flight = [this, &sha256]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return in_flight_.count(sha256) == 0;
    };
    mu_.Await(absl::Condition(&not_in_flight));
    std::error_code ec;
    if (fs::exists(path, ec)) return path;
    in_flight_[sha256] = true;
  }
  absl::StatusOr<std::string> result = Download(sha256, fetch);
  absl::MutexLock lock(&mu_);
  in_flight_.erase(sha256);
  return result;
}

absl::StatusOr<std::string> ArtifactCache::Download(const std::string& sha256,
                                                    const Fetcher& fetch) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return absl::InternalError(absl::StrCat("mkdir ", dir_, ": ", ec.message()));
  const std::string path = PathFor(sha256);
  const std::string tmp = path + ".tmp";
  Sha256 hash;
  int64_t written = 0;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat("cannot create ", tmp));
    ChunkSink sink = [&](int64_t offset, absl::string_view data) -> absl::Status {
      if (offset != written) {
        return absl::DataLossError(
            absl::StrCat("artifact chunk at offset ", offset, ", expected ", written));
      }
      out.write(data.data(), static_cast<std::streamsize>(data.size()));
      if (!out) return absl::InternalError(absl::StrCat("write error on ", tmp));
      hash.Update(data);
      written += static_cast<int64_t>(data.size());
      return absl::OkStatus();
    };
    absl::Status st = fetch(sha256, sink);
    out.close();
    if (st.ok() && !out) st = absl::InternalError(absl::StrCat("write error on ", tmp));
    if (!st.ok()) {
      fs::remove(tmp, ec);
      return st;
    }
  }
  const std::string got = hash.HexDigest();
  if (got != sha256) {
    fs::remove(tmp, ec);
    return absl::DataLossError(absl::StrCat("artifact ", sha256, " hashes to ", got, " (",
                                            written, " bytes); discarded"));
  }
  fs::permissions(tmp, fs::perms::owner_read | fs::perms::owner_write | fs::perms::owner_exec |
                            fs::perms::group_read | fs::perms::others_read,
                  ec);
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("rename ", tmp, ": ", ec.message()));
  spdlog::info("cached artifact {} ({} bytes)", sha256, written);
  return path;
}

}  // namespace det::agent
