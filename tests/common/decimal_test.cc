// ParseDecimal: the CLI's one reader of typed floating-point numbers takes plain decimals
// only (strtod's hex floats, inf, nan and blanks are refused).
#include "common/decimal.h"

#include <gtest/gtest.h>

#include <cmath>

namespace multiscreen {
namespace {

TEST(DecimalTest, PlainDecimalsAreReadExactlyAsStrtodReadsThem) {
  for (const char* text : {"2", "0.0625", ".5", "5.", "-1.25", "+3", "1e-3", "2.5E+2", "0", "-0", "1024",
                           "0.1000000000000000055511151231257827"}) {
    double x = -7;
    EXPECT_TRUE(ParseDecimal(text, &x)) << text;
    EXPECT_EQ(x, std::strtod(text, nullptr)) << text;
  }
  double negative_zero = 1;
  ASSERT_TRUE(ParseDecimal("-0", &negative_zero));
  EXPECT_TRUE(std::signbit(negative_zero));
}

TEST(DecimalTest, HexInfinityNanBlanksAndOverflowAreNotDecimals) {
  for (const char* text : {"0x2", "0X1p-4", "inf", "-inf", "infinity", "nan", "NaN", " 2", "2 ", "\t2", "", "+", "-",
                           ".", "e3", "1e", "1e+", "1.2.3", "2f", "1,5", "--1", "+-1", "1e999", "-1e999", "1_000"}) {
    double x = -7;
    EXPECT_FALSE(ParseDecimal(text, &x)) << "'" << text << "'";
    EXPECT_EQ(x, -7) << text;  // untouched
  }
}

}  // namespace
}  // namespace multiscreen
