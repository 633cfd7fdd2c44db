// IntentTracker (model/spec/intent_tracker.cpp): what each rank asked to
// train follows the ops that succeeded, never the flags the model reports.
#include "model/spec/intent_tracker.hpp"

#include <gtest/gtest.h>

#include "properties/spec/checker_inputs.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(IntentTracker, SetAdapterAndDisableFollowTheOpsThatSucceeded) {
  CheckerInputs in(seed000_header(2, "patched") + "set_adapter other\ndisable_enter\ndisable_exit\n@1 set_adapter other\n");
  spec::IntentTracker it(in.ctx);
  EXPECT_EQ(it.intended(0), 1u);
  it.observe(in.ctx, in.op(1), in.obs(1, 0));
  EXPECT_EQ(it.intended(0), 2u);
  EXPECT_EQ(it.intended(1), 1u);  // rank 1 has not run it yet
  it.observe(in.ctx, in.op(2), in.obs(2, 0));
  EXPECT_EQ(it.intended(0), 0u);
  EXPECT_EQ(it.key_bits(0), 2u << 8);  // before_disable
  it.observe(in.ctx, in.op(3), in.obs(3, 0));
  EXPECT_EQ(it.intended(0), 2u);
  Observation failed = in.obs(4, 1);
  failed.status = Status::ValueError;
  it.observe(in.ctx, in.op(4), failed);
  EXPECT_EQ(it.intended(1), 1u);
}

TEST(IntentTracker, AnAdapterLoadedFrozenStaysFrozenAfterDisable) {
  CheckerInputs in(
      "world 1\nlayer l 4 2\nadapter a r=2 alpha=2 targets=l\nadapter b r=2 alpha=2 targets=l deferred\n"
      "adapter c r=2 alpha=2 targets=l inference_mode\nfully_shard root\n---\n"
      "load_adapter b frozen\nset_adapter [a,b,c]\ndisable_enter\ndisable_exit\n");
  spec::IntentTracker it(in.ctx);
  EXPECT_EQ(it.key_bits(0), 1u | 4u << 16);  // a intended; c in inference mode from its declaration
  for (int step = 1; step <= 4; ++step) it.observe(in.ctx, in.op(step), in.obs(step));
  EXPECT_EQ(it.intended(0), 1u);  // b and c stay frozen
  EXPECT_EQ(it.key_bits(0), 1u | 7u << 8 | 6u << 16);
}

TEST(IntentTracker, DeletingTheIntendedAdapterFallsBackToTheActiveOnes) {
  CheckerInputs in(seed000_header(1, "patched") + "delete_adapter default\n");
  spec::IntentTracker it(in.ctx);
  Observation o = in.obs(1);
  o.active = {"other"};
  it.observe(in.ctx, in.op(1), o);
  EXPECT_EQ(it.intended(0), 2u);
}
