// S6SavedAdaptersChecker (model/spec/s6_saved_adapters_checker.cpp) fed
// observations directly: a save that misses a selected adapter or holds a
// shard, a failed load and a reload that differs are findings.
#include "model/spec/s6_saved_adapters_checker.hpp"

#include <gtest/gtest.h>

#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(S6SavedAdaptersChecker, AMissingAdapterAndAShardSavedAreOneFinding) {
  CheckerInputs in(seed000_header(1, "patched") + "save_adapters\nsave_adapters other\n");
  std::vector<Finding> out;
  Observation o = in.obs(1);
  spec::S6SavedAdaptersChecker().observe(in.ctx, in.op(1), o, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  ASSERT_FALSE(o.saved.empty());
  std::vector<SavedObs> kept;
  for (const auto& sv : o.saved)
    if (in.ctx.owner_mask(sv.name) == 1) kept.push_back(sv);  // only default's
  o.saved = kept;
  o.saved[1].rows = o.saved[1].full_rows / 2;
  spec::S6SavedAdaptersChecker().observe(in.ctx, in.op(1), o, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].spec, "S6");
  EXPECT_EQ(out[0].text, "S6 step 1 rank 0: adapters {other} were not saved (saved: {default}); " + o.saved[1].name + " saved " +
                             std::to_string(o.saved[1].rows) + " of " + std::to_string(o.saved[1].full_rows) +
                             " rows (this rank's shard, not the full tensor)");
  Observation only_other = in.obs(2);
  only_other.saved = kept;  // `save_adapters other` selects other alone
  spec::S6SavedAdaptersChecker().observe(in.ctx, in.op(2), only_other, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].text, "S6 step 2 rank 0: adapters {other} were not saved (saved: {default})");
}

TEST(S6SavedAdaptersChecker, LoadsThatRaiseOrDifferAreFindings) {
  CheckerInputs in(seed000_header(1, "patched") + "save_adapters\nload_adapters\n");
  std::vector<Finding> out;
  Observation o = in.obs(2);
  spec::S6SavedAdaptersChecker().observe(in.ctx, in.op(2), o, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  o.status = Status::ValueError;  // the user's error, not the library's
  spec::S6SavedAdaptersChecker().observe(in.ctx, in.op(2), o, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  o.status = Status::ShapeError;
  o.message = "size mismatch";
  spec::S6SavedAdaptersChecker().observe(in.ctx, in.op(2), o, out);
  o.status = Status::Ok;
  o.reload_diff = {"lin0.lora_B.other"};
  spec::S6SavedAdaptersChecker().observe(in.ctx, in.op(2), o, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "S6 step 2 rank 0: load_adapters raised shape_error: size mismatch");
  EXPECT_EQ(out[1].text, "S6 step 2 rank 0: reloaded values differ from the saved ones: {lin0.lora_B.other}");
}

// A saved adapter must be saved whole: one of its tensors left out (PEFT drops the layers under
// checkpoint_wrapper, beyond-seeds B7) is a finding even though the adapter is in the file.
TEST(S6SavedAdaptersChecker, AnAdapterSavedWithoutOneOfItsTensorsIsAFinding) {
  CheckerInputs in(seed000_header(1, "patched") + "save_adapters\n");
  std::vector<Finding> out;
  Observation o = in.obs(1);
  ASSERT_GT(o.saved.size(), 1u);
  const std::string dropped = o.saved[0].name;
  o.saved.erase(o.saved.begin());
  spec::S6SavedAdaptersChecker().observe(in.ctx, in.op(1), o, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "S6 step 1 rank 0: " + dropped + " was not saved");
}
