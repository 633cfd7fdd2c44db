// S3ReshardChecker (model/spec/s3_reshard_checker.cpp) fed observations
// directly: a reshard that drops what the unsharded copy held is a finding,
// judged against the rank's previous observation.
#include "model/spec/s3_reshard_checker.hpp"

#include <gtest/gtest.h>

#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {
// Seed 000 unsharded, then resharded with one parameter's flag lost (U trained, S frozen).
struct DroppedFlip {
  CheckerInputs in{seed000_header(1, "patched") + "unshard\nreshard\n"};
  Observation was = in.obs(1), now = in.obs(2);
  DroppedFlip() {
    for (auto& p : was.params)
      if (p.name == "lin0.lora_A.default") p.rg_u = 1;
    for (auto& p : now.params)
      if (p.name == "lin0.lora_A.default") p.rg_s = false;
  }
};
}  // namespace

TEST(S3ReshardChecker, ADroppedFlagIsReportedPerGroup) {
  for (bool borrow : {false, true}) {
    DroppedFlip d;
    spec::S3ReshardChecker s3(d.in.ctx, borrow);
    std::vector<Finding> out;
    s3.observe(d.in.ctx, d.in.op(1), d.was, out);
    s3.observe(d.in.ctx, d.in.op(2), d.now, out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].spec, "S3");
    EXPECT_EQ(out[0].text,
              "S3 step 2 rank 0: reshard dropped changes made on the unsharded copy: group lin0: "
              "default.requires_grad U=true S=false");
  }
}

TEST(S3ReshardChecker, ValuesEditedOnTheCopyAndCountedClauses) {
  DroppedFlip d;
  for (auto& p : d.was.params)
    if (p.name == "lin0.lora_B.default") p.rg_u = 1;
  for (auto& p : d.now.params)
    if (p.name == "lin0.lora_B.default") p.rg_s = false;
  d.was.layers[1].registered = WeightClass::ExtraDelta;  // lin1 is in group root
  spec::S3ReshardChecker s3(d.in.ctx, false);
  std::vector<Finding> out;
  s3.observe(d.in.ctx, d.in.op(1), d.was, out);
  s3.observe(d.in.ctx, d.in.op(2), d.now, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text,
            "S3 step 2 rank 0: reshard dropped changes made on the unsharded copy: group root: lin1.weight values "
            "edited on U (merge/unmerge/load); group lin0: default.requires_grad U=true S=false (2 params)");  // in group order
}

TEST(S3ReshardChecker, AFlagSettingOpOrNoPreviousObservationIsNotJudged) {
  DroppedFlip d;
  spec::S3ReshardChecker s3(d.in.ctx, false);
  std::vector<Finding> out;
  s3.observe(d.in.ctx, d.in.op(2), d.now, out);  // nothing before it
  EXPECT_EQ(key_words(s3, d.in.ctx).at(0), 1u);  // a previous observation is kept now
  s3.observe(d.in.ctx, d.in.op(1), d.was, out);
  const SeqFile set = parse_seq(seed000_header(1, "patched") + "set_adapter default\n", "<test>");
  s3.observe(d.in.ctx, set.ops[0], d.now, out);  // set_adapter may reshard and set flags
  EXPECT_TRUE(out.empty()) << out[0].text;
}

TEST(S3ReshardChecker, TheKeyHoldsWhatTheNextStepCompares) {
  DroppedFlip d;
  spec::S3ReshardChecker s3(d.in.ctx, false);
  EXPECT_EQ(key_words(s3, d.in.ctx), std::vector<uint32_t>{0u});  // no previous observation: that flag only
  std::vector<Finding> out;
  s3.observe(d.in.ctx, d.in.op(1), d.was, out);
  const std::vector<uint32_t> key = key_words(s3, d.in.ctx);
  // kept; sizes; group states; U's flag + 1 where its group is UNSHARDED (both are); layers' class and merges
  ASSERT_EQ(key.size(), 2u + d.was.groups.size() + d.was.params.size() + d.was.layers.size());
  EXPECT_EQ(key[0], 1u);
  EXPECT_EQ(key[1], (d.was.groups.size() << 20) | (d.was.params.size() << 10) | d.was.layers.size());
  for (size_t g = 0; g < d.was.groups.size(); ++g) EXPECT_EQ(key[2 + g], static_cast<uint32_t>(ShardedState::Unsharded));
  for (size_t p = 0; p < d.was.params.size(); ++p)
    EXPECT_EQ(key[2 + d.was.groups.size() + p], static_cast<uint32_t>(d.was.params[p].rg_u + 1)) << d.was.params[p].name;
}
