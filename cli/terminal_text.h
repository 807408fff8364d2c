// Server-provided text made safe to print on a terminal.
//
// Names, descriptions, labels, usernames, hparams, state reasons and log
// lines come from other users and their trials. Printed raw, an ESC (CSI
// "\x1b[2J" clears the screen, OSC "\x1b]0;...\a" sets the window title), a
// C1 control (U+009B is a one-character CSI), a carriage return or a newline
// can rewrite what the terminal shows, fake table rows included (cf. kubectl
// CVE-2021-25743). TerminalText replaces each such character with a visible
// escape:
//
//   TerminalText("a\x1b[2Jb")      == "a\\x1b[2Jb"
//   TerminalText("x\ny")           == "x\\ny"         (one table row stays one)
//   TerminalText("x\ny", kKeepLayout) == "x\ny"       (multi-line describe text)
//   TerminalText("\xc2\x9b")       == "\\u009b"       (C1 CSI)
//   TerminalText("\xff")           == "\\xff"         (not UTF-8)
//
// Thread-safe (pure).
#ifndef DET_CLI_TERMINAL_TEXT_H_
#define DET_CLI_TERMINAL_TEXT_H_

#include <string>
#include <string_view>

namespace det::cli {

enum TerminalTextMode {
  // Every C0 control is escaped, \n and \t included: for table cells, one-line
  // values and log lines.
  kOneLine,
  // \n and \t are kept (everything else escaped as in kOneLine): for
  // multi-line text such as an error message or a summary.
  kKeepLayout,
};

// `s` with C0 controls (U+0000-U+001F, see `mode`), DEL, C1 controls
// (U+0080-U+009F) and bytes that are not UTF-8 replaced by visible escapes:
// \n \r \t for those three, \xNN for other bytes, \uNNNN for C1. Everything
// else (printable ASCII, backslash included, and valid UTF-8 above U+009F) is
// kept as is. At most 4 times as long as `s`.
std::string TerminalText(std::string_view s, TerminalTextMode mode = kOneLine);

}  // namespace det::cli

#endif  // DET_CLI_TERMINAL_TEXT_H_
