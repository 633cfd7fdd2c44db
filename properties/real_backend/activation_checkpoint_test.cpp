// CheckpointWrapper (real_backend/activation_checkpoint.hpp) driven directly: what a
// checkpointed linear saves, and the recompute's error when it saves less.
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(CheckpointWrapper, ARecomputeThatSavesLessRaisesCheckpointsCountError) {
  RealModule m(one_linear("checkpoint lin0\n"));
  m.load(false);
  const int w = m.layout.layers[0].weight, b = m.layout.layers[0].bias;
  m.params.set_requires_grad(w, true);
  m.ckpt.begin_forward();
  const at::Tensor x = at::ones({3, 4}).requires_grad_(true);
  m.ckpt.start_saving(0);
  at::Tensor y = m.ckpt.linear(x, at::kFloat, w, b);
  m.ckpt.stop_saving();
  m.ckpt.forward(0, x, y);
  bool recomputed = false;
  m.ckpt.register_hooks([&](int layer, const at::Tensor& in) {
    recomputed = true;
    m.params.set_requires_grad(w, false);  // the recompute sees a frozen weight: it saves less
    return m.ckpt.linear(in, at::kFloat, w, b);
  });
  m.ckpt.begin_backward();
  try {
    y.sum().backward();
    FAIL() << "no raise";
  } catch (const real::OpError& e) {
    EXPECT_EQ(e.message,
              "CheckpointError: torch.utils.checkpoint: A different number of tensors was saved during the original forward and recomputation.");
  }
  EXPECT_TRUE(recomputed);
  EXPECT_EQ(m.ckpt.raised(), 0);
}
