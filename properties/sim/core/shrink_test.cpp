// Shrinking (sim/core/shrink.cpp): the finding's signature survives, the result is
// small, and its filled-in expectations replay.
#include <gtest/gtest.h>

#include "properties/test_util.hpp"
#include "sim/findings/expectations.hpp"
#include "sim/core/shrink.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

// Under the pinned versions (peft 0.21.2: no reshard in set_adapter) the merge
// is not needed; under PEFT main as #3872 describes it (skip_merged) it is.
TEST(Shrink, Seed000ShrinksBelowTheThreadsRepro) {
  for (const char* profile : {"upstream", "peft-main-3872"}) {
    SCOPED_TRACE(profile);
    SeqFile f = parse_seq(seed000_header(2, profile) + "eval\nmerge\nset_adapter other\ntrain_step\ntrain_step\ntrain_step\n");
    ShrinkResult r;
    ASSERT_TRUE(shrink(f, &r));
    EXPECT_EQ(r.signature, "S3:train_step:ok");
    EXPECT_LE(r.minimal.ops.size(), 6u);
    EXPECT_EQ(r.minimal.scenario.world, 1);
    std::string ops;
    for (const auto& op : r.minimal.ops) ops += op_text(op) + ";";
    EXPECT_EQ(ops, std::string(profile) == "upstream" ? "eval;set_adapter other;train_step;"
                                                      : "eval;merge;set_adapter other;train_step;");
    // The filled-in expectations pass, findings included.
    RunResult again = run_checked(r.minimal);
    auto failures = check_expectations(r.minimal, again.observations, again.findings, "min.seq");
    EXPECT_TRUE(failures.empty()) << failures[0].text;
  }
}

TEST(Shrink, KeepsTheSignatureNotJustAFinding) {
  // Noise around seed 004's KeyError: the result must still be an S4 from save_optimizer.
  SeqFile f = parse_seq(seed000_header(2, "upstream", "none") +
                        "train_step\nset_adapter default\nzero_grad\neval\nreshard lin0\nsave_optimizer\nstep\n");
  ShrinkResult r;
  ASSERT_TRUE(shrink(f, &r));
  EXPECT_EQ(r.signature, "S4:save_optimizer:key_error");
  EXPECT_EQ(r.minimal.ops.size(), 2u);  // eval; save_optimizer
  EXPECT_EQ(r.minimal.ops.back().kind, OpKind::SaveOptimizer);
}

TEST(Shrink, NothingToShrinkWithoutAFinding) {
  SeqFile f = parse_seq(seed000_header(1, "patched") + "train_step\ntrain_step\n");
  ShrinkResult r;
  EXPECT_FALSE(shrink(f, &r));
}

TEST(Shrink, SignaturesNameHowRanksPartForS5) {
  SeqFile f = parse_seq(seed000_header(2) + "@0 unshard lin0\n");
  RunResult r = run_checked(f);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(finding_signature(f, r, r.findings[0]), "S5:hang");
}

// shrink --divergence: the same minimization under any predicate, here "a
// delete_adapter op on rank 1 remains" (what a divergence predicate looks like
// to the shrinker: a property of the candidate, run however it likes).
TEST(Shrink, ShrinkWhileKeepsAnyPredicate) {
  SeqFile f = parse_seq(seed000_header(2, "upstream") + "eval\nmerge\n@1 zero_grad\nset_adapter other\ntrain_step\ntrain_step\n");
  ShrinkResult r;
  int calls = 0;
  shrink_while(f, &r, [&](const SeqFile& c) {
    ++calls;
    for (const auto& op : c.ops)
      if (op.kind == OpKind::ZeroGrad && op.rank == 1) return true;
    return false;
  });
  ASSERT_EQ(r.minimal.ops.size(), 1u);
  EXPECT_EQ(op_text(r.minimal.ops[0]), "@1 zero_grad");
  EXPECT_EQ(r.minimal.scenario.world, 2);  // @1 needs two ranks
  EXPECT_EQ(r.runs, calls);
}

TEST(Shrink, DivergenceSignatureIsTheOpAndField) {
  EXPECT_EQ(divergence_signature("step 5 rank 1 (train_step): grads: {other} vs {}"), "(train_step): grads");
  EXPECT_EQ(divergence_signature("step 12 rank 0 (set_adapter other): param[3]: rg_s true vs false"), "(set_adapter other): param[3]");
  EXPECT_EQ(divergence_signature("finding on the upstream backend only: S1 step 4 rank 1: expected"),
            "finding on the upstream backend only: S1");
}

// The filled-in expectations name an optimizer index only for the optimizer's KeyError: a
// load_adapters KeyError (an adapter deleted since the save) carries none, and its printed
// expectations still parse and replay.
TEST(Shrink, FilledExpectationsGiveAnIndexOnlyToTheOptimizersKeyError) {
  SeqFile f = parse_seq(seed000_header(1, "upstream", "none") + "save_adapters\ndelete_adapter default\nload_adapters\neval\nsave_optimizer\n");
  RunResult r = run_checked(f);
  fill_expectations(f, r);
  const std::string text = print_seq(f);
  EXPECT_NE(text.find("load_adapters         expect error=key_error finding=S6"), std::string::npos) << text;
  EXPECT_NE(text.find("expect error=key_error index=0"), std::string::npos) << text;
  SeqFile again = parse_seq(text);
  RunResult rerun = run_checked(again);
  EXPECT_TRUE(check_expectations(again, rerun.observations, rerun.findings, "f.seq").empty());
}

// Triage's canonical shrink prefers what a training loop does: the unsharded root that
// set_adapter writes on (its flags then dropped at the train_step's reshard, S3) is reached
// by a no_grad eval with the root's reshard_after_forward false (accelerate's default root),
// not by an explicit unshard(), where both keep the finding; the same input shrinks to the
// same sequence every time.
TEST(Shrink, CanonicalShrinkPrefersAnEvalToAnInternalUnshard) {
  const std::string header = "world 1\nseed 0\nprofile upstream\nlayer lin1 4 2\n"
                             "adapter default r=3 alpha=6 targets=lin1 init=random\n"
                             "adapter third r=4 alpha=8 targets=lin1 init=random\n"
                             "fully_shard root reshard_after_forward=false\noptimizer trainable\n---\n";
  for (const char* ops : {"unshard\nset_adapter third\ntrain_step\n", "eval\nset_adapter third\ntrain_step\n",
                          "forward\nzero_grad\nset_adapter third\ntrain_step\n"}) {
    SCOPED_TRACE(ops);
    ShrinkResult a, b;
    ASSERT_TRUE(shrink(parse_seq(header + ops), &a, {}, /*canonical=*/true));
    ASSERT_TRUE(shrink(parse_seq(header + ops), &b, {}, /*canonical=*/true));
    EXPECT_EQ(a.signature, "S3:train_step:ok");
    std::string text;
    for (const auto& op : a.minimal.ops) text += op_text(op) + ";";
    EXPECT_EQ(text, "eval;set_adapter third;train_step;");
    ASSERT_EQ(a.minimal.scenario.shards.size(), 1u);
    EXPECT_EQ(a.minimal.scenario.shards[0].raf, Raf::False);
    EXPECT_EQ(print_seq(a.minimal), print_seq(b.minimal));  // deterministic
  }
}

// A MixedPrecisionPolicy the finding does not need is dropped whole; one it needs keeps only the
// keys it needs (pytorch#187376: the frozen-at-first-forward group needs a bf16 param_dtype).
TEST(Shrink, APolicyGoesWhereTheFindingDoesNotNeedIt) {
  std::string header = seed000_header(2, "upstream", "none");
  header.insert(header.find("---"), "mixed_precision param_dtype=bf16 reduce_dtype=fp32 cast_forward_inputs=true\n");
  ShrinkResult r;
  ASSERT_TRUE(shrink(parse_seq(header + "train_step\neval\nsave_optimizer\n"), &r));
  EXPECT_EQ(r.signature, "S4:save_optimizer:key_error");
  EXPECT_FALSE(r.minimal.scenario.mixed_precision()) << print_seq(r.minimal);

  const SeqFile frozen = parse_seq(
      "world 2\nlayer lin0 8 6\nlayer lin1 6 4\nadapter default targets=lin1\nadapter other targets=lin0\n"
      "fully_shard lin0 reshard_after_forward=true\nfully_shard root reshard_after_forward=true\noptimizer all\n"
      "mixed_precision param_dtype=bf16 reduce_dtype=fp32 cast_forward_inputs=true\n---\n"
      "train_step\nset_adapter other\ntrain_step\ntrain_step\n");
  ASSERT_TRUE(shrink(frozen, &r));
  EXPECT_EQ(r.signature, "S1:train_step:ok:missing");
  MixedPrecision bf16;
  bf16.param_dtype = DType::BF16;
  EXPECT_EQ(r.minimal.scenario.mp, bf16) << print_seq(r.minimal);
}
