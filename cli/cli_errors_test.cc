#include "cli/cli_errors.h"

#include <gtest/gtest.h>

namespace det::cli {
namespace {

TEST(NotUtf8ErrorTest, NamesFileLineColumnAndByteAndTheFix) {
  EXPECT_EQ(NotUtf8Error("exp.yaml", "name: caf\xc3\xa9\n"), "");
  EXPECT_EQ(NotUtf8Error("exp.yaml", "name: x\ndescription: caf\xe9 au lait\n"),
            "exp.yaml: line 2, column 17 (byte 0xe9) is not UTF-8; save the file as UTF-8 "
            "(e.g. iconv -f latin1 -t utf-8)");
  EXPECT_EQ(NotUtf8Error("a.yaml", "\xff"), "a.yaml: line 1, column 1 (byte 0xff) is not UTF-8; save the file as "
                                            "UTF-8 (e.g. iconv -f latin1 -t utf-8)");
}

}  // namespace
}  // namespace det::cli
