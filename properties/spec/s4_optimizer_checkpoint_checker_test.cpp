// S4OptimizerCheckpointChecker (model/spec/s4_optimizer_checkpoint_checker.cpp)
// fed observations directly: a KeyError from saving or loading the optimizer
// is a finding naming the first unregistered parameter.
#include "model/spec/s4_optimizer_checkpoint_checker.hpp"

#include <gtest/gtest.h>

#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(S4OptimizerCheckpointChecker, KeyErrorOnSaveOrLoadNamesTheFirstUnregisteredParameter) {
  CheckerInputs in(seed000_header(1, "patched") + "save_optimizer\nload_optimizer\ntrain_step\n");
  std::vector<Finding> out;
  Observation o = in.obs(1);
  spec::S4OptimizerCheckpointChecker().observe(in.ctx, in.op(1), o, out);
  EXPECT_TRUE(out.empty()) << out[0].text;
  o.status = Status::KeyError;
  o.message = "KeyError: 2";
  o.opt_missing = 1;
  o.opt_total = 4;
  o.opt_unregistered = {"lin1.lora_B.default"};
  spec::S4OptimizerCheckpointChecker().observe(in.ctx, in.op(1), o, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].spec, "S4");
  EXPECT_EQ(out[0].text,
            "S4 step 1 rank 0: save_optimizer raised KeyError: 2 (1/4 optimizer parameters not registered; first: "
            "lin1.lora_B.default: S.requires_grad=true, U.requires_grad=none, group root SHARDED)");
  o.step = 2;
  o.opt_unregistered.clear();
  spec::S4OptimizerCheckpointChecker().observe(in.ctx, in.op(2), o, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].text,
            "S4 step 2 rank 0: load_optimizer raised KeyError: 2 (1/4 optimizer parameters not registered; first: ?)");
  spec::S4OptimizerCheckpointChecker().observe(in.ctx, in.op(3), o, out);  // not an optimizer checkpoint
  EXPECT_EQ(out.size(), 2u);
}
