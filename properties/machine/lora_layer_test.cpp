// LoRA layer behaviour on whichever object is registered (model/machine/lora_layer.cpp).
#include <gtest/gtest.h>

#include "model/vocab/seq.hpp"
#include "properties/test_util.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(LoraLayer, MergeWhileShardedUpdatesTheShardAndGathersA) {
  OneRank t(seed000_header(2));
  t.op("merge");
  EXPECT_EQ(t.model->observer().classify_stored(t.layer("lin0")), WeightClass::Exact);
  EXPECT_EQ(t.model->state().layers[t.layer("lin0")].n_merged, 1);
  // B @ A on DTensors redistributes A: one all-gather of A per merged layer.
  ASSERT_EQ(t.model->log().records().size(), 2u);
  EXPECT_EQ(t.model->log().records()[0].count, t.topo->params[t.param("lin0.lora_A.default")].shard_numel);
}

TEST(LoraLayer, MergeWhileUnshardedLandsOnTheTemporaryCopy) {
  OneRank t(seed000_header());
  t.op("eval");
  t.op("merge");
  EXPECT_EQ(t.model->observer().classify_registered(t.layer("lin0")), WeightClass::Exact);
  EXPECT_EQ(t.model->observer().classify_stored(t.layer("lin0")), WeightClass::MissingDelta);
  t.op("reshard");
  EXPECT_EQ(t.model->observer().classify_registered(t.layer("lin0")), WeightClass::MissingDelta);
  // D4: unmerging while sharded now subtracts a delta the shard never had.
  t.op("unmerge");
  EXPECT_EQ(t.model->observer().classify_stored(t.layer("lin0")), WeightClass::Corrupt);
  EXPECT_EQ(t.model->state().layers[t.layer("lin0")].n_merged, 0);
}

TEST(LoraLayer, UnmergePopsEveryMergedAdapterLifo) {
  OneRank t(seed000_header());
  t.op("merge [default,other]");
  EXPECT_EQ(t.model->state().layers[t.layer("lin1")].n_merged, 2);
  t.op("unmerge");
  EXPECT_EQ(t.model->state().layers[t.layer("lin1")].n_merged, 0);
  EXPECT_EQ(t.model->observer().classify_stored(t.layer("lin1")), WeightClass::Exact);
}

TEST(LoraLayer, UnmergeAfterTheAdapterChangedLeavesACorruptWeight) {
  OneRank t(seed000_header());
  t.op("train_step");  // default trains: its shard values change
  t.op("merge");
  EXPECT_EQ(t.op_may_raise("load_adapters").status, Status::ValueError);  // nothing saved yet: no change
  EXPECT_EQ(t.model->observer().classify_stored(t.layer("lin0")), WeightClass::Exact);
  t.op("save_adapters");
  t.op("unmerge");
  t.op("train_step");
  t.op("merge");
  t.op("load_adapters");  // restores older A, B while merged
  EXPECT_EQ(t.model->observer().classify_stored(t.layer("lin0")), WeightClass::Corrupt);
}

TEST(LoraLayer, ForwardWhileDisabledAndMergedUnmergesFirst) {
  OneRank t(seed000_header());
  t.op("merge");
  t.op("disable_enter");
  EXPECT_EQ(t.model->state().layers[t.layer("lin0")].n_merged, 1);  // disabling does not unmerge
  t.op("eval");
  EXPECT_EQ(t.model->state().layers[t.layer("lin0")].n_merged, 0);
  // The eval unsharded everything, so the unmerge ran on U (D5): the shard keeps the delta.
  EXPECT_EQ(t.model->observer().classify_stored(t.layer("lin0")), WeightClass::ExtraDelta);
}

TEST(LoraLayer, SetAdapterFlipsOnlyTheRegisteredObject) {
  OneRank t(seed000_header());
  t.op("set_adapter [other]");
  EXPECT_TRUE(t.ps("lin0.lora_A.other").rg_s);
  EXPECT_FALSE(t.ps("lin0.lora_A.default").rg_s);
  t.op("eval");
  t.op("set_adapter [default]");
  EXPECT_TRUE(t.ps("lin0.lora_A.default").rg_u);
  EXPECT_FALSE(t.ps("lin0.lora_A.default").rg_s);
}

TEST(LoraLayer, EnableIgnoresInferenceModeUpstreamAndRespectsItPatched) {
  for (const char* profile : {"upstream", "patched"}) {
    OneRank t("world 1\nprofile " + std::string(profile) +
              "\nlayer lin0 10 2\nadapter default r=4 alpha=4 targets=lin0 inference_mode\nfully_shard root\n---\n");
    EXPECT_FALSE(t.ps("lin0.lora_A.default").rg_s);
    t.op("disable_enter");
    t.op("disable_exit");
    EXPECT_EQ(t.ps("lin0.lora_A.default").rg_s, std::string(profile) == "upstream") << profile;  // #3447
  }
}

TEST(LoraLayer, MergedLayersSkipTheLoraPath) {
  OneRank t(seed000_header());
  t.op("merge");
  const OpResult& r = t.op_may_raise("train_step");
  EXPECT_EQ(r.status, Status::NoGradFn);
  EXPECT_EQ(r.message, "element 0 of tensors does not require grad and does not have a grad_fn");
}

// The layer's own transitions on pieces the test builds (no RankModel): a merge off a shard
// gathers A through the DTensor port (on one rank the delta lands at once), unmerge takes the
// same delta back, and a layer that does not hold the adapter's tensors merges nothing.
TEST(LoraLayerAlone, MergeAddsTheDeltaThroughThePortAndUnmergeTakesItBack) {
  const Topology t = compile_topology(parse_seq(seed000_header(1), "<test>"));
  std::vector<FsdpParam> params(t.params.size());
  std::vector<FsdpParamGroup> groups(t.groups.size());
  std::vector<LoraLayer> layers(t.layers.size());
  CollectiveLog log;
  std::vector<uint8_t> grad(t.params.size(), 0);
  const int l = t.layer_index("lin0");
  const LayerInfo& li = t.layers[l];
  params[li.B[0]].ver_s = 2;
  const LayerPort c{{t, l, params, groups, true}, DTensor(t, 0, params, groups, log, nullptr), ScopeSite{}};
  LoraLayer& lp = layers[l];
  lp.tuner = true;
  lp.active = AdapterSet::of(0);
  ASSERT_FALSE(lp.merge(c, 0));
  EXPECT_EQ(lp.n_merged, 1);
  EXPECT_EQ(params[li.weight].w_s.coeff[0], 1);
  EXPECT_EQ(params[li.weight].w_s.ver[0], c.dtensor.delta_id(0, 0, 2));
  ASSERT_FALSE(lp.merge(c, 0));  // already merged: nothing added twice
  EXPECT_EQ(params[li.weight].w_s.coeff[0], 1);
  ASSERT_FALSE(lp.unmerge(c));
  EXPECT_EQ(lp.n_merged, 0);
  EXPECT_EQ(params[li.weight].w_s, WeightContent{});
  params[li.A[1]].present = false;  // `other` deleted: this layer no longer holds its tensors
  ASSERT_FALSE(lp.merge(c, 1));
  EXPECT_EQ(lp.n_merged, 0);
  bool path_rg = false;
  DType act = DType::F32;
  ASSERT_FALSE(lp.forward(c, grad, true, &path_rg, &act));  // default's A and B are frozen (never set trainable here)
  EXPECT_FALSE(path_rg);
}

namespace {
// seed000's header with `default` a DoRA adapter.
std::string dora_header(int world) {
  std::string h = seed000_header(world);
  const std::string a = "adapter default r=8 alpha=8 targets=lin0,lin1";
  return h.replace(h.find(a), a.size(), a + " use_dora");
}
}  // namespace

TEST(LoraLayer, DoraMagnitudeIsRegisteredAfterEveryAdaptersAAndB) {
  OneRank t(dora_header(2));
  const LayerInfo& li = t.topo->layers[t.layer("lin0")];
  ASSERT_GE(li.M[0], 0);
  EXPECT_EQ(li.M[1], -1);  // `other` is a plain LoRA adapter
  EXPECT_EQ(t.topo->params[li.M[0]].name.str(), "lin0.lora_magnitude_vector.default");
  EXPECT_EQ(t.topo->params[li.M[0]].dim0, 20);  // one value per output row
  EXPECT_GT(li.M[0], li.B[1]);                    // its ModuleDict comes after lora_A and lora_B
  EXPECT_GE(t.topo->params[li.M[0]].group, 0);    // fully_shard manages it
  // set_adapter moves its requires_grad with A and B
  EXPECT_TRUE(t.model->state().params[li.M[0]].registered_rg(false));
  t.op("set_adapter other");
  EXPECT_FALSE(t.model->state().params[li.M[0]].registered_rg(false));
}

TEST(LoraLayer, DoraMergeOnTheShardIsLost) {
  OneRank t(dora_header(2));
  t.op("merge");
  // DoraLinearVariant.merge_unsafe's `orig_weight.data = new_weight` leaves the DTensor shard as it was.
  EXPECT_EQ(t.model->observer().classify_stored(t.layer("lin0")), WeightClass::MissingDelta);
  EXPECT_EQ(t.model->state().layers[t.layer("lin0")].n_merged, 1);
  ASSERT_EQ(t.model->log().records().size(), 2u);  // still get_delta_weight's all-gather of A per layer
}
