// Strings as words of a POSIX shell command line.
//
// Pure functions; thread-safe.
#ifndef DET_COMMON_SHELL_QUOTE_H_
#define DET_COMMON_SHELL_QUOTE_H_

#include <string>
#include <string_view>

namespace det {

// `s` in single quotes, each ' written as '\'': one word whatever it holds.
std::string ShellQuote(std::string_view s);

// `s` as it is when it is non-empty and holds only [A-Za-z0-9_./+:@%-]
// (nothing a shell interprets), else ShellQuote(s): for commands a person
// reads and copies.
std::string ShellWord(std::string_view s);

}  // namespace det

#endif  // DET_COMMON_SHELL_QUOTE_H_
