// The Observer driven on its own (model/machine/observer.hpp): a RankState and a
// CollectiveLog the test writes by hand, no RankModel and no op run. What the module
// registers, the weight classes and the observation follow from those fields alone.
#include <gtest/gtest.h>

#include "model/machine/observer.hpp"
#include "model/vocab/seq.hpp"
#include "properties/test_util.hpp"

using namespace fsdpsim;

namespace {

// One rank's state right after prepare, as plain values: every group SHARDED, nothing merged,
// every parameter present, the first adapter active.
struct HandBuilt {
  Topology topo;
  RankState st;
  CollectiveLog log;
  explicit HandBuilt(int world) : topo(compile_topology(parse_seq(test::seed000_header(world), "<test>"))) {
    st.params.assign(topo.params.size(), FsdpParam{});
    st.groups.assign(topo.groups.size(), FsdpParamGroup{});
    st.layers.assign(topo.layers.size(), LoraLayer{});
    st.saved_rows.assign(topo.params.size(), -1);
    st.prepared = true;
    st.active = AdapterSet::of(0);
  }
  Observer view(int rank = 0, bool peer_judged = false) const { return Observer(topo, rank, st, log, peer_judged); }
  Op op(const std::string& line) const { return parse_seq(test::seed000_header() + line + "\n", "<test>").ops.at(0); }
  int param(const std::string& name) const {
    for (size_t p = 0; p < topo.params.size(); ++p)
      if (topo.params[p].name == name) return static_cast<int>(p);
    return -1;
  }
  // Layer l's W holds adapter a's delta at A's and B's current versions (a merge settled).
  void put_delta(WeightContent& w, int l, int a) const {
    const LayerInfo& li = topo.layers[l];
    w.coeff[a] = 1;
    w.ver[a] = version::delta_id(topo.adapters[a].init == LoraInit::Zero, st.params[li.A[a]].ver_s, st.params[li.B[a]].ver_s);
  }
};

}  // namespace

TEST(Observer, TheStoredClassComparesWsDeltasWithTheMergedAdaptersAtTheirCurrentVersions) {
  HandBuilt h(1);
  const int l = h.topo.layer_index("lin0");
  const LayerInfo& li = h.topo.layers[l];
  h.st.params[li.A[0]].ver_s = 5;
  h.st.params[li.B[0]].ver_s = 2;  // B moved from its zero init: the delta is not zero
  EXPECT_EQ(h.view().classify_stored(l), WeightClass::Exact);  // W0, nothing merged
  h.st.layers[l].push_merged(0);
  EXPECT_EQ(h.view().classify_stored(l), WeightClass::MissingDelta);  // listed merged, not in W
  h.put_delta(h.st.params[li.weight].w_s, l, 0);
  EXPECT_EQ(h.view().classify_stored(l), WeightClass::Exact);
  EXPECT_TRUE(h.view().any_merged());
  h.st.params[li.B[0]].ver_s = 3;  // a step after the merge: W holds an older delta
  EXPECT_EQ(h.view().classify_stored(l), WeightClass::Corrupt);
  h.put_delta(h.st.params[li.weight].w_s, l, 0);
  h.st.layers[l].pop_merged();  // in W at the current version, but not listed
  EXPECT_EQ(h.view().classify_stored(l), WeightClass::ExtraDelta);
  EXPECT_FALSE(h.view().any_merged());
}

TEST(Observer, AnUnshardedGroupRegistersUAndTheOptimizerNoLongerFindsS) {
  HandBuilt h(2);
  const int l = h.topo.layer_index("lin0");
  const LayerInfo& li = h.topo.layers[l];
  const int g = li.group;
  const int a = li.A[0];
  h.st.params[a].rg_s = true;
  EXPECT_FALSE(h.view().is_registered_u(a));
  EXPECT_TRUE(h.view().is_registered_s(a));
  EXPECT_TRUE(h.view().registered_rg(a));
  h.st.groups[g].sharded = ShardedState::Unsharded;
  h.st.groups[g].has_u = true;
  EXPECT_TRUE(h.view().is_registered_u(a));
  EXPECT_FALSE(h.view().is_registered_s(a));
  EXPECT_FALSE(h.view().registered_rg(a));  // U's flag: rg_u, still false
  // The shard holds a merged delta the unsharded copy does not: the registered class reads U.
  h.st.layers[l].push_merged(0);
  h.st.params[li.B[0]].ver_s = h.st.params[li.B[0]].ver_u = 2;
  h.put_delta(h.st.params[li.weight].w_s, l, 0);
  EXPECT_EQ(h.view().classify_registered(l), WeightClass::MissingDelta);
  EXPECT_EQ(h.view().classify_stored(l), WeightClass::Exact);
  // A re-added adapter's parameter is a new module no group manages.
  EXPECT_EQ(h.view().group_of(a), g);
  h.st.params[a].detached = true;
  EXPECT_EQ(h.view().group_of(a), -1);
  EXPECT_TRUE(h.view().holds_rows(a, 1));
}

TEST(Observer, TheObservationReportsTheHandBuiltFields) {
  HandBuilt h(2);
  const int a0 = h.param("lin0.lora_A.default"), b0 = h.param("lin0.lora_B.default");
  h.st.optimizer.objects = {a0, b0};
  h.st.params[b0].recreated = true;  // re-added: a new object the optimizer never saw
  int first = -2;
  EXPECT_EQ(h.view().optimizer_missing(&first), 1);
  EXPECT_EQ(first, 1);
  const int l1 = h.topo.layer_index("lin1");
  h.st.layers[l1].push_merged(1);
  h.st.groups[h.topo.group_index("root")].sharded = ShardedState::Unsharded;
  // One all-gather of the root group this op issued, packing lin1's A of `default`.
  CollRecord c{CollOp::AllGather, h.topo.group_index("root"), 64};
  c.member_begin = h.log.next_member();
  c.member_count = 1;
  h.log.issue(c);
  h.log.pack(h.param("lin1.lora_A.default"));

  OpResult r;
  const Observation o = h.view().observe(3, h.op("forward"), r);
  EXPECT_EQ(o.step, 3);
  EXPECT_EQ(o.rank, 0);
  ASSERT_EQ(o.active.size(), 1u);
  EXPECT_EQ(o.active[0], "default");
  ASSERT_EQ(o.opt_unregistered.size(), 1u);
  EXPECT_EQ(o.opt_unregistered[0], "lin0.lora_B.default");
  EXPECT_EQ(o.opt_missing, 1);
  EXPECT_EQ(o.opt_total, 2);
  ASSERT_EQ(o.groups.size(), h.topo.groups.size());
  EXPECT_EQ(o.groups[h.topo.group_index("root")].state, ShardedState::Unsharded);
  EXPECT_EQ(o.groups[h.topo.group_index("lin0")].state, ShardedState::Sharded);
  ASSERT_EQ(o.layers.size(), 2u);
  ASSERT_EQ(o.layers[l1].merged.size(), 1u);
  EXPECT_EQ(o.layers[l1].merged[0], "other");
  EXPECT_EQ(o.layers[l1].stored, WeightClass::MissingDelta);  // listed, W0 only
  ASSERT_EQ(o.collectives.size(), 1u);
  EXPECT_EQ(o.collectives[0].group, "root");
  ASSERT_EQ(o.collectives[0].parts.size(), 1u);
  EXPECT_EQ(o.collectives[0].parts[0].param, "lin1.lora_A.default");
  EXPECT_EQ(o.collectives[0].parts[0].numel, 64);  // a one-parameter gather carries what it sent

  // Judged against the peers after the run: the stored class is left Exact here, and the
  // spec-only observation leaves out the collectives.
  Observation judged;
  h.view(0, true).observe_into(judged, 3, h.op("forward"), r, /*spec_fields_only=*/true);
  EXPECT_EQ(judged.layers[l1].stored, WeightClass::Exact);
  EXPECT_TRUE(judged.collectives.empty());
}

TEST(Observer, ASnapshotJudgedAgainstAPeerWithOtherARowsIsCorrupt) {
  HandBuilt mine(2), peer(2);
  const int l = mine.topo.layer_index("lin0");
  const LayerInfo& li = mine.topo.layers[l];
  for (HandBuilt* h : {&mine, &peer}) {
    h->st.params[li.B[0]].ver_s = 2;
    h->st.layers[l].push_merged(0);
  }
  // Each rank's W shard holds the delta of the A every rank held at the merge (version 5).
  const uint32_t ver_a = 5;
  mine.st.params[li.A[0]].ver_s = peer.st.params[li.A[0]].ver_s = ver_a;
  mine.put_delta(mine.st.params[li.weight].w_s, l, 0);
  StoredSnapshot own, other;
  mine.view(0).stored_snapshot_into(own);
  peer.view(1).stored_snapshot_into(other);
  const std::vector<std::pair<int, const StoredSnapshot*>> peers{{1, &other}};
  EXPECT_EQ(mine.view(0).classify_stored(own, peers, l), WeightClass::Exact);
  // The peer's A rows moved since: the full A is a mix no rank merged.
  peer.st.params[li.A[0]].ver_s = 6;
  peer.view(1).stored_snapshot_into(other);
  EXPECT_EQ(mine.view(0).classify_stored(own, peers, l), WeightClass::Corrupt);
}
