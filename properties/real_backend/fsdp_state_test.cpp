// FsdpState (real_backend/fsdp_state.hpp) driven directly: the state-dict hook reshards only
// the groups lazy_init reached; the post-forward order the backward prefetch reads.
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(FsdpState, ReshardAllReshardsOnlyTheGroupsWhoseLazyInitRan) {
  RealModule m(one_linear());
  m.load();
  const int g = m.layout.group_of_module("lin0");
  m.fsdp.groups[g].unshard();  // FSDPModule.unshard before any forward: no state-dict hook yet
  m.fsdp.reshard_all();
  EXPECT_TRUE(m.fsdp.groups[g].unsharded());
  m.fsdp.lazy_init();
  EXPECT_TRUE(m.fsdp.root_lazy_inited);
  m.fsdp.reshard_all();
  EXPECT_FALSE(m.fsdp.groups[g].unsharded());
}

TEST(FsdpState, PostForwardRecordsTheOrderAndTheFinalCallbackClearsIt) {
  RealModule m(one_linear());
  m.load();
  m.fsdp.lazy_init();
  m.fsdp.root_pre_forward();
  const int g = m.layout.group_of_module("lin0");
  m.fsdp.pre_forward(g, at::zeros({1}));
  EXPECT_TRUE(m.fsdp.groups[g].in_forward);
  m.fsdp.post_forward(g, at::zeros({1}));
  m.fsdp.root_post_forward(at::zeros({1}));
  EXPECT_FALSE(m.fsdp.groups[g].in_forward);
  ASSERT_EQ(m.fsdp.post_forward_order.size(), m.fsdp.root() >= 0 ? 2u : 1u);  // lin0, then the root's group if it has one
  EXPECT_EQ(m.fsdp.post_forward_order[0], g);
  EXPECT_EQ(m.fsdp.groups[g].post_forward_indices, std::vector<int>{0});
  m.fsdp.final_callback_queued = true;
  AdapterSet grads;
  m.fsdp.post_backward_final_callback(true, std::vector<uint8_t>(m.fsdp.groups.size(), 0), &grads);
  EXPECT_TRUE(m.fsdp.post_forward_order.empty());
  EXPECT_TRUE(m.fsdp.groups[g].post_forward_indices.empty());
  EXPECT_FALSE(m.fsdp.final_callback_queued);
}
