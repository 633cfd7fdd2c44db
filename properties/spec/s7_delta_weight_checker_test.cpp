// S7DeltaWeightChecker (model/spec/s7_delta_weight_checker.cpp) fed
// observations directly: get_delta_weight raising on a shard, or giving
// another delta than the full A and B's, is a finding.
#include "model/spec/s7_delta_weight_checker.hpp"

#include <gtest/gtest.h>

#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(S7DeltaWeightChecker, AShapeErrorOrACorruptDeltaIsAFinding) {
  CheckerInputs in(seed000_header(1, "patched") + "delta_weight lin0\nmerge\nload_adapters\n");
  std::vector<Finding> out;
  Observation o = in.obs(1);
  spec::S7DeltaWeightChecker().observe(in.ctx, in.op(1), o, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  o.deltas = {{"default", WeightClass::Unjudged}};  // no opinion: no finding
  spec::S7DeltaWeightChecker().observe(in.ctx, in.op(1), o, out);
  EXPECT_TRUE(out.empty());
  o.deltas = {{"default", WeightClass::Exact}, {"other", WeightClass::Corrupt}, {"third", WeightClass::Corrupt}};
  spec::S7DeltaWeightChecker().observe(in.ctx, in.op(1), o, out);
  ASSERT_EQ(out.size(), 1u);  // the first wrong delta only
  EXPECT_EQ(out[0].spec, "S7");
  EXPECT_EQ(out[0].text, "S7 step 1 rank 0: delta of other is corrupt (not the delta of the full A and B)");
  Observation m = in.obs(2);
  m.status = Status::ShapeError;
  m.message = "mat1 and mat2 shapes cannot be multiplied";
  spec::S7DeltaWeightChecker().observe(in.ctx, in.op(2), m, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].text, "S7 step 2 rank 0: get_delta_weight raised: mat1 and mat2 shapes cannot be multiplied");
  m.step = 3;  // a load's shape error is S6's
  spec::S7DeltaWeightChecker().observe(in.ctx, in.op(3), m, out);
  EXPECT_EQ(out.size(), 2u);
}
