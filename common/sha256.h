// SHA-256 over OpenSSL's EVP interface, as lower-case hex: the hash that
// names trial.so artifacts (master store, agent cache) and API tokens.
#ifndef DET_COMMON_SHA256_H_
#define DET_COMMON_SHA256_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace det {

// Incremental SHA-256: Update() any number of times, then HexDigest() once.
// One object per hash; not thread-safe (use one per thread).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  // Adds `data` to the hash. Requires that HexDigest() was not called yet.
  void Update(absl::string_view data);
  // The 64 lower-case hex digits of the hash of everything added. Call once.
  std::string HexDigest();

 private:
  struct CtxFree {
    void operator()(EVP_MD_CTX* ctx) const;
  };
  std::unique_ptr<EVP_MD_CTX, CtxFree> ctx_;
};

// The 64 lower-case hex digits of the SHA-256 of `data`. Thread-safe.
std::string Sha256Hex(absl::string_view data);

// The SHA-256 (lower-case hex) of the file at `path`, read in chunks.
// Errors: NotFound when it cannot be opened, Internal on a read error.
// Thread-safe.
absl::StatusOr<std::string> Sha256File(const std::string& path);

// Whether `s` is 64 lower-case hex digits (what Sha256Hex returns). For an
// error naming the field, see ValidateSha256 in common/safe_path.h.
bool IsSha256Hex(absl::string_view s);

}  // namespace det

#endif  // DET_COMMON_SHA256_H_
