#include "cli/table.h"

#include <sstream>

#include <gtest/gtest.h>

namespace det::cli {
namespace {

TEST(TableTest, AlignsColumnsToTheWidestCell) {
  Table t({"ID", "STATE"});
  t.AddRow({"1", "ACTIVE"});
  t.AddRow({"100", "PAUSED"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(),
            " ID  | STATE\n"
            "-----+--------\n"
            " 1   | ACTIVE\n"
            " 100 | PAUSED\n");
}

TEST(TableTest, EmptyTablePrintsTheHeader) {
  Table t({"A", "LONG HEADER"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(),
            " A | LONG HEADER\n"
            "---+-------------\n");
  EXPECT_EQ(t.num_rows(), 0u);
}

TEST(TableTest, ShortRowsArePaddedAndLongRowsKept) {
  Table t({"A", "B"});
  t.AddRow({"x"});
  t.AddRow({"1", "2", "extra"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(),
            " A | B\n"
            "---+---+-------\n"
            " x\n"
            " 1 | 2 | extra\n");
}

TEST(TableTest, WidthCountsUtf8CodePoints) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("\xc3\xa9t\xc3\xa9"), 3u);  // "été"
  Table t({"N"});
  t.AddRow({"\xc3\xa9t\xc3\xa9"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(),
            " N\n"
            "-----\n"
            " \xc3\xa9t\xc3\xa9\n");
}

TEST(TableTest, KeyValuesAreAligned) {
  std::ostringstream out;
  PrintKeyValues(out, {{"ID", "1"}, {"State", "ACTIVE"}, {"Empty", ""}});
  EXPECT_EQ(out.str(),
            "ID:    1\n"
            "State: ACTIVE\n"
            "Empty:\n");
}

}  // namespace
}  // namespace det::cli
