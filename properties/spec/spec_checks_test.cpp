// The spec checks (model/spec/spec_checks.cpp): each fires on its bug with the
// exact text, and stays quiet on the fixed sequence.
#include <gtest/gtest.h>

#include "properties/test_util.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {
std::vector<Finding> with_spec(const RunResult& r, const std::string& spec) {
  std::vector<Finding> out;
  for (const auto& f : r.findings)
    if (f.spec == spec) out.push_back(f);
  return out;
}
const char* kSeed000Ops = "eval\nmerge\nset_adapter other\ntrain_step\ntrain_step\n";
}  // namespace

TEST(SpecS1, Seed000SecondStepNamesTheFrozenShard) {
  RunResult r = simulate(seed000_header(1) + kSeed000Ops);
  auto s1 = with_spec(r, "S1");
  ASSERT_EQ(s1.size(), 1u);
  EXPECT_EQ(s1[0].step, 5);
  EXPECT_EQ(s1[0].text,
            "S1 step 5 rank 0: expected gradients on {other}, got no_grad_fn; lin0.lora_A.other: S.requires_grad=false, "
            "U.requires_grad=false, group lin0 UNSHARDED");
}

TEST(SpecS1, PatchedSeed000HasNoFinding) {
  RunResult r = simulate(seed000_header(2, "patched") + kSeed000Ops);
  EXPECT_TRUE(r.findings.empty()) << r.findings[0].text;
}

TEST(SpecS1, InferenceModeOfALaterAdapterNoLongerFreezesTheActiveOne) {
  // tuners_utils.py::BaseTuner.inject_adapter restores existing flags after its
  // set_adapter(active, inference_mode=<b's>): `a` still trains (no D8 leak, PEFT 0.21.2).
  RunResult r = simulate(
      "world 1\nlayer l 4 2\nadapter a r=2 alpha=2 targets=l\nadapter b r=2 alpha=2 targets=l inference_mode\n"
      "fully_shard root\n---\ntrain_step\n");
  EXPECT_TRUE(with_spec(r, "S1").empty());
  EXPECT_EQ(*obs_at(r, 1, 0).grads, std::vector<std::string>{"a"});
}

TEST(SpecS1, MergedOrDisabledStepsAreNotJudged) {
  RunResult r = simulate(seed000_header(1) + "merge\ntrain_step\nunmerge\ndisable_enter\ntrain_step\ndisable_exit\n");
  EXPECT_TRUE(with_spec(r, "S1").empty());
}

TEST(SpecS3, Seed000FirstStepDropsTheFlips) {
  RunResult r = simulate(seed000_header(1) + kSeed000Ops);
  auto s3 = with_spec(r, "S3");
  ASSERT_EQ(s3.size(), 1u);
  EXPECT_EQ(s3[0].step, 4);
  EXPECT_NE(s3[0].text.find("group root: default.requires_grad U=false S=true (2 params), other.requires_grad U=true S=false (2 params)"),
            std::string::npos)
      << s3[0].text;
}

TEST(SpecS2, MergeOnTheCopyThenReshardLeavesTheShardWithoutTheDelta) {
  RunResult r = simulate(seed000_header(1) + "eval\nmerge\nreshard\n");
  auto s2 = with_spec(r, "S2");
  ASSERT_EQ(s2.size(), 2u);  // lin0 and lin1
  EXPECT_EQ(s2[0].step, 3);
  EXPECT_NE(s2[0].text.find("layer lin0 merged=[default] but its shard is missing_delta"), std::string::npos) << s2[0].text;
  EXPECT_EQ(with_spec(r, "S3").size(), 1u);
}

TEST(SpecS2, ReportedOnceUntilItHeals) {
  RunResult r = simulate(seed000_header(1) + "eval\nmerge\nreshard\nstate_dict\nstate_dict\n");
  EXPECT_EQ(with_spec(r, "S2").size(), 2u);
}

TEST(SpecS4, OptimizerCheckpointAfterEval) {
  RunResult r = simulate(seed000_header(1, "upstream", "none") + "eval\nsave_optimizer\n");
  auto s4 = with_spec(r, "S4");
  ASSERT_EQ(s4.size(), 1u);
  EXPECT_EQ(s4[0].text,
            "S4 step 2 rank 0: save_optimizer raised KeyError: 2 (2/4 optimizer parameters not registered; first: "
            "lin1.lora_A.default: S.requires_grad=true, U.requires_grad=true, group root UNSHARDED)");
}

TEST(SpecS5, RankDivergentSetAdapterIsADisagreement) {
  RunResult r = simulate(seed000_header(2, "patched") + "@1 set_adapter other\neval\n");
  auto s5 = with_spec(r, "S5");
  ASSERT_EQ(s5.size(), 1u);
  EXPECT_EQ(s5[0].step, 2);
  EXPECT_NE(s5[0].text.find("ranks disagree on active adapters: rank 0 {default}, rank 1 {other}"), std::string::npos) << s5[0].text;
}

TEST(SpecS5, ConsistentRankOpsAgreeAgain) {
  RunResult r = simulate(seed000_header(2, "patched") + "@0 set_adapter other\n@1 set_adapter other\ntrain_step\n");
  EXPECT_TRUE(r.findings.empty()) << r.findings[0].text;
}
