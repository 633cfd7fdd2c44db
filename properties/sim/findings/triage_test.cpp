// Triage (sim/findings/triage.cpp): a class is the root cause, named by the minimal
// sequence's shape, attributed to a patched switch, misuse or new.
#include <gtest/gtest.h>

#include <set>

#include "properties/sim/findings/triage_util.hpp"
#include "properties/test_util.hpp"
#include "sim/findings/triage.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

}  // namespace

TEST(Triage, Seed000IsKnownAndFixedBySetAdapterReshard) {
  TriageResult t = triaged(corpus("seed000_merged_set_adapter_w2.seq"));
  EXPECT_EQ(t.key, "S3:train_step:ok");
  EXPECT_EQ(t.verdict, Verdict::Known);
  EXPECT_EQ(t.fix_switch, "set_adapter_reshard=unmerge_first");
  EXPECT_NE(t.fix_cites.find("PeftModel.set_adapter"), std::string::npos);
  EXPECT_FALSE(t.rank_divergent);
  // The shape: the groups unsharded by a no_grad eval with the root's reshard_after_forward false, as
  // the thread does it (not an explicit unshard), set_adapter flips U only.
  EXPECT_EQ(t.signature, "S3:ok | eval(S) set_adapter(U) *(U) | root_raf=false");
  EXPECT_EQ(signature_comment(t.minimal), t.signature);
}

TEST(Triage, Seed003RankDivergentSwitchIsMisuse) {
  TriageResult t = triaged(corpus("seed003_rank_divergent_switch.seq"));
  EXPECT_EQ(t.key, "S5:cross_paired");  // gloo pairs the two reduce-scatters by bytes
  EXPECT_TRUE(t.rank_divergent);
  EXPECT_EQ(t.verdict, Verdict::Misuse);
  EXPECT_TRUE(t.fix_switch.empty());
  EXPECT_NE(t.signature.find("@set_adapter"), std::string::npos) << t.signature;
}

TEST(Triage, SignaturesAreStableAndDistinctAcrossSeeds) {
  std::set<std::string> seen;
  for (const char* name : {"seed000_merged_set_adapter_w2.seq", "seed001_ram_efficient_upstream.seq", "seed003_rank_divergent_switch.seq",
                           "seed003_save_adapters_upstream.seq", "seed004_eval_then_save_optimizer.seq"}) {
    SCOPED_TRACE(name);
    TriageResult a = triaged(corpus(name)), b = triaged(corpus(name));
    EXPECT_EQ(a.signature, b.signature);
    EXPECT_EQ(print_seq(a.minimal), print_seq(b.minimal));
    EXPECT_TRUE(seen.insert(a.signature).second) << a.signature;
  }
  // The same root cause from another start: world 1 and world 2, merged or not.
  EXPECT_EQ(triaged(corpus("seed000_merged_set_adapter_w1.seq")).signature, triaged(corpus("seed000_merged_set_adapter_w2.seq")).signature);
  EXPECT_EQ(triaged(corpus("seed000_unmerge_first_w2.seq")).signature, triaged(corpus("seed000_merged_set_adapter_w2.seq")).signature);
}

TEST(Triage, ScenarioShrinkDropsAnIrrelevantExpertsLayer) {
  // Seed 004's KeyError, with an experts layer, bf16 and ram-efficient loading around it.
  SeqFile f = parse_seq(
      "world 2\nprofile upstream\nlayer lin0 8 8\nlayer moe 8 8 experts=2\nlayer lin1 8 2\n"
      "adapter a r=2 alpha=2 targets=lin0,moe,lin1\nfully_shard lin0 reshard_after_forward=false\nfully_shard moe reshard_after_forward=true\n"
      "fully_shard root reshard_after_forward=false\n---\ntrain_step\neval\ntrain_step\neval\nsave_optimizer\n");
  TriageResult t = triaged(f);
  EXPECT_EQ(t.key, "S4:save_optimizer:key_error");
  for (const auto& l : t.minimal.scenario.layers) EXPECT_EQ(l.experts, 0) << l.name;
  EXPECT_EQ(t.signature.find("experts"), std::string::npos) << t.signature;
  EXPECT_LE(t.minimal.ops.size(), 2u);
  EXPECT_EQ(t.verdict, Verdict::Known);
  EXPECT_EQ(t.fix_switch, "optimizer_ckpt_reshard=on");
}

TEST(Triage, ScenarioShrinkMakesALoneExpertsLayerPlain) {
  // The only layer cannot be dropped: the scenario simplification turns it into nn.Linear.
  SeqFile f = parse_seq("world 2\nprofile upstream\nlayer moe 8 4 experts=2\nadapter a r=2 alpha=2 targets=moe\n"
                        "fully_shard root reshard_after_forward=false\n---\neval\nsave_optimizer\n");
  TriageResult t = triaged(f);
  ASSERT_EQ(t.minimal.scenario.layers.size(), 1u);
  EXPECT_EQ(t.minimal.scenario.layers[0].experts, 0);
  EXPECT_EQ(t.signature, "S4:key_error | eval(S) *(U) | root_raf=false");  // seed 004's own eval
}

TEST(Triage, ScenarioShrinkDropsLoadingAndDtypeWhenTheyDoNotMatter) {
  SeqFile f = parse_seq(
      "world 2\nprofile upstream\nlayer lin0 8 8\nlayer lin1 8 2\nadapter a r=2 alpha=2 targets=lin0,lin1\n"
      "fully_shard root reshard_after_forward=false\nloading ram_efficient\ndtype bf16 autocast_adapter_dtype=true\n---\nprepare\neval\nsave_optimizer\n");
  TriageResult t = triaged(f);
  EXPECT_EQ(t.key, "S4:save_optimizer:key_error");
  EXPECT_EQ(t.minimal.scenario.loading, Loading::Full);
  EXPECT_EQ(t.minimal.scenario.dtype, DType::F32);
}

TEST(Triage, PatchedLeavesNoKnownFixAndCleanFilesHaveNoClass) {
  SeqFile f = corpus("seed000_merged_set_adapter_w2.seq");
  TriageResult t;
  f.scenario.profile = "patched";
  EXPECT_FALSE(triage(f, &t));  // every known fix applied: nothing to triage
  SeqFile g = corpus("seed003_rank_divergent_switch.seq");
  g.scenario.profile = "patched";
  ASSERT_TRUE(triage(g, &t));  // misuse stays misuse under patched
  EXPECT_EQ(t.verdict, Verdict::Misuse);
}

TEST(Triage, FixingSwitchIsEmptyWhenNoSwitchRemovesTheFinding) {
  SeqFile f = corpus("seed003_rank_divergent_switch.seq");
  EXPECT_EQ(fixing_switch(f, triaged(f).root_cause.id), "");
  SeqFile g = corpus("seed004_eval_then_save_optimizer.seq");
  EXPECT_EQ(fixing_switch(g, triaged(g).root_cause.id), "optimizer_ckpt_reshard=on");
}
