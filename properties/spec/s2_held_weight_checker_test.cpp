// S2HeldWeightChecker (model/spec/s2_held_weight_checker.cpp) fed observations
// directly: a layer whose held weight is not W0 + merged deltas is reported
// once, and again only after it healed.
#include "model/spec/s2_held_weight_checker.hpp"

#include <gtest/gtest.h>

#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(S2HeldWeightChecker, ReportedWhenItTurnsBadThenOnceUntilItHeals) {
  CheckerInputs in(seed000_header(1, "patched") + "merge\n");
  spec::S2HeldWeightChecker s2(in.ctx);
  std::vector<Finding> out;
  Observation good = in.obs(1);
  Observation bad = good;
  bad.layers[1].registered = WeightClass::MissingDelta;
  s2.observe(in.ctx, in.op(1), good, out);
  s2.observe(in.ctx, in.op(1), bad, out);
  EXPECT_EQ(key_words(s2, in.ctx), (std::vector<uint32_t>{1u << 1}));  // rank 0: layer 1 reported
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].spec, "S2");
  EXPECT_EQ(out[0].text, "S2 step 1 rank 0: layer lin1 merged=[default] but its shard is missing_delta (stored shard exact)");
  s2.observe(in.ctx, in.op(1), bad, out);
  EXPECT_EQ(out.size(), 1u);  // still bad: not again
  s2.observe(in.ctx, in.op(1), good, out);
  s2.observe(in.ctx, in.op(1), bad, out);
  EXPECT_EQ(out.size(), 2u);  // healed, then bad again
}

TEST(S2HeldWeightChecker, NamesTheUnshardedCopyWhenTheGroupIsUnsharded) {
  CheckerInputs in(seed000_header(1, "patched") + "unshard\n");
  spec::S2HeldWeightChecker s2(in.ctx);
  std::vector<Finding> out;
  Observation o = in.obs(1);
  o.layers[0].registered = WeightClass::Corrupt;
  o.layers[0].stored = WeightClass::ExtraDelta;
  s2.observe(in.ctx, in.op(1), o, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "S2 step 1 rank 0: layer lin0 merged=[] but its unsharded copy is corrupt (stored shard extra_delta)");
}

TEST(S2HeldWeightChecker, EachRankRemembersItsOwnLayers) {
  CheckerInputs in(seed000_header(2, "patched") + "merge\n");
  spec::S2HeldWeightChecker s2(in.ctx);
  std::vector<Finding> out;
  Observation r0 = in.obs(1, 0), r1 = in.obs(1, 1);
  r0.layers[0].registered = r1.layers[0].registered = WeightClass::MissingDelta;
  s2.observe(in.ctx, in.op(1), r0, out);
  s2.observe(in.ctx, in.op(1), r1, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].rank, 1);
}
