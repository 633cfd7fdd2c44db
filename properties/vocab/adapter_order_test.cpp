// AdapterOrder (model/vocab/adapter_order.hpp): adapters in dict order (peft_config, a saved file).
#include "model/vocab/adapter_order.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace fsdpsim {
namespace {

TEST(AdapterOrder, AppendsLikeADictAndEraseMovesTheRestUp) {
  AdapterOrder o;
  EXPECT_EQ(o.size(), 0);
  o.push_back(2);
  o.push_back(0);
  o.push_back(2);  // a key already in keeps its place
  EXPECT_EQ(o.list(), (std::vector<int>{2, 0}));
  o.push_back(1);
  o.erase(2);
  EXPECT_EQ(o.list(), (std::vector<int>{0, 1}));
  o.push_back(2);  // deleted and added again: last
  EXPECT_EQ(o.list(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(o.set(), AdapterSet::from_bits(0b111));
  EXPECT_EQ(o.only(AdapterSet::from_bits(0b101)).list(), (std::vector<int>{0, 2}));
}

TEST(AdapterOrder, HoldsEveryAdapterIndexInOneWord) {
  AdapterOrder o;
  for (int a = kMaxAdapters - 1; a >= 0; --a) o.push_back(a);
  ASSERT_EQ(o.size(), kMaxAdapters);
  for (int i = 0; i < kMaxAdapters; ++i) EXPECT_EQ(o.at(i), kMaxAdapters - 1 - i);
  o.erase(0);
  EXPECT_EQ(o.size(), kMaxAdapters - 1);
  EXPECT_EQ(o.at(kMaxAdapters - 1), -1);
}

TEST(AdapterOrder, NamedKeepsTheOrderGiven) {
  std::vector<AdapterDecl> d(3);
  d[0].name = "default";
  d[1].name = "other";
  d[2].name = "third";
  EXPECT_EQ(AdapterOrder::named(d, {"third", "default", "third"}).list(), (std::vector<int>{2, 0}));
  EXPECT_EQ(AdapterOrder::named(d, {"nope"}).size(), 0);
}

}  // namespace
}  // namespace fsdpsim
