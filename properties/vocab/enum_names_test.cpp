// EnumNames: each enum the vocabulary prints is named by one table, so a name
// prints and parses back to its value, and a value past the table prints "?".
#include <gtest/gtest.h>

#include "model/vocab/enum_names.hpp"
#include "model/vocab/observation.hpp"

namespace fsdpsim {
namespace {

TEST(EnumNames, EveryStatusAndWeightClassNameParsesBackToItsValue) {
  for (int i = 0; i < kStatusCount; ++i) {
    Status s = Status::Ok;
    ASSERT_TRUE(status_from_name(status_name(static_cast<Status>(i)), &s)) << i;
    EXPECT_EQ(static_cast<int>(s), i);
  }
  for (int i = 0; i < kWeightClassCount; ++i) {
    WeightClass w = WeightClass::Exact;
    ASSERT_TRUE(weight_class_from_name(weight_class_name(static_cast<WeightClass>(i)), &w)) << i;
    EXPECT_EQ(static_cast<int>(w), i);
  }
  EXPECT_STREQ(status_name(Status::AssertionError), "assertion_error");
  EXPECT_STREQ(coll_op_name(CollOp::Broadcast), "broadcast");
  EXPECT_STREQ(coll_op_name(CollOp::AllReduce), "all_reduce");  // DTensor's Partial -> Replicate
  EXPECT_STREQ(sharded_state_name(ShardedState::Unsharded), "UNSHARDED");
}

TEST(EnumNames, AnUnknownNameOrValueIsRefused) {
  enum class Colour { Red, Green };
  constexpr auto names = enum_names<Colour>("red", "green");
  Colour c = Colour::Red;
  EXPECT_FALSE(names.parse("blue", &c));
  EXPECT_EQ(c, Colour::Red);  // untouched
  EXPECT_TRUE(names.parse("green", &c));
  EXPECT_EQ(c, Colour::Green);
  EXPECT_STREQ(names[static_cast<Colour>(2)], "?");
}

}  // namespace
}  // namespace fsdpsim
