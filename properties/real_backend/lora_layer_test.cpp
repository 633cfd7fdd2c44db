// LoraLayer (real_backend/lora_layer.hpp) driven directly: merge adds B @ A * scaling to the
// registered weight and unmerge takes it back; set_adapter flips requires_grad on the registered leaves.
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"
#include "real_backend/values.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(LoraLayer, MergeAddsTheScaledDeltaAndUnmergeTakesItBack) {
  RealModule m(one_linear());
  m.load();
  real::LoraLayer& layer = m.peft.layer(0);
  const int w = m.layout.layers[0].weight, a = m.param("lin0.lora_A.a"), b = m.param("lin0.lora_B.a");
  const at::Tensor w0 = m.params.registered(w).detach().clone();
  const at::Tensor delta = at::matmul(m.params.registered(b).detach(), m.params.registered(a).detach()) * real::lora_scaling(m.layout, 0);
  ASSERT_GT(delta.abs().sum().item<float>(), 0.0f);
  layer.merge(0);
  EXPECT_EQ(layer.merged, std::vector<int>{0});
  EXPECT_TRUE(at::allclose(m.params.registered(w).detach(), w0 + delta));
  layer.merge(0);  // merged already: nothing more
  EXPECT_TRUE(at::allclose(m.params.registered(w).detach(), w0 + delta));
  layer.unmerge();
  EXPECT_TRUE(layer.merged.empty());
  EXPECT_TRUE(at::allclose(m.params.registered(w).detach(), w0, 1e-5, 1e-6));
}

TEST(LoraLayer, SetAdapterTrainsTheNamedAdaptersOnly) {
  RealModule m(one_linear());
  m.load();
  real::LoraLayer& layer = m.peft.layer(0);
  const int aa = m.param("lin0.lora_A.a"), ba = m.param("lin0.lora_A.b");
  EXPECT_TRUE(m.params.registered(aa).requires_grad());
  EXPECT_FALSE(m.params.registered(ba).requires_grad());
  layer.set_adapter(AdapterSet::of(1), false);
  EXPECT_FALSE(m.params.registered(aa).requires_grad());
  EXPECT_TRUE(m.params.registered(ba).requires_grad());
  layer.set_adapter(AdapterSet::of(1), true);  // inference_mode: frozen
  EXPECT_FALSE(m.params.registered(ba).requires_grad());
}
