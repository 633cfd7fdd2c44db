// model/vocab/text.hpp: the small text helpers.
#include "model/vocab/text.hpp"

#include <gtest/gtest.h>

using namespace fsdpsim;

// split is join's inverse, and keeps empty items for the caller to refuse (--ops, --draw).
TEST(Text, SplitIsJoinsInverseAndKeepsEmptyItems) {
  const std::vector<std::string> v = {"checkpoint=30", "gradient_sync=5"};
  EXPECT_EQ(split(join(v)), v);
  EXPECT_EQ(split("a,,b"), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(split("a,"), (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(split(""), (std::vector<std::string>{""}));
  EXPECT_EQ(split("a b", ' '), (std::vector<std::string>{"a", "b"}));
}
