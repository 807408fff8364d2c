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
