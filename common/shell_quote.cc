#include "common/shell_quote.h"

#include <cctype>
#include <cstring>

#include "absl/strings/str_replace.h"

namespace det {

std::string ShellQuote(std::string_view s) {
  return "'" + absl::StrReplaceAll(absl::string_view(s.data(), s.size()), {{"'", "'\\''"}}) + "'";
}

std::string ShellWord(std::string_view s) {
  bool safe = !s.empty();
  for (char c : s) {
    safe = safe && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_./-+:@%", c) != nullptr);
  }
  return safe ? std::string(s) : ShellQuote(s);
}

}  // namespace det
