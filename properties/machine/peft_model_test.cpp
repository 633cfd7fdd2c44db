// PeftModel-level ops and their profile switches (model/machine/peft_model.cpp).
#include <gtest/gtest.h>

#include "properties/machine/bare_state.hpp"
#include "properties/test_util.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {
std::string with_switch(std::string h, const std::string& sw) { return h.insert(h.find("layer"), "set " + sw + "\n"); }
}  // namespace

TEST(PeftModel, SetAdapterSkipMergedLeavesMergedGroupsUnsharded) {
  OneRank t(seed000_header(1, "peft-main-3872"));  // skip_merged
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
  OneRank t(seed000_header(1, "peft-main-3872"));
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
  EXPECT_EQ(t.model->observer().classify_stored(t.layer("lin0")), WeightClass::Exact);  // +delta then -delta on U
  EXPECT_EQ(t.state("root"), ShardedState::Sharded);
  EXPECT_TRUE(t.ps("lin0.lora_A.other").rg_s);
  EXPECT_FALSE(t.ps("lin0.lora_A.default").rg_s);
}

TEST(PeftModel, SetAdapterNoneNeverReshards) {
  OneRank t(with_switch(with_switch(seed000_header(1, "patched"), "set_adapter_reshard=none"), "tuner_flags_reshard=off"));
  t.op("eval");
  t.op("set_adapter other");
  EXPECT_EQ(t.state("root"), ShardedState::Unsharded);
  EXPECT_FALSE(t.ps("lin1.lora_A.other").rg_s);  // D2
}

// peft 0.21.2 (the upstream profile): no reshard in PeftModel.set_adapter, so
// an unmerge first does not help: the flips land on U, as measured on real
// torch 2.13.0 / peft 0.21.2 (corpus seed000_unmerge_first_w*.seq).
TEST(PeftModel, UpstreamSetAdapterAfterUnmergeKeepsTheGroupsUnsharded) {
  OneRank t(seed000_header());
  t.op("eval");
  t.op("merge");
  t.op("unmerge");
  t.op("set_adapter other");
  EXPECT_EQ(t.state("root"), ShardedState::Unsharded);
  EXPECT_EQ(t.state("lin0"), ShardedState::Unsharded);
  EXPECT_TRUE(t.ps("lin0.lora_A.other").rg_u);
  EXPECT_FALSE(t.ps("lin0.lora_A.other").rg_s);
  EXPECT_TRUE(t.ps("lin0.lora_A.default").rg_s);
  EXPECT_EQ(t.op("train_step").grads.bits(), 2);  // {other}, from U
  EXPECT_EQ(t.op_may_raise("train_step").status, Status::NoGradFn);
  // Under PEFT main as #3872 describes it, the unmerge lets the reshard happen.
  OneRank m(seed000_header(1, "peft-main-3872"));
  for (const char* o : {"eval", "merge", "unmerge", "set_adapter other"}) m.op(o);
  EXPECT_EQ(m.state("lin0"), ShardedState::Sharded);
  EXPECT_TRUE(m.ps("lin0.lora_A.other").rg_s);
}

TEST(PeftModel, ListFormSetAdapterIsTheTunerLevelCall) {
  // tuner_flags_reshard (on under patched) is the tuner-level fix; this is set_adapter_reshard's alone
  OneRank t(with_switch(seed000_header(1, "patched"), "tuner_flags_reshard=off"));
  t.op("eval");
  t.op("set_adapter [default,other]");
  EXPECT_EQ(t.state("root"), ShardedState::Unsharded);  // no FSDP handling at all
  EXPECT_EQ(t.model->state().active.bits(), 3);
}

TEST(PeftModel, SetAdapterUnknownIsAValueError) {
  OneRank t("world 1\nlayer l 4 2\nadapter a r=1 alpha=1 targets=l\nadapter b r=1 alpha=1 targets=l\nfully_shard root\n---\n");
  t.op("delete_adapter b");
  const OpResult& r = t.op_may_raise("set_adapter b");
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
  // tuners_utils.py::BaseTuner.inject_adapter restores the flags of existing parameters:
  // the new config's inference_mode does not freeze `a` (the old D8 leak), and `b` is inactive.
  EXPECT_TRUE(t.ps("l.lora_A.a").rg_s);
  EXPECT_FALSE(t.ps("l.lora_A.b").rg_s);
}

// peft_model.py::PeftModel.load_adapter(is_trainable=True) -> set_requires_grad:
// the loaded, inactive adapter trains; the active one keeps its flag (seed 001).
TEST(PeftModel, LoadAdapterTrainableKeepsOthersAndTrainsTheLoadedOne) {
  const std::string h =
      "world 2\nlayer l 4 2\nadapter ref r=2 alpha=2 targets=l inference_mode\n"
      "adapter pol r=2 alpha=2 targets=l deferred\nfully_shard root\n---\nload_adapter pol trainable\nprepare\n";
  OneRank t(h);
  EXPECT_FALSE(t.ps("l.lora_A.ref").rg_s);
  t.op("load_adapter pol trainable");
  EXPECT_FALSE(t.ps("l.lora_A.ref").rg_s);
  EXPECT_TRUE(t.ps("l.lora_A.pol").rg_s);
  EXPECT_TRUE(t.ps("l.lora_B.pol").rg_s);
  EXPECT_EQ(t.model->state().active.bits(), 1);
  OneRank frozen(h);
  frozen.op("load_adapter pol frozen");
  EXPECT_FALSE(frozen.ps("l.lora_A.pol").rg_s);
  // Declared adapters: only the first injection's inference_mode counts.
  OneRank decl("world 1\nlayer l 4 2\nadapter a r=2 alpha=2 targets=l\nadapter b r=2 alpha=2 targets=l inference_mode\n"
               "fully_shard root\n---\n");
  EXPECT_TRUE(decl.ps("l.lora_A.a").rg_s);
}

// Before an explicit prepare there is no FSDP and no optimizer (measured upstream).
TEST(PeftModel, BeforePrepareNoGroupsNoOptimizer) {
  RunResult r = simulate(
      "world 2\nlayer l 4 2\nadapter a r=2 alpha=2 targets=l\nadapter b r=2 alpha=2 targets=l deferred\n"
      "fully_shard root\n---\nload_adapter b trainable\nprepare\n");
  const Observation& before = obs_at(r.observations, 1, 0);
  EXPECT_TRUE(before.groups.empty());
  EXPECT_EQ(before.opt_total, 0);
  for (const auto& p : before.params) EXPECT_EQ(p.group, "") << p.name;
  for (const auto& l : before.layers) EXPECT_EQ(l.group, "") << l.name;
  const Observation& after = obs_at(r.observations, 2, 0);
  EXPECT_EQ(after.groups.size(), 1u);
  EXPECT_EQ(after.opt_total, 4);
  EXPECT_EQ(after.params[0].group, "root");
}

TEST(PeftModel, DeleteMergedAdapterIsRefused) {
  OneRank t(seed000_header());
  t.op("merge");
  const OpResult& r = t.op_may_raise("delete_adapter default");
  EXPECT_EQ(r.status, Status::ValueError);
  EXPECT_EQ(r.message, "Cannot delete adapter(s) ['default'] while they are merged. Please unmerge them first.");
}

TEST(PeftModel, DeletingTheActiveAdapterActivatesAndTrainsTheFallback) {
  OneRank t(seed000_header(2));
  t.op("delete_adapter default");
  EXPECT_EQ(t.model->state().active.bits(), 2);
  EXPECT_TRUE(t.ps("lin0.lora_A.other").rg_s);
  // The FSDP group still gathers the deleted parameters.
  t.op("unshard lin0");
  ASSERT_EQ(t.model->log().records().size(), 1u);
  EXPECT_EQ(t.model->log().records()[0].count, t.topo->groups[t.group("lin0")].numel);
}

// BaseTunerLayer.delete_adapter: each layer falls back to sorted(its own adapters)[0];
// the model's active adapter is the first tuner layer's (seed003_delete_active_per_layer.seq).
TEST(PeftModel, DeletingTheActiveAdapterFallsBackPerLayer) {
  OneRank t("world 1\nlayer l0 4 4\nlayer l1 4 4\nlayer l2 4 2\nadapter default r=2 alpha=2 targets=l0,l1,l2\n"
            "adapter other r=2 alpha=2 targets=l2\nadapter third r=2 alpha=2 targets=l0,l1,l2 inference_mode\n"
            "fully_shard root\n---\n");
  t.op("delete_adapter default");
  EXPECT_EQ(t.model->state().active.bits(), 4);  // {third}: l0's fallback
  EXPECT_EQ(t.model->state().layers[t.layer("l0")].active.bits(), 4);
  EXPECT_EQ(t.model->state().layers[t.layer("l2")].active.bits(), 2);  // {other}: sorted(l2's adapters)[0]
  EXPECT_TRUE(t.ps("l0.lora_A.third").rg_s);
  EXPECT_TRUE(t.ps("l2.lora_A.other").rg_s);
  EXPECT_FALSE(t.ps("l2.lora_A.third").rg_s);
  const OpResult& r = t.op("train_step");
  EXPECT_EQ(r.grads.bits(), 6);  // other and third train
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
  EXPECT_EQ(t.op_may_raise("disable_exit").status, Status::ValueError);
  t.op("disable_enter");
  EXPECT_EQ(t.op_may_raise("disable_enter").status, Status::ValueError);
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
  ASSERT_EQ(t.model->log().records().size(), 1u);
  EXPECT_EQ(t.model->log().records()[0].group, t.group("root"));
}

// Seed 003: save_adapters / load_adapters under FSDP2 (S6).
namespace fsdpsim::test {
namespace {

std::string save_header(const std::string& profile) {
  return "world 2\nprofile " + profile +
         "\nlayer lin0 8 8\nlayer lin1 8 4\nadapter a r=4 alpha=8 targets=lin0,lin1\n"
         "adapter b r=4 alpha=8 targets=lin0,lin1\nfully_shard lin0 reshard_after_forward=true\n"
         "fully_shard root reshard_after_forward=true\n---\n";
}

// save_and_load.py::_reshard_dtensor_values_for_load wraps rank 0's local rows as
// every rank's shard: no error, rank 1 silently holds rank 0's rows (S6).
TEST(SaveAdapters, UpstreamSavesLocalRowsAndTheReloadCorruptsRank1) {
  RunResult r = simulate(save_header("upstream") + "train_step\nsave_adapters\nload_adapters\n");
  const Observation& s1 = obs_at(r, 2, 1);
  ASSERT_EQ(s1.saved.size(), 8u);  // every adapter by default (save_pretrained(selected_adapters=None))
  EXPECT_EQ(s1.saved[0], (SavedObs{"lin0.lora_A.a", 2, 4, DType::F32}));
  EXPECT_EQ(s1.saved[1], (SavedObs{"lin0.lora_A.b", 2, 4, DType::F32}));
  const Observation& l0 = obs_at(r, 3, 0);
  EXPECT_EQ(l0.status, Status::Ok) << l0.message;
  EXPECT_TRUE(l0.reload_diff.empty());
  const Observation& l1 = obs_at(r, 3, 1);
  EXPECT_EQ(l1.status, Status::Ok) << l1.message;
  EXPECT_EQ(l1.reload_diff.size(), 8u);
  std::vector<std::string> specs;
  for (const auto& f : r.findings) specs.push_back(f.spec + ":" + std::to_string(f.step) + ":" + std::to_string(f.rank));
  EXPECT_EQ(specs, (std::vector<std::string>{"S6:2:0", "S6:2:1", "S6:3:1"}));
  EXPECT_EQ(r.findings[0].text, "S6 step 2 rank 0: lin0.lora_A.a saved 2 of 4 rows (this rank's shard, not the full tensor)");
}

TEST(SaveAdapters, PatchedSavesFullTensorsAndReloadsEqual) {
  RunResult r = simulate(save_header("patched") + "train_step\nsave_adapters\ntrain_step\nload_adapters\n");
  EXPECT_EQ(obs_at(r, 2, 1).saved[0], (SavedObs{"lin0.lora_A.a", 4, 4, DType::F32}));
  EXPECT_EQ(obs_at(r, 4, 0).status, Status::Ok);
  EXPECT_TRUE(obs_at(r, 4, 0).reload_diff.empty());
  EXPECT_TRUE(r.findings.empty());
}

// Tensors a refused add_adapter left are saved once per saved adapter's dict (half_added_saved).
TEST(SaveAdapters, AHalfAddedAdapterIsInEverySavedAdaptersStateDict) {
  RunResult r = run_checked(parse_seq_file(FSDPSIM_SOURCE_DIR "/corpus/regressions/add_adapter_raised_half_added_saved_per_adapter.seq"));
  ASSERT_EQ(obs_at(r, 1, 0).status, Status::ValueError);
  for (int rank : {0, 1}) {
    EXPECT_EQ(obs_at(r, 2, rank).saved, half_added_saved(true)) << rank;
    EXPECT_EQ(obs_at(r, 3, rank).saved, half_added_saved(false)) << rank;
  }
}

TEST(SaveAdapters, ActiveOnlySelectionLosesTheOtherAdapter) {
  RunResult r = simulate("set adapter_save_selection=active\n" + save_header("patched") + "save_adapters\n");
  const Observation& o = obs_at(r, 1, 0);
  EXPECT_EQ(o.saved.size(), 4u);
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].text, "S6 step 1 rank 0: adapters {b} were not saved (saved: {a})");
  RunResult named = simulate("set adapter_save_selection=active\n" + save_header("patched") + "save_adapters [a,b]\n");
  EXPECT_TRUE(named.findings.empty());
}

}  // namespace
}  // namespace fsdpsim::test

namespace {

// Module.load_state_dict copies every tensor that fits and raises for the size mismatches after
// the loop: the copies made before the raise stay (the model throws OpRaised last).
TEST(LoadAdapters, ASizeMismatchRaisesAfterTheFittingTensorsAreCopied) {
  RunResult r = simulate(
      "world 3\nprofile upstream\nlayer lin0 8 9\nadapter a r=4 alpha=8 targets=lin0\n"
      "fully_shard lin0 reshard_after_forward=true\nfully_shard root reshard_after_forward=true\n---\n"
      "train_step\nsave_adapters\nload_adapters\n");
  const Observation& l2 = obs_at(r, 3, 2);  // rank 2: A's 2 saved rows fit no shape of its 0 rows
  EXPECT_EQ(l2.status, Status::Exception);
  EXPECT_EQ(l2.message, "RuntimeError: Error(s) in loading state_dict for FSDPPeftModel:");
  EXPECT_EQ(l2.reload_diff, std::vector<std::string>{"lin0.lora_B.a"});  // rank 0's 3 rows of B, wrapped
  EXPECT_EQ(obs_at(r, 3, 1).status, Status::Ok);
}

}  // namespace

namespace fsdpsim::test {
namespace {

// set_peft_model_state_dict runs per adapter in the file's order (save_pretrained's
// selected_adapters as given, else peft_config's): the KeyError of a deleted adapter stops the
// walk there, so what comes before it in the FILE reloads, whatever the declaration order.
TEST(LoadAdapters, TheFileOrderDecidesWhatLoadsBeforeAKeyError) {
  // tuner_flags_reshard=off: the delete leaves the groups as the load found them
  const std::string head = "optimizer trainable\n" + with_switch(save_header("patched"), "tuner_flags_reshard=off") + "set_adapter b\n";
  const std::string tail = "train_step\nunshard\ndelete_adapter a\nload_adapters\n";
  RunResult named = simulate(head + "save_adapters [b,a]\n" + tail);
  RunResult all = simulate(head + "save_adapters\n" + tail);
  for (int rank : {0, 1}) {
    const Observation& n = obs_at(named, 6, rank);
    EXPECT_EQ(n.status, Status::KeyError) << n.message;
    EXPECT_EQ(n.message, "KeyError: 'a'");
    EXPECT_EQ(n.groups.back().state, ShardedState::Sharded) << rank;  // b loaded: its load_state_dict pre-hook resharded
    const Observation& a = obs_at(all, 6, rank);
    EXPECT_EQ(a.status, Status::KeyError);
    EXPECT_EQ(a.groups.back().state, ShardedState::Unsharded) << rank;  // peft_config order: a first, nothing loaded
  }
}

}  // namespace
}  // namespace fsdpsim::test

// The class alone on a state the test builds (properties/machine/bare_state.hpp), no RankModel:
// get_peft_model injects both adapters with the first one trainable; set_adapter moves the
// trainable flags; a merge lists the active adapter in every layer, and delete_adapter refuses it
// while merged; after unmerge_adapter the delete goes through and the layers fall back to default.
TEST(PeftModel, DrivenAloneInjectsSwitchesMergesAndRefusesToDeleteAMergedAdapter) {
  BareRank r(seed000_header(1));
  PeftModel peft(r.peft_port());
  peft.get_peft_model();
  const int a_default = r.param("lin0.lora_A.default"), a_other = r.param("lin0.lora_A.other");
  EXPECT_EQ(r.st.present, AdapterSet::of(0) | AdapterSet::of(1));
  EXPECT_TRUE(r.st.params[a_default].rg_s);
  EXPECT_FALSE(r.st.params[a_other].rg_s);
  ASSERT_FALSE(peft.set_adapter(r.op("set_adapter other")));
  EXPECT_EQ(r.st.active, AdapterSet::of(1));
  EXPECT_FALSE(r.st.params[a_default].rg_s);
  EXPECT_TRUE(r.st.params[a_other].rg_s);
  ASSERT_FALSE(peft.merge(r.op("merge")));
  for (const LoraLayer& l : r.st.layers) EXPECT_TRUE(l.is_merged(1));
  const Raise refused = peft.delete_adapter(1);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->message, "Cannot delete adapter(s) ['other'] while they are merged. Please unmerge them first.");
  ASSERT_FALSE(peft.unmerge_adapter());
  ASSERT_FALSE(peft.delete_adapter(1));
  EXPECT_EQ(r.st.present, AdapterSet::of(0));
  EXPECT_EQ(r.st.active, AdapterSet::of(0));
}
