#include "agent/artifact_cache.h"

#include <openssl/evp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace det::agent {
namespace {

namespace fs = std::filesystem;

// Incremental SHA-256 over OpenSSL's EVP interface.
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
  }
  void Update(absl::string_view data) { EVP_DigestUpdate(ctx_.get(), data.data(), data.size()); }
  std::string HexDigest() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &len);
    static const char kHex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
      out.push_back(kHex[md[i] >> 4]);
      out.push_back(kHex[md[i] & 0xf]);
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

}  // namespace

std::string Sha256Hex(absl::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.HexDigest();
}

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  Sha256 h;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof(buf));
    h.Update(absl::string_view(buf, static_cast<size_t>(in.gcount())));
  }
  if (in.bad()) return absl::InternalError(absl::StrCat("read error on ", path));
  return h.HexDigest();
}

bool IsSha256Hex(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

ArtifactCache::ArtifactCache(std::string dir) : dir_(std::move(dir)) {}

std::string ArtifactCache::PathFor(const std::string& sha256) const {
  return (fs::path(dir_) / (sha256 + ".so")).string();
}

absl::StatusOr<std::string> ArtifactCache::Get(const std::string& sha256, const Fetcher& fetch) {
  if (!IsSha256Hex(sha256)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed sha256 '", sha256, "'"));
  }
  const std::string path = PathFor(sha256);
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
