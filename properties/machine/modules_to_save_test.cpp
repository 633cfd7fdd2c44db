// PEFT's ModulesToSaveWrapper in the model (model/machine/modules_to_save.cpp): the copies'
// names and order, whose copy runs and trains, and the wrapper's own refusals.
#include <gtest/gtest.h>

#include "model/machine/modules_to_save.hpp"
#include "properties/machine/bare_state.hpp"
#include "properties/test_util.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {
// a and b target lin0 and both save lin1, which sits in its own FSDP group.
std::string saved_header(const std::string& extra = "") {
  return "world 1\nlayer lin0 6 8\nlayer lin1 8 3\n"
         "adapter a r=2 alpha=2 targets=lin0 modules_to_save=lin1\n"
         "adapter b r=2 alpha=2 targets=lin0 modules_to_save=lin1\n" +
         extra + "fully_shard lin1\nfully_shard root\n---\n";
}
}  // namespace

TEST(ModulesToSave, TheLayerBecomesOriginalModuleAndOneCopyPerAdapter) {
  OneRank t(saved_header());
  std::vector<std::string> lin1;
  for (int p : t.topo->state_dict_order)
    if (t.topo->params[p].layer == t.layer("lin1")) lin1.push_back(t.topo->params[p].name);
  EXPECT_EQ(lin1, (std::vector<std::string>{"lin1.original_module.weight", "lin1.original_module.bias",
                                            "lin1.modules_to_save.a.weight", "lin1.modules_to_save.a.bias",
                                            "lin1.modules_to_save.b.weight", "lin1.modules_to_save.b.bias"}));
  EXPECT_EQ(t.file.scenario.adapter_of_param("lin1.modules_to_save.b.bias"), 1);
  EXPECT_EQ(t.file.scenario.adapter_of_param("lin1.original_module.weight"), -1);
  EXPECT_EQ(t.topo->params[t.param("lin1.modules_to_save.a.weight")].group, t.group("lin1"));
}

TEST(ModulesToSave, OnlyTheActiveAdaptersCopyTrainsAndRuns) {
  OneRank t(saved_header());
  EXPECT_TRUE(t.ps("lin1.modules_to_save.a.weight").rg_s);  // a is active at get_peft_model
  EXPECT_FALSE(t.ps("lin1.modules_to_save.b.weight").rg_s);
  EXPECT_FALSE(t.ps("lin1.original_module.weight").rg_s);
  t.op("set_adapter b");
  EXPECT_FALSE(t.ps("lin1.modules_to_save.a.bias").rg_s);
  EXPECT_TRUE(t.ps("lin1.modules_to_save.b.bias").rg_s);
  EXPECT_EQ(t.op("train_step").grads, AdapterSet::of(1));
  t.op("disable_enter");
  EXPECT_FALSE(t.ps("lin1.modules_to_save.b.weight").rg_s);  // every copy frozen
  t.op("disable_exit");
  EXPECT_TRUE(t.ps("lin1.modules_to_save.b.weight").rg_s);
  EXPECT_FALSE(t.ps("lin1.modules_to_save.a.weight").rg_s);
}

TEST(ModulesToSave, TwoCopiesAtOnceAreRefusedByTheFsdpWrappedModule) {
  OneRank t(saved_header());
  const OpResult& r = t.op_may_raise("set_adapter [a,b]");
  EXPECT_EQ(r.status, Status::ValueError);
  EXPECT_EQ(r.message, "Only one adapter can be set at a time for FSDPModulesToSaveWrapper(");
  EXPECT_TRUE(t.ps("lin1.modules_to_save.a.weight").rg_s);  // refused before any flip
}

TEST(ModulesToSave, ADeleteThatRaisesKeepsTheCopyInTheModuleDict) {
  // c is deleted while the wrapper runs no copy (a, without one, was active at get_peft_model).
  OneRank t("world 1\nlayer lin0 6 8\nlayer lin1 8 4\n"
            "adapter a r=2 alpha=2 targets=lin0\n"
            "adapter b r=2 alpha=2 targets=lin0 modules_to_save=lin1\n"
            "adapter c r=2 alpha=2 targets=lin0 modules_to_save=lin1\n"
            "fully_shard lin1\nfully_shard root\n---\n");
  EXPECT_EQ(t.op("delete_adapter a").status, Status::Ok);
  const OpResult& r = t.op_may_raise("delete_adapter c");
  EXPECT_EQ(r.status, Status::Exception);
  EXPECT_EQ(r.message, "IndexError: list index out of range");
  EXPECT_TRUE(t.ps("lin1.modules_to_save.c.weight").present);
  EXPECT_EQ(t.op_may_raise("set_adapter [b,c]").status, Status::ValueError);  // still two copies there
  EXPECT_EQ(t.op("set_adapter b").status, Status::Ok);
  EXPECT_TRUE(t.ps("lin1.modules_to_save.b.weight").rg_s);
}

TEST(ModulesToSave, DeletingTheActiveAdapterMovesTheWrapperToTheNextOne) {
  OneRank t(saved_header());
  EXPECT_EQ(t.op("delete_adapter a").status, Status::Ok);
  EXPECT_FALSE(t.ps("lin1.modules_to_save.a.weight").present);
  EXPECT_TRUE(t.ps("lin1.modules_to_save.b.weight").rg_s);
}

TEST(ModulesToSave, ALayerBothTargetedAndSavedIsBadInput) {
  try {
    parse_seq("layer lin0 6 8\nlayer lin1 8 3\nadapter a r=2 alpha=2 targets=lin0,lin1 modules_to_save=lin1\n"
              "fully_shard root\n---\ntrain_step\n",
              "<test>");
    FAIL() << "accepted";
  } catch (const SourceError& e) {
    EXPECT_NE(std::string(e.what()).find("<test>:3:1: adapter 'a' lists 'lin1' in modules_to_save, which adapter 'a' targets"),
              std::string::npos)
        << e.what();
  }
}

// The class alone on a state the test builds (properties/machine/bare_state.hpp), no RankModel:
// the first add makes the layer a wrapper running a's copy (trainable), a second adds b's frozen
// copy; set_adapter moves the one trainable copy; a list naming both copies is refused; a delete
// of the copy running with b left active drops a's copy and runs b's.
TEST(ModulesToSaveWrapper, DrivenAloneAddSwitchRefuseAndDelete) {
  BareRank r(saved_header());
  const int l = r.topo.layer_index("lin1");
  LoraLayer& module = r.st.layers[l];
  const int aw = r.param("lin1.modules_to_save.a.weight"), bw = r.param("lin1.modules_to_save.b.weight");
  ModulesToSaveWrapper(r.layer_params(l), nullptr, module).add(0, false, true);
  EXPECT_TRUE(module.wrapper);
  EXPECT_EQ(module.copy_active, 0);
  EXPECT_TRUE(r.st.params[aw].rg_s);
  ModulesToSaveWrapper(r.layer_params(l), nullptr, module).add(1, false, false);
  EXPECT_EQ(module.copy_active, 0);
  EXPECT_FALSE(r.st.params[bw].rg_s);
  ModulesToSaveWrapper(r.layer_params(l), nullptr, module).set_adapter(1, false);
  EXPECT_FALSE(r.st.params[aw].rg_s);
  EXPECT_TRUE(r.st.params[bw].rg_s);
  const Raise two = ModulesToSaveWrapper(r.layer_params(l), nullptr, module).set_adapter_named(AdapterSet::of(0) | AdapterSet::of(1), true, false);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->message, "Only one adapter can be set at a time for FSDPModulesToSaveWrapper(");
  ASSERT_FALSE(ModulesToSaveWrapper(r.layer_params(l), nullptr, module).delete_adapter(0, AdapterSet::of(1)));
  EXPECT_FALSE(module.copies.contains(0));
  EXPECT_FALSE(r.st.params[aw].present);
  EXPECT_EQ(module.copy_active, 1);
  ModulesToSaveWrapper(r.layer_params(l), nullptr, module).enable_adapters(false);
  EXPECT_TRUE(module.disabled);
  EXPECT_FALSE(r.st.params[bw].rg_s);
}
