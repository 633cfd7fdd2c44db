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

// Under a MixedPrecisionPolicy U is the param_dtype cast of the fp32 shard
// (_fsdp_param.py::FSDPParam.init_dtype_attrs), and the reduced gradient is cast from
// reduce_dtype back to the group's original dtype (_fsdp_collectives.py::foreach_reduce).
TEST(FsdpParamGroup, PolicyGathersTheBf16CastAndReducesInReduceDtype) {
  RealModule m(one_linear("mixed_precision param_dtype=bf16 reduce_dtype=fp32\n"));
  m.load();
  const int g = m.layout.group_of_module("lin0");
  real::FsdpParamGroup& group = m.fsdp.groups[g];
  group.lazy_init();
  ASSERT_TRUE(group.reduce_dtype.has_value());
  EXPECT_EQ(*group.reduce_dtype, at::kFloat);
  const int w = m.param("lin0.weight");
  ASSERT_TRUE(m.params[w].mp_param_dtype.has_value());
  EXPECT_EQ(m.params[w].gathered_dtype(), at::kBFloat16);
  group.unshard();
  const at::Tensor s = m.params[w].leaf.s.detach(), u = m.params[w].leaf.u.detach();
  EXPECT_TRUE(at::equal(u, s.to(at::kBFloat16).to(at::kFloat)));
  EXPECT_FALSE(at::equal(u, s));  // random fp32 values lose bits in the cast
  const int a = m.param("lin0.lora_A.a");
  m.params[a].leaf.u.mutable_grad() = at::full_like(m.params[a].leaf.u, 1.0f / 3);
  AdapterSet grads;
  group.post_backward(&grads);
  // reduce_dtype fp32: the bf16 gradient (U's dtype) goes through fp32 and lands in fp32 unchanged
  EXPECT_TRUE(at::equal(m.params[a].leaf.s.grad(), at::full_like(m.params[a].leaf.s, 1.0f / 3).to(at::kBFloat16).to(at::kFloat)));
}

// pytorch#187376: a group with nothing trainable at its lazy init keeps no reduce or original
// dtype; an adapter unfrozen later gets its gradient in the compute dtype (bf16), which the fp32
// shard's grad setter refuses.
TEST(FsdpParamGroup, GroupFrozenAtLazyInitHandsAnUnfrozenShardABf16Gradient) {
  RealModule m(one_linear("mixed_precision param_dtype=bf16 reduce_dtype=fp32\n"));
  m.load();
  const int g = m.layout.group_of_module("lin0");
  real::FsdpParamGroup& group = m.fsdp.groups[g];
  for (int p : group.spec().params) m.params[p].set_requires_grad(false);
  group.lazy_init();
  EXPECT_FALSE(group.reduce_dtype.has_value());
  EXPECT_FALSE(group.orig_dtype.has_value());
  const int a = m.param("lin0.lora_A.a");
  m.params[a].set_requires_grad(true);
  group.unshard();
  m.params[a].leaf.u.mutable_grad() = at::ones_like(m.params[a].leaf.u);
  AdapterSet grads;
  try {
    group.post_backward(&grads);
    FAIL() << "no raise";
  } catch (const real::OpError& e) {
    EXPECT_EQ(e.status, Status::Exception);
    EXPECT_EQ(e.message, grad_dtype_refused_message(DType::BF16));
  }
}
