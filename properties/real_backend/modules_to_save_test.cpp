// modules_to_save on the real backend (real_backend/modules_to_save.cpp): the copies are
// real leaves in the wrapper's FSDP group, the forward runs the active one (so only its
// gradient is reduce-scattered), disabling runs the frozen original_module, and a
// set_adapter on the unsharded copies is lost at the next reshard, as seed 000's LoRA flips are
// (peft/utils/other.py::ModulesToSaveWrapper.set_adapter / enable_adapters / forward).
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"
#include "properties/test_util.hpp"
#include "real_backend/op_raised.hpp"
#include "real_backend/launcher.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

const std::chrono::milliseconds kTimeout(5000);

// Two adapters, both saving lin1 (its own FSDP group), LoRA on lin0 in the root's group.
std::string scenario(const std::string& raf, const std::string& ops) {
  return "world 2\nseed 3\nprofile upstream\nlayer lin0 6 8\nlayer lin1 8 3\n"
         "adapter a r=2 alpha=2 targets=lin0 modules_to_save=lin1\n"
         "adapter b r=2 alpha=2 targets=lin0 modules_to_save=lin1\n"
         "fully_shard lin1 reshard_after_forward=" + raf + "\nfully_shard root reshard_after_forward=" + raf + "\n---\n" + ops;
}

real::RealResult run(const std::string& text) {
  real::RealResult r = real::run_real(parse_seq(text, "<test>"), real::RankMode::Threads, kTimeout);
  EXPECT_FALSE(r.infra_failure) << r.infra_message;
  return r;
}

// The parameters one op's reduce-scatter on `group` carried (the ones that got a gradient).
std::string reduced(const Observation& o, const std::string& group) {
  std::string s;
  for (const auto& c : o.collectives)
    if (c.op == CollOp::ReduceScatter && c.group == group)
      for (const auto& p : c.parts) s += (s.empty() ? "" : ",") + p.param;
  return s;
}

const ParamObs* param(const Observation& o, const std::string& name) {
  for (const auto& p : o.params)
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace

TEST(RealModulesToSave, TheActiveCopyTrainsAndDisablingRunsTheFrozenOriginal) {
  real::RealResult r = run(scenario("true", "train_step\nset_adapter b\ntrain_step\ndisable_enter\ntrain_step\n"));
  ASSERT_EQ(r.observations.size(), 10u);
  for (int rank = 0; rank < 2; ++rank) {
    const Observation& s1 = obs_at(r.observations, 1, rank);
    EXPECT_EQ(s1.grads, std::vector<std::string>{"a"});
    EXPECT_EQ(reduced(s1, "lin1"), "lin1.modules_to_save.a.weight,lin1.modules_to_save.a.bias");
    ASSERT_NE(param(s1, "lin1.modules_to_save.a.weight"), nullptr);
    EXPECT_EQ(param(s1, "lin1.modules_to_save.a.weight")->group, "lin1");
    EXPECT_EQ(param(s1, "lin1.original_module.weight"), nullptr);  // a base parameter, not listed
    // set_adapter b on the shards: b's copy trainable, a's frozen, and b's copy is what trains.
    const Observation& s2 = obs_at(r.observations, 2, rank);
    EXPECT_TRUE(param(s2, "lin1.modules_to_save.b.bias")->rg_s);
    EXPECT_FALSE(param(s2, "lin1.modules_to_save.a.bias")->rg_s);
    EXPECT_EQ(reduced(obs_at(r.observations, 3, rank), "lin1"), "lin1.modules_to_save.b.weight,lin1.modules_to_save.b.bias");
    // Disabled: LoRA off and original_module (frozen) runs: nothing requires grad.
    EXPECT_FALSE(param(obs_at(r.observations, 4, rank), "lin1.modules_to_save.b.weight")->rg_s);
    EXPECT_EQ(obs_at(r.observations, 5, rank).status, Status::NoGradFn);
  }
}

TEST(RealModulesToSave, SetAdapterOnTheUnshardedCopiesIsLostAtReshard) {
  real::RealResult r = run(scenario("false", "eval\nset_adapter b\ntrain_step\ntrain_step\n"));
  ASSERT_EQ(r.observations.size(), 8u);
  for (int rank = 0; rank < 2; ++rank) {
    const Observation& s2 = obs_at(r.observations, 2, rank);
    const ParamObs* b = param(s2, "lin1.modules_to_save.b.weight");
    ASSERT_NE(b, nullptr);
    EXPECT_FALSE(b->rg_s);   // the shard keeps its flag
    EXPECT_EQ(b->rg_u, 1);   // the flip landed on the registered unsharded copy
    const Observation& s3 = obs_at(r.observations, 3, rank);
    EXPECT_EQ(s3.grads, std::vector<std::string>{"b"});
    EXPECT_EQ(reduced(s3, "lin1"), "lin1.modules_to_save.b.weight,lin1.modules_to_save.b.bias");
    EXPECT_FALSE(param(s3, "lin1.modules_to_save.b.weight")->rg_s);  // the backward's reshard dropped it
    EXPECT_TRUE(param(s3, "lin1.modules_to_save.a.weight")->rg_s);
    EXPECT_EQ(obs_at(r.observations, 4, rank).status, Status::NoGradFn);
  }
}

// The wrapper driven without a rank (properties/real_backend/module_fixture.hpp: one world-1
// rank's classes, no launcher), before prepare: the first add deep-copies the original (a's copy
// trainable and running), a second adds b's frozen copy; forward runs the active copy and the
// original once disabled; a list naming both copies is refused; deleting a's copy with b left
// active runs b's.
TEST(ModulesToSaveWrapperAlone, AddForwardSwitchRefuseAndDelete) {
  RealModule m("world 1\nprofile upstream\nlayer lin0 6 8\nlayer lin1 8 3\n"
               "adapter a r=2 alpha=2 targets=lin0 modules_to_save=lin1\nadapter b r=2 alpha=2 targets=lin0 modules_to_save=lin1\n"
               "fully_shard lin1\nfully_shard root\n---\n");
  m.accelerator.place_base_params();
  const int l = 1, w = m.layout.layers[l].weight, bias = m.layout.layers[l].bias;
  const int aw = m.param("lin1.modules_to_save.a.weight"), bw = m.param("lin1.modules_to_save.b.weight");
  real::LoraLayer& module = m.peft.layer(l);
  real::ModulesToSaveWrapper wrapper(m.layout, l, m.params, m.fsdp, m.ckpt, module);
  wrapper.add(0, false, true);
  wrapper.add(1, false, false);
  EXPECT_TRUE(wrapper.wrapped);
  EXPECT_EQ(wrapper.copy_active, 0);
  EXPECT_TRUE(m.params.registered(aw).requires_grad());
  EXPECT_FALSE(m.params.registered(bw).requires_grad());
  EXPECT_TRUE(at::equal(m.params.registered(bw), m.params.registered(w)));  // a deep copy of the original

  const at::Tensor h = at::sin(at::arange(16, at::kFloat) * 0.7).view({2, 8});
  {
    at::NoGradGuard ng;
    m.params.registered(aw).add_(1.0);  // a's copy now differs from the original
  }
  const at::Tensor original = at::linear(h, m.params.registered(w), m.params.registered(bias)).detach();
  const at::Tensor y = wrapper.forward(h);
  EXPECT_TRUE(y.requires_grad());  // a's trainable copy ran
  EXPECT_TRUE(at::allclose(y.detach(), at::linear(h, m.params.registered(aw), m.params.registered(bias)).detach()));
  EXPECT_FALSE(at::allclose(y.detach(), original));
  wrapper.enable_adapters(false);
  EXPECT_TRUE(module.disabled);
  EXPECT_FALSE(m.params.registered(aw).requires_grad());
  EXPECT_TRUE(at::allclose(wrapper.forward(h).detach(), original));
  wrapper.enable_adapters(true);
  EXPECT_TRUE(m.params.registered(aw).requires_grad());

  try {
    wrapper.set_adapter_named(AdapterSet::of(0) | AdapterSet::of(1), true, false);
    ADD_FAILURE() << "two copies at once were not refused";
  } catch (const real::OpError& e) {
    EXPECT_EQ(e.status, Status::ValueError);
    EXPECT_STREQ(e.what(), "Only one adapter can be set at a time for ModulesToSaveWrapper(");
  }
  wrapper.delete_adapter(0, AdapterSet::of(1));
  EXPECT_FALSE(wrapper.copy_registered(0));
  EXPECT_EQ(wrapper.copy_active, 1);
  EXPECT_TRUE(m.params.registered(bw).requires_grad());
  EXPECT_TRUE(at::allclose(wrapper.forward(h).detach(), original));  // b's copy: the original's values
}
