// PeftModel-level ops and their profile switches (model/machine/peft_model.cpp).
#include <gtest/gtest.h>

#include "properties/test_util.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {
std::string with_switch(std::string h, const std::string& sw) { return h.insert(h.find("layer"), "set " + sw + "\n"); }
}  // namespace

TEST(PeftModel, SetAdapterSkipMergedLeavesMergedGroupsUnsharded) {
  OneRank t(seed000_header());  // upstream: skip_merged
  t.op("eval");
  t.op("merge");
  t.op("set_adapter other");
  EXPECT_EQ(t.state("root"), ShardedState::Unsharded);
  EXPECT_EQ(t.state("lin0"), ShardedState::Unsharded);
  EXPECT_TRUE(t.ps("lin1.lora_A.other").rg_u);
  EXPECT_FALSE(t.ps("lin1.lora_A.other").rg_s);  // the flip missed the shard
  EXPECT_EQ(t.model->state().layers[t.layer("lin0")].n_merged, 0);  // unmerged per layer, on U
}

TEST(PeftModel, SetAdapterSkipMergedReshardsGroupsWithoutMergedLayers) {
  OneRank t(seed000_header());
  t.op("eval");
  t.op("set_adapter other");
  EXPECT_EQ(t.state("root"), ShardedState::Sharded);
  EXPECT_TRUE(t.ps("lin1.lora_A.other").rg_s);
}

TEST(PeftModel, SetAdapterUnmergeFirstReachesTheShards) {
  OneRank t(seed000_header(1, "patched"));
  t.op("eval");
  t.op("merge");
  t.op("set_adapter other");
  EXPECT_EQ(t.model->classify_stored(t.layer("lin0")), WeightClass::Exact);  // +delta then -delta on U
  EXPECT_EQ(t.state("root"), ShardedState::Sharded);
  EXPECT_TRUE(t.ps("lin0.lora_A.other").rg_s);
  EXPECT_FALSE(t.ps("lin0.lora_A.default").rg_s);
}

TEST(PeftModel, SetAdapterNoneNeverReshards) {
  OneRank t(with_switch(seed000_header(), "set_adapter_reshard=none"));
  t.op("eval");
  t.op("set_adapter other");
  EXPECT_EQ(t.state("root"), ShardedState::Unsharded);
  EXPECT_FALSE(t.ps("lin1.lora_A.other").rg_s);  // D2
}

TEST(PeftModel, ListFormSetAdapterIsTheTunerLevelCall) {
  OneRank t(seed000_header(1, "patched"));
  t.op("eval");
  t.op("set_adapter [default,other]");
  EXPECT_EQ(t.state("root"), ShardedState::Unsharded);  // no FSDP handling at all
  EXPECT_EQ(t.model->state().active, 3);
}

TEST(PeftModel, SetAdapterUnknownIsAValueError) {
  OneRank t("world 1\nlayer l 4 2\nadapter a r=1 alpha=1 targets=l\nadapter b r=1 alpha=1 targets=l\nfully_shard root\n---\n");
  t.op("delete_adapter b");
  const OpResult& r = t.op("set_adapter b");
  EXPECT_EQ(r.status, Status::ValueError);
  EXPECT_EQ(r.message, "Adapter b not found.");
}

TEST(PeftModel, AddAdapterAfterShardingIsUnmanagedAndReappliesInferenceMode) {
  OneRank t(
      "world 2\nlayer l 4 2\nadapter a r=2 alpha=2 targets=l\nadapter b r=2 alpha=2 targets=l inference_mode deferred\n"
      "fully_shard root\n---\n");
  EXPECT_FALSE(t.ps("l.lora_A.b").present);
  t.op("add_adapter b");
  EXPECT_TRUE(t.ps("l.lora_A.b").present);
  EXPECT_EQ(t.topo->params[t.param("l.lora_A.b")].group, -1);  // D13: no FSDP group
  EXPECT_FALSE(t.ps("l.lora_A.a").rg_s);  // D8: the new config's inference_mode froze `a`
}

TEST(PeftModel, DeleteMergedAdapterIsRefused) {
  OneRank t(seed000_header());
  t.op("merge");
  const OpResult& r = t.op("delete_adapter default");
  EXPECT_EQ(r.status, Status::ValueError);
  EXPECT_EQ(r.message, "Cannot delete adapter(s) ['default'] while they are merged. Please unmerge them first.");
}

TEST(PeftModel, DeletingTheActiveAdapterActivatesAndTrainsTheFallback) {
  OneRank t(seed000_header());
  t.op("delete_adapter default");
  EXPECT_EQ(t.model->state().active, 2);
  EXPECT_TRUE(t.ps("lin0.lora_A.other").rg_s);
  // The FSDP group still gathers the deleted parameters.
  t.op("unshard lin0");
  EXPECT_EQ(t.model->collectives()[0].count, t.topo->groups[t.group("lin0")].numel);
}

TEST(PeftModel, DisableExitWithoutReshardLosesTheReenableOnTheShards) {
  for (const char* profile : {"upstream", "patched"}) {
    OneRank t(seed000_header(1, profile));
    t.op("disable_enter");
    EXPECT_FALSE(t.ps("lin0.lora_A.default").rg_s);
    t.op("eval");  // leaves U registered
    t.op("disable_exit");
    t.op("reshard");
    EXPECT_EQ(t.ps("lin0.lora_A.default").rg_s, std::string(profile) == "patched") << profile;  // D6
  }
}

TEST(PeftModel, DisableExitWithoutEnterIsAValueError) {
  OneRank t(seed000_header());
  EXPECT_EQ(t.op("disable_exit").status, Status::ValueError);
  t.op("disable_enter");
  EXPECT_EQ(t.op("disable_enter").status, Status::ValueError);
}

TEST(PeftModel, StateDictReshardsEveryGroup) {
  OneRank t(seed000_header());
  t.op("eval");
  t.op("state_dict");
  EXPECT_EQ(t.state("root"), ShardedState::Sharded);
  EXPECT_EQ(t.state("lin0"), ShardedState::Sharded);
}

TEST(PeftModel, DeltaWeightOnShardedLayerGathersA) {
  OneRank t(seed000_header(2));
  EXPECT_EQ(t.op("delta_weight lin1").status, Status::Ok);
  ASSERT_EQ(t.model->collectives().size(), 1u);
  EXPECT_EQ(t.model->collectives()[0].group, t.group("root"));
}
