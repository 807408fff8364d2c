#include "common/utf8.h"

#include <gtest/gtest.h>

namespace det {
namespace {

TEST(Utf8Test, SanitizedReplacesEachInvalidByteWithU_FFFD) {
  EXPECT_EQ(Utf8Sanitized("ok \xc3\xa9 \xf0\x9f\x98\x80"), "ok \xc3\xa9 \xf0\x9f\x98\x80");
  EXPECT_EQ(Utf8Sanitized("a\xff" "b"), "a\xEF\xBF\xBD" "b");
  // An overlong NUL, a surrogate, a truncated sequence at the end.
  EXPECT_EQ(Utf8Sanitized("\xc0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Sanitized("\xed\xa0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Sanitized("x\xe2\x82"), "x\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(IsUtf8(Utf8Sanitized("\xff\xfe\x80\xc0\xed\xa0\x80 tail")));
  EXPECT_EQ(Utf8Sanitized("n\xffme", "?"), "n?me");
}

}  // namespace
}  // namespace det
