// FsdpParam (real_backend/fsdp_param.hpp) on its own: the object FSDP2 registers under a
// name at unshard and reshard, and what a re-add leaves the group.
#include <gtest/gtest.h>

#include "real_backend/fsdp_param.hpp"

using namespace fsdpsim::real;

namespace {

FsdpParam trainable_shard() {
  FsdpParam fp;
  fp.leaf.s = at::zeros({2, 2}).requires_grad_(true);
  fp.leaf.place = fp.leaf.s.detach().clone();
  fp.registered = fp.leaf.s;
  return fp;
}

}  // namespace

TEST(FsdpParam, ToUnshardedRegistersUWithTheShardsFlagAndToShardedPutsSBack) {
  FsdpParam fp = trainable_shard();
  fp.to_unsharded(at::arange(4, at::kFloat), {2, 2});
  ASSERT_TRUE(fp.holds_unsharded());
  EXPECT_TRUE(fp.leaf.u.requires_grad());
  EXPECT_TRUE(at::equal(fp.registered.detach(), at::arange(4, at::kFloat).view({2, 2})));
  fp.leaf.s.requires_grad_(false);  // a flip on S reaches U at the next unshard only
  EXPECT_TRUE(fp.leaf.u.requires_grad());
  fp.to_sharded();
  EXPECT_TRUE(fp.registered.is_same(fp.leaf.s));
  fp.to_unsharded(at::zeros({4}), {2, 2});
  EXPECT_FALSE(fp.registered.requires_grad());
}

TEST(FsdpParam, ARedAddedNameKeepsItsNewLeafWhileTheGroupFillsTheGhost) {
  FsdpParam fp = trainable_shard();
  fp.keep_ghost();
  ASSERT_TRUE(fp.detached);
  fp.leaf.s = at::ones({2, 2});
  fp.registered = fp.leaf.s;
  fp.to_unsharded(at::full({4}, 3.0), {2, 2});
  EXPECT_TRUE(fp.registered.is_same(fp.leaf.s));  // the new module is no group's
  ASSERT_TRUE(fp.ghost.u.defined());
  EXPECT_EQ(fp.ghost.u.sum().item<float>(), 12.0f);
  fp.to_sharded();
  EXPECT_TRUE(fp.registered.is_same(fp.leaf.s));
}
