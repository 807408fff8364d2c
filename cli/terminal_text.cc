#include "cli/terminal_text.h"

#include <cstdio>

#include "common/utf8.h"

namespace det::cli {
namespace {

void AppendHex(std::string* out, const char* format, unsigned value) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), format, value);
  out->append(buf);
}

// The code point of the n-byte UTF-8 sequence at s[i] (n from Utf8SequenceAt).
unsigned CodePointAt(std::string_view s, size_t i, size_t n) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  unsigned cp = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  return cp;
}

// Format controls that reorder or break what follows on screen (Trojan
// Source, CVE-2021-42574): a name with them could pose as another row or
// reverse a column. Shown as \u escapes.
bool IsBidiOrLineControl(unsigned cp) {
  return (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x200E || cp == 0x200F || cp == 0x061C;
}

}  // namespace

std::string TerminalText(std::string_view s, TerminalTextMode mode) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) {  // not UTF-8: show the byte
      AppendHex(&out, "\\x%02x", c);
      i += 1;
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) <= 0x9F) {  // C1
      AppendHex(&out, "\\u%04x", static_cast<unsigned char>(s[i + 1]));
      i += 2;
    } else if (n > 1 && IsBidiOrLineControl(CodePointAt(s, i, n))) {
      AppendHex(&out, "\\u%04x", CodePointAt(s, i, n));
      i += n;
    } else if (c >= 0x20 && c != 0x7F) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      const bool keep = mode == kKeepLayout && (c == '\n' || c == '\t');
      if (keep) {
        out.push_back(static_cast<char>(c));
      } else if (c == '\n') {
        out.append("\\n");
      } else if (c == '\r') {
        out.append("\\r");
      } else if (c == '\t') {
        out.append("\\t");
      } else {
        AppendHex(&out, "\\x%02x", c);
      }
      i += 1;
    }
  }
  return out;
}

}  // namespace det::cli
