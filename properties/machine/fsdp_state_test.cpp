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
