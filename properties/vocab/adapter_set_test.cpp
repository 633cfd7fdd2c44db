// AdapterSet (model/vocab/adapter_set.hpp): the one-byte adapter set the model's masks became.
#include "model/vocab/adapter_set.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace fsdpsim {
namespace {

std::vector<AdapterDecl> three() {
  std::vector<AdapterDecl> d(3);
  d[0].name = "default";
  d[1].name = "other";
  d[2].name = "third";
  return d;
}

TEST(AdapterSet, InsertEraseContainsCount) {
  AdapterSet s;
  EXPECT_TRUE(s.empty());
  s.insert(2);
  s.insert(0);
  s.insert(2);
  EXPECT_TRUE(s.contains(0));
  EXPECT_FALSE(s.contains(1));
  EXPECT_TRUE(s.contains(2));
  EXPECT_EQ(s.count(), 2);
  EXPECT_EQ(s.first(), 0);
  EXPECT_EQ(s.bits(), 0b101);
  s.erase(0);
  s.erase(1);  // not a member: nothing changes
  EXPECT_EQ(s, AdapterSet::of(2));
  s.set(1, true);
  s.set(2, false);
  EXPECT_EQ(s, AdapterSet::of(1));
}

TEST(AdapterSet, IteratesInAdapterOrder) {
  std::vector<int> seen;
  for (int a : AdapterSet::from_bits(0b10110010)) seen.push_back(a);
  EXPECT_EQ(seen, (std::vector<int>{1, 4, 5, 7}));
  for (int a : AdapterSet{}) seen.push_back(a);
  EXPECT_EQ(seen.size(), 4u);
}

TEST(AdapterSet, SetAlgebra) {
  const AdapterSet ab = AdapterSet::from_bits(0b011), bc = AdapterSet::from_bits(0b110);
  EXPECT_EQ((ab & bc).bits(), 0b010);
  EXPECT_EQ((ab | bc).bits(), 0b111);
  EXPECT_EQ(ab.without(bc).bits(), 0b001);
  EXPECT_TRUE((ab | bc).includes(ab));
  EXPECT_FALSE(ab.includes(bc));
  EXPECT_TRUE(ab.includes(AdapterSet{}));
  AdapterSet s = ab;
  s |= bc;
  EXPECT_NE(s, ab);
}

TEST(AdapterSet, NamesAndText) {
  const auto d = three();
  const AdapterSet s = AdapterSet::named(d, {"third", "default", "missing"});
  EXPECT_EQ(s.bits(), 0b101);
  EXPECT_EQ(s.text(d), "{default,third}");
  EXPECT_EQ(AdapterSet{}.text(d), "{}");
  EXPECT_EQ(AdapterSet::of(1).text(d), "{other}");
}

}  // namespace
}  // namespace fsdpsim
