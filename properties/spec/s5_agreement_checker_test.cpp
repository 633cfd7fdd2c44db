// S5AgreementChecker (model/spec/s5_agreement_checker.cpp) fed observations
// directly: a stuck rank is reported once; ranks that disagree after an op
// they all ran are reported when the disagreement starts.
#include "model/spec/s5_agreement_checker.hpp"

#include <gtest/gtest.h>

#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(S5AgreementChecker, TheFirstStuckRankIsReportedOnce) {
  CheckerInputs in(seed000_header(2, "patched") + "train_step\n");
  spec::S5AgreementChecker s5;
  std::vector<Finding> out;
  Observation o = in.obs(1, 1);
  EXPECT_FALSE(spec::rank_stuck(o));
  s5.observe(in.ctx, in.op(1), o, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  o.status = Status::Hang;
  o.message = "rank 1 in all_gather(root, 8) at step 1; rank 0 issues no matching collective";
  EXPECT_TRUE(spec::rank_stuck(o));
  s5.observe(in.ctx, in.op(1), o, out);
  o.status = Status::Mismatch;
  EXPECT_TRUE(spec::rank_stuck(o));
  s5.observe(in.ctx, in.op(1), o, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].spec, "S5");
  EXPECT_EQ(out[0].rank, -1);
  EXPECT_EQ(out[0].text, "S5 step 1: rank 1 in all_gather(root, 8) at step 1; rank 0 issues no matching collective");
  EXPECT_EQ(key_words(s5, in.ctx), std::vector<uint32_t>{1u});  // bit 0: a collective reported
}

TEST(S5AgreementChecker, ADisagreementIsReportedWhenItStartsAndAgainAfterAgreement) {
  CheckerInputs in(seed000_header(2, "patched") + "train_step\n");
  spec::S5AgreementChecker s5;
  std::vector<Finding> out;
  Observation same[2] = {in.obs(1, 0), in.obs(1, 1)};
  Observation differ[2] = {same[0], same[1]};
  differ[1].params[2].dtype = DType::BF16;
  s5.after_step(in.ctx, same, 2, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  s5.after_step(in.ctx, differ, 2, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "S5 step 1: ranks disagree on " + same[0].params[2].name + " dtype: rank 0 fp32, rank 1 bf16");
  EXPECT_EQ(key_words(s5, in.ctx), std::vector<uint32_t>{2u});  // bit 1: a disagreement reported
  s5.after_step(in.ctx, differ, 2, out);
  EXPECT_EQ(out.size(), 1u);  // still disagreeing: not again
  s5.after_step(in.ctx, same, 2, out);
  EXPECT_EQ(key_words(s5, in.ctx), std::vector<uint32_t>{0u});
  s5.after_step(in.ctx, differ, 2, out);
  EXPECT_EQ(out.size(), 2u);
}

TEST(S5AgreementChecker, OnlyStepsEveryRankRanUnstuckAndProvenDifferentAreJudged) {
  CheckerInputs in(seed000_header(2, "patched") + "train_step\n");
  spec::S5AgreementChecker s5;
  std::vector<Finding> out;
  Observation obs[2] = {in.obs(1, 0), in.obs(1, 1)};
  obs[1].active = {"other"};
  s5.after_step(in.ctx, obs, 1, out);  // one rank's op
  obs[0].status = Status::Hang;
  s5.after_step(in.ctx, obs, 2, out);
  obs[0].status = Status::Ok;
  obs[1].active = obs[0].active;
  obs[0].layers[0].stored = WeightClass::Exact;
  obs[1].layers[0].stored = WeightClass::MissingDelta;
  obs[1].layers[0].stored_alt = 1u << static_cast<int>(WeightClass::Exact);  // fits exact as well
  s5.after_step(in.ctx, obs, 2, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  obs[1].layers[0].stored = WeightClass::Unjudged;  // no opinion: no proven difference
  obs[1].layers[0].stored_alt = 0;
  s5.after_step(in.ctx, obs, 2, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  obs[1].layers[0].stored = WeightClass::MissingDelta;
  s5.after_step(in.ctx, obs, 2, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "S5 step 1: ranks disagree on lin0 stored weight: rank 0 exact, rank 1 missing_delta");
}

TEST(S5AgreementChecker, SameAgreementFieldsComparesInPlace) {
  CheckerInputs in(seed000_header(2, "patched") + "merge\n");
  Observation a = in.obs(1, 0), b = in.obs(1, 1);
  EXPECT_TRUE(spec::same_agreement_fields(a, b));
  b.layers[0].merged.push_back("other");
  EXPECT_FALSE(spec::same_agreement_fields(a, b));
  b = a;
  b.params[0].rg_s = !b.params[0].rg_s;
  EXPECT_FALSE(spec::same_agreement_fields(a, b));
  b = a;
  b.collectives.clear();  // not an agreement field
  EXPECT_TRUE(spec::same_agreement_fields(a, b));
}

// A rank holding one parameter more (ranks out of step around an add): describe's lists
// misalign, and S5 compares field texts position by position, as worded. Here rank 1's extra
// leading parameter shifts its flags by one: the first position whose texts differ is reported.
TEST(S5AgreementChecker, ListsOfOtherLengthsAreComparedByTheirTexts) {
  CheckerInputs in(seed000_header(2, "patched") + "train_step\n");
  spec::S5AgreementChecker s5;
  std::vector<Finding> out;
  Observation obs[2] = {in.obs(1, 0), in.obs(1, 1)};
  ASSERT_GE(obs[0].params.size(), 2u);
  for (auto& p : obs[0].params) p.rg_s = false;
  obs[1].params = obs[0].params;
  ParamObs extra = obs[0].params[0];
  extra.rg_s = true;
  obs[1].params.insert(obs[1].params.begin(), extra);  // rank 1: true, false, false, ...; rank 0: false, false, ...
  s5.after_step(in.ctx, obs, 2, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "S5 step 1: ranks disagree on " + obs[0].params[0].name + " S.requires_grad: rank 0 false, rank 1 true");
  // Shifted by one, rank 0's first dtype field meets rank 1's last requires_grad field: "fp32" vs
  // "false" differ as texts, not as kinds of field, and are reported when nothing differs before.
  Observation flat[2] = {obs[0], obs[1]};
  flat[1].params[0].rg_s = false;
  spec::S5AgreementChecker fresh;
  std::vector<Finding> out2;
  fresh.after_step(in.ctx, flat, 2, out2);
  ASSERT_EQ(out2.size(), 1u);
  EXPECT_EQ(out2[0].text, "S5 step 1: ranks disagree on " + obs[0].params[0].name + " dtype: rank 0 fp32, rank 1 false");
}

TEST(S5AgreementChecker, ARankHoldingOnlyPaddingOfAWeightHasNoOpinionOnIt) {
  CheckerInputs in(seed000_header(3, "patched") + "train_step\n");
  spec::S5AgreementChecker s5;
  std::vector<Finding> out;
  Observation obs[3] = {in.obs(1, 0), in.obs(1, 1), in.obs(1, 2)};
  ASSERT_FALSE(obs[2].layers[1].group.empty());
  // lin1 has 2 output rows: chunks of 1 at world 3, rank 2 holds only padding (read as exact)
  obs[0].layers[1].stored = obs[1].layers[1].stored = WeightClass::MissingDelta;
  s5.after_step(in.ctx, obs, 3, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  // lin0 has 20: rank 2 holds 6 of them, and its reading is an opinion
  obs[0].layers[0].stored = obs[1].layers[0].stored = WeightClass::MissingDelta;
  s5.after_step(in.ctx, obs, 3, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "S5 step 1: ranks disagree on lin0 stored weight: rank 0 missing_delta, rank 2 exact");
}
