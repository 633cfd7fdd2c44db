// read_whole_number: what the .seq parser and the command line say about a number they refuse.
#include <gtest/gtest.h>

#include <string>

#include "model/vocab/number.hpp"

namespace fsdpsim {
namespace {

std::string why(const std::string& text, int64_t lo = 1, int64_t hi = 64) {
  int64_t v = -1;
  return read_whole_number(text, lo, hi, &v);
}

TEST(WholeNumber, AcceptsDigitsInRange) {
  int64_t v = 0;
  EXPECT_EQ(read_whole_number("64", 1, 64, &v), "");
  EXPECT_EQ(v, 64);
  EXPECT_EQ(read_whole_number("0007", 1, 64, &v), "");
  EXPECT_EQ(v, 7);
  EXPECT_EQ(read_whole_number("999999999999999999", 0, 999999999999999999LL, &v), "");
  EXPECT_EQ(v, 999999999999999999LL);
}

TEST(WholeNumber, SaysValueRangeAndWhy) {
  EXPECT_EQ(why("65"), "a whole number in 1..64, got 65 (larger than 64)");
  EXPECT_EQ(why("0"), "a whole number in 1..64, got 0 (smaller than 1)");
  EXPECT_EQ(why("18446744073709551615"), "a whole number in 1..64, got 18446744073709551615 (larger than 64)");
  EXPECT_EQ(why("18446744073709551616"), "a whole number in 1..64, got 18446744073709551616 (larger than 64, and than any 64-bit number)");
  EXPECT_EQ(why("-8"), "a whole number in 1..64, got -8 (negative; the smallest accepted is 1)");
  EXPECT_EQ(why("1e23"), "a whole number in 1..64, got '1e23' (an exponent; write the digits out)");
  EXPECT_EQ(why("2.5"), "a whole number in 1..64, got '2.5' (a fraction; a whole number is expected)");
  EXPECT_EQ(why(".5"), "a whole number in 1..64, got '.5' (a fraction; a whole number is expected)");
  EXPECT_EQ(why("+5"), "a whole number in 1..64, got '+5' (a sign; write the digits alone)");
  EXPECT_EQ(why("two"), "a whole number in 1..64, got 'two' (not a number)");
  EXPECT_EQ(why("e5"), "a whole number in 1..64, got 'e5' (not a number)");
  EXPECT_EQ(why("-"), "a whole number in 1..64, got '-' (not a number)");
  EXPECT_EQ(why(""), "a whole number in 1..64, got nothing");
}

}  // namespace
}  // namespace fsdpsim
