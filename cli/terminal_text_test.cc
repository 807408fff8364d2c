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
