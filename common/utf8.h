#ifndef DET_COMMON_UTF8_H_
#define DET_COMMON_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace det {

// The length of the strict UTF-8 (RFC 3629: no overlong forms, no
// surrogates, at most U+10FFFF) sequence at `s[i]`, or 0 when none starts there.
inline size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4, cp = c & 0x07;
  } else {
    return 0;
  }
  if (n > s.size() - i) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3F);
  }
  if (n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
  if (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
  return n;
}

// U+FFFD REPLACEMENT CHARACTER, UTF-8 encoded.
inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

// `s` with each byte that is not part of a valid UTF-8 sequence replaced by
// `replacement` (U+FFFD unless told; '?' where the result names a file).
// The result is valid UTF-8 when `replacement` is, and at most
// replacement.size() times as long as `s`.
inline std::string Utf8Sanitized(std::string_view s, std::string_view replacement = kUtf8Replacement) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceAt(s, i);
    out.append(n == 0 ? replacement : s.substr(i, n));
    i += n == 0 ? 1 : n;
  }
  return out;
}

// The offset of the first byte of `s` that starts no valid UTF-8 sequence;
// std::string_view::npos when `s` is all UTF-8.
inline size_t Utf8InvalidAt(std::string_view s) {
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    if ((n = Utf8SequenceAt(s, i)) == 0) return i;
  }
  return std::string_view::npos;
}

inline bool IsUtf8(std::string_view s) {
  for (size_t i = 0, n = 0; i < s.size(); i += n) {
    if ((n = Utf8SequenceAt(s, i)) == 0) return false;
  }
  return true;
}

}  // namespace det

#endif  // DET_COMMON_UTF8_H_
