#include "cli/terminal_text.h"

#include <gtest/gtest.h>

#include <sstream>

#include "cli/table.h"

namespace det::cli {
namespace {

TEST(TerminalTextTest, EscapesCsiOscAndFakeRows) {
  EXPECT_EQ(TerminalText("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(TerminalText("\x1b]0;pwned\a"), "\\x1b]0;pwned\\x07");
  EXPECT_EQ(TerminalText("x\n 9 | FAKE"), "x\\n 9 | FAKE");
  EXPECT_EQ(TerminalText("a\rb\tc\x7f"), "a\\rb\\tc\\x7f");
  EXPECT_EQ(TerminalText(std::string("n\0ul", 4)), "n\\x00ul");
}

TEST(TerminalTextTest, EscapesC1AndInvalidUtf8ButKeepsPrintableUtf8) {
  EXPECT_EQ(TerminalText("\xc2\x9b" "2J"), "\\u009b2J");
  EXPECT_EQ(TerminalText("\xc2\x80\xc2\x9f"), "\\u0080\\u009f");
  EXPECT_EQ(TerminalText("\x9b\xff"), "\\x9b\\xff");
  EXPECT_EQ(TerminalText("caf\xc3\xa9 \xc2\xa0 \xe2\x82\xac \xf0\x9f\x98\x80 back\\slash"),
            "caf\xc3\xa9 \xc2\xa0 \xe2\x82\xac \xf0\x9f\x98\x80 back\\slash");
}

TEST(TerminalTextTest, EscapesBidiAndLineSeparatorControls) {
  // U+202E RIGHT-TO-LEFT OVERRIDE reverses what follows; U+2028 breaks a line.
  EXPECT_EQ(TerminalText("exp\xe2\x80\xaegnp.exe"), "exp\\u202egnp.exe");
  EXPECT_EQ(TerminalText("a\xe2\x80\xa8" "b\xe2\x80\xa9" "c"), "a\\u2028b\\u2029c");
  EXPECT_EQ(TerminalText("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad"), "\\u202a\\u202b\\u202c\\u202d");
  EXPECT_EQ(TerminalText("\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9"), "\\u2066\\u2067\\u2068\\u2069");
  EXPECT_EQ(TerminalText("\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c"), "\\u200e\\u200f\\u061c");
  // Their neighbours stay: U+2027, U+202F, U+2065 (unassigned), U+206A, U+200D, Arabic U+061B.
  const std::string kept = "\xe2\x80\xa7\xe2\x80\xaf\xe2\x81\xa5\xe2\x81\xaa\xe2\x80\x8d\xd8\x9b";
  EXPECT_EQ(TerminalText(kept), kept);
}

TEST(TerminalTextTest, KeepLayoutKeepsOnlyNewlineAndTab) {
  EXPECT_EQ(TerminalText("a\n\tb\r\x1b", kKeepLayout), "a\n\tb\\r\\x1b");
}

TEST(TerminalTextTest, TablesAndKeyValuesEscapeEveryCell) {
  Table t({"NAME", "LABELS"});
  t.AddRow({"evil\x1b[2J", "x\n 99 | fake"});
  std::ostringstream out;
  t.Print(out);
  PrintKeyValues(out, {{"Description", "\x1b]0;pwned\a"}});
  const std::string s = out.str();
  EXPECT_EQ(s.find('\x1b'), std::string::npos) << s;
  EXPECT_EQ(s.find('\a'), std::string::npos) << s;
  int lines = 0;
  for (char c : s) lines += c == '\n';
  EXPECT_EQ(lines, 4) << s;  // header, separator, one row, one key-value
}

}  // namespace
}  // namespace det::cli
