// FsdpParamGroup (real_backend/fsdp_param_group.hpp) driven directly on a world-1 module:
// unshard registers U, reshard S, post_backward moves U's gradient into S's.
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(FsdpParamGroup, UnshardRegistersUAndPostBackwardReducesItsGradIntoS) {
  RealModule m(one_linear());
  m.load();
  const int g = m.layout.group_of_module("lin0");
  ASSERT_GE(g, 0);
  real::FsdpParamGroup& group = m.fsdp.groups[g];
  group.lazy_init();
  group.unshard();
  ASSERT_TRUE(group.unsharded());
  const int a = m.param("lin0.lora_A.a");
  ASSERT_TRUE(m.params[a].holds_unsharded());
  EXPECT_TRUE(at::equal(m.params[a].leaf.u.detach(), m.params[a].leaf.s.detach()));
  m.params[a].leaf.u.mutable_grad() = at::ones_like(m.params[a].leaf.u);
  AdapterSet grads;
  group.post_backward(&grads);
  EXPECT_FALSE(group.unsharded());
  EXPECT_TRUE(m.params[a].registered.is_same(m.params[a].leaf.s));
  ASSERT_TRUE(m.params[a].leaf.s.grad().defined());
  EXPECT_EQ(m.params[a].leaf.s.grad().sum().item<float>(), static_cast<float>(m.params[a].leaf.s.numel()));
  EXPECT_FALSE(m.params[a].leaf.u.grad().defined());
  EXPECT_TRUE(grads.contains(0));
}

TEST(FsdpParamGroup, LazyInitRefusesTrainableShardsOfTwoDtypes) {
  RealModule m(one_linear());
  m.load();
  const int g = m.layout.group_of_module("lin0");
  const int b = m.param("lin0.lora_B.a");
  m.params[b].leaf.place = m.params[b].leaf.place.to(at::kBFloat16);
  try {
    m.fsdp.groups[g].lazy_init();
    FAIL() << "no raise";
  } catch (const real::OpError& e) {
    EXPECT_EQ(e.status, Status::AssertionError);
    EXPECT_EQ(e.message, "FSDP expects uniform original parameter dtype but got {torch.bfloat16, torch.float32}");
  }
  EXPECT_TRUE(m.fsdp.groups[g].dtype_attrs);
  EXPECT_FALSE(m.fsdp.groups[g].state_dict_hooks);
}
