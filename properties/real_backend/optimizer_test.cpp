// Optimizer (real_backend/optimizer.hpp) driven directly: it holds the trainable shards
// prepare registered, steps the ones with a gradient, and finds deleted ones by identity.
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(Optimizer, StepsTheHeldShardsWithAGradAndCountsObjectsNoModuleHolds) {
  RealModule m(one_linear("optimizer trainable\n"));
  m.load();
  ASSERT_EQ(m.optimizer.size(), 2);  // a's A and B: b is inactive, so frozen
  const int a = m.param("lin0.lora_A.a"), b = m.param("lin0.lora_B.a");
  const at::Tensor before = m.params[a].leaf.s.detach().clone();
  m.params[a].leaf.s.mutable_grad() = at::ones_like(m.params[a].leaf.s);
  m.optimizer.step();
  EXPECT_FALSE(at::equal(before, m.params[a].leaf.s.detach()));
  EXPECT_TRUE(m.params[a].leaf.s.grad().defined());
  m.optimizer.zero_grad();
  EXPECT_FALSE(m.params[a].leaf.s.grad().defined());
  int first = -1;
  EXPECT_EQ(m.optimizer.missing(&first, nullptr), 0);
  m.params[b].registered = at::Tensor();  // the module no longer holds B's object
  std::vector<std::string> names;
  EXPECT_EQ(m.optimizer.missing(&first, &names), 1);
  EXPECT_EQ(first, 1);
  EXPECT_EQ(names, std::vector<std::string>{"lin0.lora_B.a"});
}
