// S1GradsChecker (model/spec/s1_grads_checker.cpp) fed observations directly:
// gradients on other shards than the intended ones are a finding; eval
// outputs, disabled adapters and merged layers are not judged.
#include "model/spec/s1_grads_checker.hpp"

#include <gtest/gtest.h>

#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {
const spec::Mask kDefault = 1, kOther = 2;  // seed 000's adapters, in declaration order
// Bits 24-27 of rank 0's key word: what S1 remembers of the pending output (judge leaves the
// intent, bits 0-23, as declared).
uint32_t flags(const spec::S1GradsChecker& s1, const CheckerInputs& in) { return key_words(s1, in.ctx)[0] & ~0xffffffu; }
}  // namespace

TEST(S1GradsChecker, GradientsOnAnotherAdapterNameTheFirstWrongParameter) {
  CheckerInputs in(seed000_header(1, "patched") + "train_step\n");
  spec::S1GradsChecker s1(in.ctx);
  std::vector<Finding> out;
  Observation o = in.obs(1);
  s1.judge(in.ctx, in.op(1), o, kDefault, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  o.grads = std::vector<Name>{"other"};
  s1.judge(in.ctx, in.op(1), o, kDefault, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].spec, "S1");
  EXPECT_EQ(out[0].step, 1);
  EXPECT_EQ(out[0].rank, 0);
  EXPECT_EQ(out[0].text,
            "S1 step 1 rank 0: expected gradients on {default}, got {other}; lin0.lora_A.default: S.requires_grad=true, "
            "U.requires_grad=true, group lin0 SHARDED");
}

TEST(S1GradsChecker, NoGradFnAgainstAnIntendedAdapter) {
  CheckerInputs in(seed000_header(1, "patched") + "train_step\n");
  spec::S1GradsChecker s1(in.ctx);
  std::vector<Finding> out;
  Observation o = in.obs(1);
  o.status = Status::NoGradFn;
  s1.judge(in.ctx, in.op(1), o, kDefault | kOther, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text,
            "S1 step 1 rank 0: expected gradients on {default,other}, got no_grad_fn; lin0.lora_A.default: "
            "S.requires_grad=true, U.requires_grad=true, group lin0 SHARDED");  // the first parameter of a wrong adapter
}

TEST(S1GradsChecker, BackwardOfAnEvalOutputOrAfterAFlagChangeIsNotJudged) {
  CheckerInputs in(seed000_header(1, "patched") + "eval\nbackward\nforward\nset_adapter other\nbackward\nforward\nbackward\n");
  spec::S1GradsChecker s1(in.ctx);
  std::vector<Finding> out;
  auto wrong = [&](int step) {
    Observation o = in.obs(step);
    o.status = Status::Ok;
    o.grads = std::vector<Name>{};
    return o;
  };
  s1.judge(in.ctx, in.op(1), in.obs(1), kDefault, out);
  EXPECT_EQ(flags(s1, in), 1u << 24);  // the pending output is an eval's
  s1.judge(in.ctx, in.op(2), wrong(2), kDefault, out);
  EXPECT_EQ(flags(s1, in), 0u);
  s1.judge(in.ctx, in.op(3), in.obs(3), kDefault, out);
  s1.judge(in.ctx, in.op(4), in.obs(4), kOther, out);
  EXPECT_EQ(flags(s1, in), 1u << 25);  // a flag changed since the forward
  s1.judge(in.ctx, in.op(5), wrong(5), kOther, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  s1.judge(in.ctx, in.op(6), in.obs(6), kOther, out);
  s1.judge(in.ctx, in.op(7), wrong(7), kOther, out);  // a plain forward, backward: judged
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].step, 7);
}

TEST(S1GradsChecker, DisabledOrMergedStepsAreNotJudged) {
  CheckerInputs in(seed000_header(1, "patched") + "train_step\n");
  spec::S1GradsChecker s1(in.ctx);
  std::vector<Finding> out;
  Observation o = in.obs(1);
  o.grads = std::vector<Name>{};
  o.disabled = true;
  s1.judge(in.ctx, in.op(1), o, kDefault, out);
  o.disabled = false;
  o.layers[1].merged = {"default"};
  s1.judge(in.ctx, in.op(1), o, kDefault, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  o.layers[1].merged.clear();
  s1.judge(in.ctx, in.op(1), o, kDefault, out);
  EXPECT_EQ(out.size(), 1u);
}

TEST(S1GradsChecker, OnlyPresentAdaptersAreExpected) {
  // Intending `other` while the rank holds none of its parameters expects no gradients.
  CheckerInputs in(seed000_header(1, "patched") + "delete_adapter other\ntrain_step\n");
  spec::S1GradsChecker s1(in.ctx);
  std::vector<Finding> out;
  Observation o = in.obs(2);
  o.grads = std::vector<Name>{};
  s1.judge(in.ctx, in.op(2), o, kOther, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  o.grads = std::vector<Name>{"default"};
  s1.judge(in.ctx, in.op(2), o, kOther, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text.rfind("S1 step 2 rank 0: expected no gradients, got {default}; lin0.lora_A.default: ", 0), 0u) << out[0].text;
}

// Hazard B6: a micro-batch with gradient sync off sends nothing to any shard by design and is
// not judged; the synced step after it is, so U grads kept for `default` reaching its shards
// after set_adapter other are a finding.
TEST(S1GradsChecker, UnsyncedMicroBatchIsNotJudgedTheSyncedStepIs) {
  CheckerInputs in(seed000_header(1, "patched") + "gradient_sync off\ntrain_step\nset_adapter other\ngradient_sync on\ntrain_step\n");
  spec::S1GradsChecker s1(in.ctx);
  std::vector<Finding> out;
  s1.judge(in.ctx, in.op(1), in.obs(1), kDefault, out);
  EXPECT_EQ(flags(s1, in), 1u << 27);
  Observation none = in.obs(2);
  none.grads = std::vector<Name>{};
  s1.judge(in.ctx, in.op(2), none, kDefault, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  s1.judge(in.ctx, in.op(3), in.obs(3), kOther, out);
  s1.judge(in.ctx, in.op(4), in.obs(4), kOther, out);
  EXPECT_EQ(flags(s1, in) & (1u << 27), 0u);  // synced again
  Observation both = in.obs(5);
  both.grads = std::vector<Name>{"default", "other"};
  s1.judge(in.ctx, in.op(5), both, kOther, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].step, 5);
  EXPECT_NE(out[0].text.find("expected gradients on {other}, got {default,other}"), std::string::npos) << out[0].text;
}

// observe follows the user's intent from the ops (IntentTracker), which its key words carry.
TEST(S1GradsChecker, ObserveJudgesAgainstTheIntentOfTheOps) {
  CheckerInputs in(seed000_header(2, "patched") + "set_adapter other\ntrain_step\n");
  spec::S1GradsChecker s1(in.ctx);
  std::vector<Finding> out;
  EXPECT_EQ(key_words(s1, in.ctx), (std::vector<uint32_t>{kDefault, kDefault}));  // one word per rank
  s1.observe(in.ctx, in.op(1), in.obs(1, 0), out);
  EXPECT_EQ(key_words(s1, in.ctx), (std::vector<uint32_t>{kOther | 1u << 25, kDefault}));
  Observation o = in.obs(2, 0);
  o.grads = std::vector<Name>{"default"};
  s1.observe(in.ctx, in.op(2), o, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text.rfind("S1 step 2 rank 0: expected gradients on {other}, got {default}", 0), 0u) << out[0].text;
}
