#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace det {

void Sha256::CtxFree::operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Fails only when OpenSSL cannot allocate: never hand out a wrong hash.
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() = default;

void Sha256::Update(absl::string_view data) { EVP_DigestUpdate(ctx_.get(), data.data(), data.size()); }

std::string Sha256::HexDigest() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_.get(), md, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 0xf]);
  }
  return out;
}

std::string Sha256Hex(absl::string_view data) {
  Sha256 hash;
  hash.Update(data);
  return hash.HexDigest();
}

absl::StatusOr<std::string> Sha256File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  Sha256 hash;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof(buf));
    hash.Update(absl::string_view(buf, static_cast<size_t>(in.gcount())));
  }
  if (in.bad()) return absl::InternalError(absl::StrCat("read error on ", path));
  return hash.HexDigest();
}

bool IsSha256Hex(absl::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace det
