#include "common/shell_quote.h"

#include <gtest/gtest.h>

namespace det {
namespace {

TEST(ShellQuoteTest, QuotesEverythingAsOneWord) {
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("/tmp/a b"), "'/tmp/a b'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("$(rm -rf /)"), "'$(rm -rf /)'");
}

TEST(ShellQuoteTest, ShellWordLeavesSafeWordsAlone) {
  EXPECT_EQ(ShellWord("/home/u/.local"), "/home/u/.local");
  EXPECT_EQ(ShellWord("a-b_c+d:e@f%g"), "a-b_c+d:e@f%g");
  EXPECT_EQ(ShellWord(""), "''");
  EXPECT_EQ(ShellWord("/tmp/my dir"), "'/tmp/my dir'");
  EXPECT_EQ(ShellWord("a;b"), "'a;b'");
  EXPECT_EQ(ShellWord("x'y"), "'x'\\''y'");
}

}  // namespace
}  // namespace det
