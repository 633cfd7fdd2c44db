// FsdpParam driven alone (model/machine/fsdp_param.hpp): one name's S and U, its ghost after a
// re-add over a managed name, and what the optimizer and an all-gather read of it.
#include <gtest/gtest.h>

#include "model/machine/fsdp_param.hpp"

namespace fsdpsim {
namespace {

// _fsdp_param.py::FSDPParam.to_unsharded: U takes S's values and requires_grad; U goes stale
// once S moves past the gather.
TEST(FsdpParamAlone, UnshardCopiesSIntoUAndUGoesStaleWhenSMoves) {
  FsdpParam ps;
  ps.rg_s = true;
  ps.grad_s = true;
  ps.ver_s = 3;
  ps.to_unsharded();
  EXPECT_TRUE(ps.registered_rg(true));
  EXPECT_EQ(ps.registered_version(true), 3u);
  EXPECT_FALSE(ps.u_stale());
  ps.set_registered_rg(true, false);  // a flip while unsharded lands on U only
  EXPECT_TRUE(ps.rg_s);
  ps.optimizer_update();
  EXPECT_EQ(ps.ver_s, 4u);
  EXPECT_TRUE(ps.u_stale());
}

// A re-add over a managed name (LoraLayer.update_layer after fully_shard): the group keeps the
// deleted module's FSDPParam (the ghost) and packs its shard; the optimizer still steps the
// ghost, never the new object, which is frozen, without a grad, at the loaded version.
TEST(FsdpParamAlone, AReAddKeepsTheGhostForTheGroupAndTheOptimizer) {
  FsdpParam ps;
  ps.rg_s = true;
  ps.grad_s = true;
  ps.ver_s = 5;
  ps.dtype = DType::BF16;
  ps.keep_ghost();
  ps.recreate(7u);  // a load_adapter of a fresh name: another version
  ps.dtype = DType::F32;
  EXPECT_TRUE(ps.detached);
  EXPECT_TRUE(ps.recreated);
  EXPECT_FALSE(ps.rg_s);
  EXPECT_FALSE(ps.grad_s);
  EXPECT_EQ(ps.packed_version(), 5u);
  EXPECT_EQ(ps.packed_dtype(), DType::BF16);
  EXPECT_TRUE(ps.managed_rg());
  EXPECT_TRUE(ps.optimizer_grad());
  ps.optimizer_update();
  EXPECT_EQ(ps.ghost_ver, 6u);
  EXPECT_EQ(ps.ver_s, 7u);
}

}  // namespace
}  // namespace fsdpsim
