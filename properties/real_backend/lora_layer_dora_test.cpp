// DoRA on the real LoraLayer (peft/tuners/lora/dora.py, variants.py::DoraLinearVariant) driven
// directly: the magnitude's place and initial values, the forward's rescaling and the magnitude's
// gradient, merge/unmerge on U (rescaled, undone) and on the shard (lost), the cached norm's refusal.
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"
#include "real_backend/op_raised.hpp"
#include "real_backend/values.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

// lin0 (6 -> 4) with a DoRA adapter d and a plain adapter p, one group with the root, world 1.
std::string dora_linear() {
  return "world 1\nprofile upstream\nlayer lin0 6 4\nadapter d r=2 alpha=4 targets=lin0 init=random use_dora\n"
         "adapter p r=2 alpha=2 targets=lin0 init=random\nfully_shard root\n---\n";
}

at::Tensor value(const RealModule& m, const std::string& name) { return m.params.registered(m.param(name)).detach().clone(); }

at::Tensor row_norms(const at::Tensor& w) { return at::linalg_vector_norm(w, 2, {1}); }

}  // namespace

TEST(LoraLayerDora, MagnitudeIsRegisteredAfterAAndBAndStartsAsTheRowNormsOfWPlusDelta) {
  RealModule m(dora_linear());
  m.load(false);
  const real::LayerSpec& ls = m.layout.layers[0];
  const int mag = m.param("lin0.lora_magnitude_vector.d");
  ASSERT_GE(mag, 0);
  EXPECT_EQ(ls.lora_m[0], mag);
  EXPECT_EQ(ls.lora_m[1], -1);  // p is plain LoRA
  EXPECT_GT(mag, ls.lora_b[1]);  // after every adapter's lora_A and lora_B
  const std::vector<int>& members = m.layout.groups[ls.group].params;
  EXPECT_EQ(members.back(), mag);  // the group packs it last
  EXPECT_EQ(m.layout.state_dict_order.back(), mag);
  const at::Tensor mv = value(m, "lin0.lora_magnitude_vector.d");
  ASSERT_EQ(mv.sizes(), (std::vector<int64_t>{4}));
  const at::Tensor delta = at::matmul(value(m, "lin0.lora_B.d"), value(m, "lin0.lora_A.d")) * real::lora_scaling(m.layout, 0);
  EXPECT_TRUE(at::allclose(mv, row_norms(value(m, "lin0.weight") + delta), 1e-5, 1e-6));
  EXPECT_TRUE(m.params.registered(mag).requires_grad());  // active adapter d: trainable
  m.peft.layer(0).set_adapter(AdapterSet::of(1), false);  // set_adapter moves the magnitude with A and B
  EXPECT_FALSE(m.params.registered(mag).requires_grad());
}

// dora.py::DoraLinearLayer.forward: with the magnitude equal to the norms the output is the LoRA
// output; doubled, it is twice W x + delta x (the bias kept out); the magnitude gets a gradient.
TEST(LoraLayerDora, ForwardScalesBaseAndDeltaByMagnitudeOverNorm) {
  RealModule m(dora_linear());
  m.load(false);
  real::LoraLayer& layer = m.peft.layer(0);
  const at::Tensor x = at::rand({3, 6});
  const at::Tensor w = value(m, "lin0.weight"), bias = value(m, "lin0.bias");
  const at::Tensor delta = at::matmul(value(m, "lin0.lora_B.d"), value(m, "lin0.lora_A.d")) * real::lora_scaling(m.layout, 0);
  const at::Tensor lora = at::linear(x, w + delta, bias);
  EXPECT_TRUE(at::allclose(layer.forward(x).detach(), lora, 1e-5, 1e-5));
  const int mag = m.param("lin0.lora_magnitude_vector.d");
  m.params.registered(mag).variable_data().mul_(2);
  const at::Tensor y = layer.forward(x);
  EXPECT_TRUE(at::allclose(y.detach(), 2 * (lora - bias) + bias, 1e-5, 1e-5));
  y.sum().backward();
  ASSERT_TRUE(m.params.registered(mag).grad().defined());
  EXPECT_GT(m.params.registered(mag).grad().abs().sum().item<float>(), 0.0f);
}

// variants.py::DoraLinearVariant.merge_unsafe on a plain weight: W = (m / ||W + delta||) (W + delta);
// exact before the magnitude moves, rescaled after; unmerge divides it back out.
TEST(LoraLayerDora, MergeOnAPlainWeightRescalesAndUnmergeUndoesIt) {
  RealModule m(dora_linear());
  m.load(false);
  real::LoraLayer& layer = m.peft.layer(0);
  const int wp = m.layout.layers[0].weight, mag = m.param("lin0.lora_magnitude_vector.d");
  const at::Tensor w0 = value(m, "lin0.weight");
  const at::Tensor delta = at::matmul(value(m, "lin0.lora_B.d"), value(m, "lin0.lora_A.d")) * real::lora_scaling(m.layout, 0);
  layer.merge(0);
  EXPECT_TRUE(at::allclose(m.params.registered(wp).detach(), w0 + delta, 1e-5, 1e-6));
  ASSERT_NE(layer.dora_norm(0), nullptr);
  EXPECT_FALSE(layer.dora_norm(0)->on_shard);
  layer.unmerge();
  EXPECT_EQ(layer.dora_norm(0), nullptr);  // popped
  EXPECT_TRUE(at::allclose(m.params.registered(wp).detach(), w0, 1e-5, 1e-6));
  m.params.registered(mag).variable_data().mul_(1.5);  // a step moved the magnitude
  layer.merge(0);
  EXPECT_TRUE(at::allclose(m.params.registered(wp).detach(), 1.5 * (w0 + delta), 1e-5, 1e-6));
  layer.unmerge();
  EXPECT_TRUE(at::allclose(m.params.registered(wp).detach(), w0, 1e-5, 1e-6));
}

// layer.py::Linear._unmerged_base_weight: with p merged first, d's norm is taken off W without p's
// delta, and p stays merged (unmerged and merged again).
TEST(LoraLayerDora, MergeBesideAMergedAdapterTakesTheNormOffTheUnmergedWeight) {
  RealModule m(dora_linear());
  m.load(false);
  real::LoraLayer& layer = m.peft.layer(0);
  const int wp = m.layout.layers[0].weight;
  const at::Tensor w0 = value(m, "lin0.weight");
  const at::Tensor dd = at::matmul(value(m, "lin0.lora_B.d"), value(m, "lin0.lora_A.d")) * real::lora_scaling(m.layout, 0);
  const at::Tensor dp = at::matmul(value(m, "lin0.lora_B.p"), value(m, "lin0.lora_A.p")) * real::lora_scaling(m.layout, 1);
  layer.merge(1);
  layer.merge(0);
  EXPECT_EQ(layer.merged, (std::vector<int>{1, 0}));
  EXPECT_TRUE(at::allclose(layer.dora_norm(0)->norm, row_norms(w0 + dd), 1e-5, 1e-6));
  const at::Tensor scale = (value(m, "lin0.lora_magnitude_vector.d") / row_norms(w0 + dd)).view({-1, 1});
  EXPECT_TRUE(at::allclose(m.params.registered(wp).detach(), scale * (w0 + dp + dd), 1e-5, 1e-6));
}

// On the sharded DTensor weight `orig_weight.data = new_weight` is lost: the shard keeps its values.
// The norm cached there meets U at the unmerge: DTensor's mixed-tensor error, the adapter popped.
TEST(LoraLayerDora, MergeOnTheShardIsLostAndItsNormRefusesAnUnmergeOnU) {
  RealModule m(dora_linear());
  m.load();
  real::LoraLayer& layer = m.peft.layer(0);
  const int wp = m.layout.layers[0].weight;
  ASSERT_TRUE(layer.weight_on_shard());
  const at::Tensor s0 = m.params.registered(wp).detach().clone();
  layer.merge(0);
  EXPECT_EQ(layer.merged, std::vector<int>{0});
  EXPECT_TRUE(at::equal(m.params.registered(wp).detach(), s0));
  ASSERT_NE(layer.dora_norm(0), nullptr);
  EXPECT_TRUE(layer.dora_norm(0)->on_shard);
  m.fsdp.groups[m.layout.layers[0].group].unshard();
  try {
    layer.unmerge();
    FAIL() << "no raise";
  } catch (const real::OpError& e) {
    EXPECT_EQ(e.status, Status::Exception);
    EXPECT_NE(e.message.find("aten.div.Tensor got mixed torch.Tensor and DTensor"), std::string::npos) << e.message;
  }
  EXPECT_TRUE(layer.merged.empty());
}

// layer.py::Linear._unmerged_base_weight's `finally`: a DoRA merge beside a DoRA adapter merged on
// the shard unmerges it on U (its norm cached off the shard: DTensor's mixed-tensor error), merges it
// again on U, then the error goes on; the new adapter is not listed.
TEST(LoraLayerDora, AMergeWhoseReplayRaisesMergesTheOthersAgainFirst) {
  RealModule m("world 1\nprofile upstream\nlayer lin0 6 4\nadapter d r=2 alpha=4 targets=lin0 init=random use_dora\n"
               "adapter e r=2 alpha=2 targets=lin0 init=random use_dora\nfully_shard root\n---\n");
  m.load();
  real::LoraLayer& layer = m.peft.layer(0);
  const int wp = m.layout.layers[0].weight;
  layer.merge(0);  // on the shard: lost, its norm cached there
  m.fsdp.groups[m.layout.layers[0].group].unshard();
  const at::Tensor w0 = m.params.registered(wp).detach().clone();
  try {
    layer.merge(1);
    FAIL() << "no raise";
  } catch (const real::OpError& e) {
    EXPECT_NE(e.message.find("aten.div.Tensor got mixed torch.Tensor and DTensor"), std::string::npos) << e.message;
  }
  EXPECT_EQ(layer.merged, std::vector<int>{0});
  const at::Tensor delta = at::matmul(value(m, "lin0.lora_B.d"), value(m, "lin0.lora_A.d")) * real::lora_scaling(m.layout, 0);
  EXPECT_TRUE(at::allclose(m.params.registered(wp).detach(), w0 + delta, 1e-5, 1e-6));  // the magnitude is the init norm
  EXPECT_FALSE(layer.dora_norm(0)->on_shard);
}
