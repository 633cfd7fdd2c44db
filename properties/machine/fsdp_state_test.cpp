// FSDP2's state over every group, driven on a RankState the test builds (model/machine/
// fsdp_state.hpp), no RankModel: the root's lazy init runs once, FSDPModule.unshard unshards one
// group and the state-dict hook reshards every group whose lazy init registered it.
#include <gtest/gtest.h>

#include "model/machine/fsdp_state.hpp"
#include "model/vocab/seq.hpp"
#include "properties/test_util.hpp"

using namespace fsdpsim;

TEST(FsdpState, LazyInitOnceThenUnshardAndTheStateDictHookReshards) {
  const Topology t = compile_topology(parse_seq(test::seed000_header(2), "<test>"));
  RankState st;
  st.params.assign(t.params.size(), FsdpParam{});
  st.groups.assign(t.groups.size(), FsdpParamGroup{});
  st.layers.assign(t.layers.size(), LoraLayer{});
  CollectiveLog log;
  const FsdpState fsdp(t, 0, st, st.params, log, ScopeSite{});
  ASSERT_FALSE(fsdp.lazy_init());
  EXPECT_TRUE(st.root_lazy_inited);
  for (const FsdpParamGroup& g : st.groups) EXPECT_TRUE(g.state_dict_hooks);
  const int lin0 = t.group_index("lin0");
  ASSERT_FALSE(fsdp.module_unshard(lin0));
  EXPECT_TRUE(st.groups[lin0].unsharded());
  ASSERT_EQ(log.records().size(), 1u);  // its all-gather
  EXPECT_EQ(log.records()[0].op, CollOp::AllGather);
  fsdp.reshard_all();
  for (const FsdpParamGroup& g : st.groups) EXPECT_FALSE(g.unsharded());
  // Before prepare no FSDP state exists: the lazy init does nothing.
  RankState unprepared;
  unprepared.prepared = false;
  unprepared.groups.assign(t.groups.size(), FsdpParamGroup{});
  ASSERT_FALSE(FsdpState(t, 0, unprepared, unprepared.params, log, ScopeSite{}).lazy_init());
  EXPECT_FALSE(unprepared.root_lazy_inited);
}

// FsdpState's port is FSDP's part of the rank's state alone (no RankState): the root's lazy init,
// an unshard, then a final callback with every post_backward pending reshards the group, hands
// the gradients to the argument (none on U here), and clears the post-forward order and the flag.
TEST(FsdpState, RunsOnFsdpRootStateAloneAndTheFinalCallbackClearsTheOrder) {
  const Topology t = compile_topology(parse_seq(test::seed000_header(2), "<test>"));
  FsdpRootState fs;
  fs.groups.assign(t.groups.size(), FsdpParamGroup{});
  std::vector<FsdpParam> params(t.params.size());
  CollectiveLog log;
  const FsdpState fsdp(t, 0, fs, params, log, ScopeSite{});
  ASSERT_FALSE(fsdp.lazy_init());
  const int lin0 = t.group_index("lin0");
  ASSERT_FALSE(fsdp.module_unshard(lin0));
  EXPECT_TRUE(fs.groups[lin0].unsharded());
  EXPECT_GT(fs.memory.now, 0);  // the all-gather output is alive
  fs.groups[lin0].record_post_forward(fs.post_forward_order, lin0);
  fs.final_callback_queued = true;
  AdapterSet grads;
  ASSERT_FALSE(fsdp.post_backward_final_callback(std::vector<uint8_t>(t.groups.size(), 0), grads));
  EXPECT_FALSE(fs.groups[lin0].unsharded());
  EXPECT_EQ(fs.memory.now, 0);
  EXPECT_TRUE(grads.empty());
  EXPECT_TRUE(fs.post_forward_order.empty());
  EXPECT_TRUE(fs.groups[lin0].post_forward_indices.empty());
  EXPECT_FALSE(fs.final_callback_queued);
}
