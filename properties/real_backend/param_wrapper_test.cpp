// ParamWrapper (experts) layers on the real backend (real_backend/param_wrapper.cpp):
// the layout, the einsum delta against an independent computation, libtorch's
// own errors on a sharded read (seed 002, peft#3080), the gathered delta when
// patched, and training through the layer.
#include <gtest/gtest.h>

#include "properties/real_backend/module_fixture.hpp"
#include "properties/test_util.hpp"
#include "real_backend/layout.hpp"
#include "real_backend/param_wrapper.hpp"
#include "real_backend/values.hpp"
#include "sim/core/crosscheck.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

namespace {

const std::chrono::milliseconds kTimeout(5000);

// world 2, one (2, 8, 4) experts parameter, adapters a (r=3) and b (r=4).
std::string moe_header(const std::string& profile, int experts = 2, int world = 2) {
  return "world " + std::to_string(world) + "\nprofile " + profile + "\nlayer moe 8 4 experts=" + std::to_string(experts) +
         "\nadapter a r=3 alpha=3 targets=moe init=random\nadapter b r=4 alpha=8 targets=moe init=random\n"
         "fully_shard root\n---\n";
}

// Runs on thread ranks; the model (simulator) must observe the same.
real::RealResult run_both(const std::string& text) {
  SeqFile f = parse_seq(text, "<test>");
  real::RealResult r = real::run_real(f, real::RankMode::Threads, kTimeout);
  EXPECT_FALSE(r.infra_failure) << r.infra_message;
  RunResult model = run_checked(f);
  std::vector<std::string> diffs = compare_observations(model.observations, r.observations);
  EXPECT_TRUE(diffs.empty()) << diffs.front();
  return r;
}

// Deterministic values of the given shape.
at::Tensor seeded(const std::vector<int64_t>& shape, double salt) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return at::sin(at::arange(n, at::kFloat) * 0.7 + salt).view(shape);
}

}  // namespace

TEST(Experts, LayoutHasTheWrappedParameterAndLoraShapes) {
  SeqFile f = parse_seq(moe_header("upstream"), "<test>");
  real::Layout l = real::make_layout(f);
  ASSERT_EQ(l.layers.size(), 1u);
  const real::LayerSpec& ls = l.layers[0];
  EXPECT_EQ(ls.experts, 2);
  EXPECT_EQ(ls.bias, -1);
  std::vector<std::string> names;
  for (const auto& p : l.params) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"moe.weight", "moe.lora_A.a", "moe.lora_A.b", "moe.lora_B.a", "moe.lora_B.b"}));
  const real::ParamSpec& w = l.params[ls.weight];
  EXPECT_EQ(real::param_shape(l, w, w.rows), (std::vector<int64_t>{2, 8, 4}));
  EXPECT_EQ(w.chunk_rows, 1);  // FSDP2 shards the experts dimension
  const real::ParamSpec& a = l.params[ls.lora_a[0]];
  const real::ParamSpec& b = l.params[ls.lora_b[1]];
  EXPECT_EQ(real::param_shape(l, a, a.rows), (std::vector<int64_t>{6, 8}));  // (r*E, in)
  EXPECT_EQ(real::param_shape(l, b, b.rows), (std::vector<int64_t>{4, 8}));  // (out, r*E)
}

TEST(Experts, EinsumDeltaEqualsThePerExpertComputation) {
  for (int64_t experts : {1, 2, 3}) {
    const int64_t r = 2, in = 5, out = 4;
    at::Tensor a = seeded({r * experts, in}, 1), b = seeded({out, r * experts}, 2);
    at::Tensor d = real::experts_einsum(a, b, experts);
    ASSERT_EQ(d.sizes(), (std::vector<int64_t>{experts, in, out}));
    EXPECT_TRUE(at::allclose(d, real::experts_delta_per_expert(a, b, experts)));
    // And element by element, from the reshapes' definition.
    auto A = a.accessor<float, 2>();
    auto B = b.accessor<float, 2>();
    auto D = d.accessor<float, 3>();
    for (int64_t e = 0; e < experts; ++e)
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o) {
          float s = 0;
          for (int64_t k = 0; k < r; ++k) s += B[o][k * experts + e] * A[e * r + k][i];
          EXPECT_NEAR(D[e][i][o], s, 1e-5);
        }
  }
}

TEST(Experts, LibtorchBroadcastsASizeOneRankDimension) {
  // r=2, E=2 at world 2: rank 0 holds 2 rows of A, one per expert, and einsum
  // broadcasts that size-1 subscript instead of raising.
  at::Tensor d = real::experts_einsum(seeded({2, 8}, 1), seeded({2, 4}, 2), 2);
  EXPECT_EQ(d.sizes(), (std::vector<int64_t>{2, 8, 2}));
}

// Seed 002 under FSDP2 (torch 2.13): the delta redistributes A and is exact; a
// merge all-gathers once more under W's name; unmerge takes it back exactly.
TEST(Experts, UpstreamShardedDeltaGathersAAndMergesExactly) {
  real::RealResult r = run_both(moe_header("upstream") + "delta_weight moe\nset_adapter b\nmerge\nunmerge\n");
  for (int rank = 0; rank < 2; ++rank) {
    const Observation& d = obs_at(r.observations, 1, rank);
    ASSERT_EQ(d.status, Status::Ok) << d.message;
    EXPECT_EQ(d.deltas, (std::vector<DeltaObs>{{"a", WeightClass::Exact}}));
    ASSERT_EQ(d.collectives.size(), 1u);
    EXPECT_EQ(d.collectives[0].count, 24);  // A (6, 8): 3 rows
    const Observation& m = obs_at(r.observations, 3, rank);
    ASSERT_EQ(m.status, Status::Ok) << m.message;
    ASSERT_EQ(m.collectives.size(), 2u);
    EXPECT_EQ(m.collectives[1].count, 32);  // W (2, 8, 4): one expert
    EXPECT_EQ(m.collectives[1].parts, (std::vector<CollPart>{{"moe.weight", 32}}));
    EXPECT_EQ(m.layers.at(0).merged, std::vector<std::string>{"b"});
    EXPECT_EQ(m.layers.at(0).stored, WeightClass::Exact);
    const Observation& u = obs_at(r.observations, 4, rank);
    ASSERT_EQ(u.status, Status::Ok) << u.message;
    EXPECT_EQ(u.layers.at(0).stored, WeightClass::Exact);
  }
}

// libtorch 1.13 has no DTensor: the text is fsdpsim's (torch 2.13's words), the status the same.
TEST(Experts, UnevenExpertsRaiseTheUnflattenException) {
  real::RealResult r = run_both(moe_header("upstream", 3) + "delta_weight moe\nmerge\n");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(obs_at(r.observations, 1, rank).status, Status::Exception);
    EXPECT_EQ(obs_at(r.observations, 2, rank).status, Status::Exception);
    EXPECT_EQ(obs_at(r.observations, 2, rank).layers.at(0).merged, std::vector<std::string>{});
  }
}

TEST(Experts, PatchedGathersAThenBAndMergesExactly) {
  real::RealResult r = run_both(moe_header("patched") + "delta_weight moe\nmerge\nunmerge\n");
  for (int rank = 0; rank < 2; ++rank) {
    const Observation& d = obs_at(r.observations, 1, rank);
    ASSERT_EQ(d.status, Status::Ok) << d.message;
    EXPECT_EQ(d.deltas, (std::vector<DeltaObs>{{"a", WeightClass::Exact}}));
    ASSERT_EQ(d.collectives.size(), 2u);
    EXPECT_EQ(d.collectives[0].count, 24);  // A (6, 8): 3 rows
    EXPECT_EQ(d.collectives[1].count, 12);  // B (4, 6): 2 rows
    EXPECT_EQ(d.collectives[0].group, "root");
    const Observation& m = obs_at(r.observations, 2, rank);
    ASSERT_EQ(m.status, Status::Ok) << m.message;
    EXPECT_EQ(m.layers.at(0).merged, std::vector<std::string>{"a"});
    EXPECT_EQ(m.layers.at(0).stored, WeightClass::Exact);
    const Observation& u = obs_at(r.observations, 3, rank);
    ASSERT_EQ(u.status, Status::Ok) << u.message;
    EXPECT_EQ(u.layers.at(0).merged, std::vector<std::string>{});
    EXPECT_EQ(u.layers.at(0).stored, WeightClass::Exact);
  }
}

// E == 1 (PEFT 0.21.2's Linear path on a (1, in, out) weight): the delta is
// corrupt, a sharded merge raises DTensor's broadcast error (fsdpsim's text),
// the forward libtorch's own.
// The patched profile keeps that path here (single_expert_delta=linear; param_layout is its patch).
TEST(Experts, OneExpertDeltaIsCorruptAndMergeAndForwardFail) {
  for (const char* profile : {"upstream", "patched"}) {
    std::string text = moe_header(profile, 1) + "delta_weight moe\nmerge\nforward\n";
    text.insert(text.find("\nlayer"), "\nset single_expert_delta=linear");
    real::RealResult r = run_both(text);
    for (int rank = 0; rank < 2; ++rank) {
      const Observation& d = obs_at(r.observations, 1, rank);
      ASSERT_EQ(d.status, Status::Ok) << profile << ": " << d.message;
      EXPECT_EQ(d.deltas, (std::vector<DeltaObs>{{"a", WeightClass::Corrupt}}));
      // A; delta_weight_gather=on (patched) reads the full A and B
      EXPECT_EQ(d.collectives.size(), std::string(profile) == "patched" ? 2u : 1u);
      const Observation& m = obs_at(r.observations, 2, rank);
      EXPECT_EQ(m.status, Status::ShapeError) << profile;
      EXPECT_EQ(m.message.rfind("Attempting to broadcast a dimension of length 8 at -1!", 0), 0u) << m.message;
      const Observation& f = obs_at(r.observations, 3, rank);
      EXPECT_EQ(f.status, Status::ShapeError);
      EXPECT_EQ(f.message, "The size of tensor a (4) must match the size of tensor b (8) at non-singleton dimension 2");
    }
  }
}

TEST(Experts, TrainStepSendsGradientsToTheActiveAdapter) {
  real::RealResult r = run_both(
      "world 2\nprofile upstream\nlayer lin0 6 8\nlayer moe 8 4 experts=2\nlayer lin1 4 2\n"
      "adapter a r=3 alpha=3 targets=lin0,moe init=random\nadapter b r=2 alpha=4 targets=moe,lin1\n"
      "fully_shard moe\nfully_shard root\n---\ntrain_step\nset_adapter b\ntrain_step\ntrain_step\n");
  for (int rank = 0; rank < 2; ++rank) {
    const Observation& s1 = obs_at(r.observations, 1, rank);
    ASSERT_EQ(s1.status, Status::Ok) << s1.message;
    EXPECT_EQ(*s1.grads, std::vector<std::string>{"a"});
    for (int step : {3, 4}) {
      const Observation& o = obs_at(r.observations, step, rank);
      ASSERT_EQ(o.status, Status::Ok) << o.message;
      EXPECT_EQ(*o.grads, std::vector<std::string>{"b"});
    }
  }
}

// ParamWrapper driven without a rank (properties/real_backend/module_fixture.hpp wires the classes
// for one world-1 rank, no launcher): get_delta_weight reads the registered A and B, the einsum's
// delta matches the expert-by-expert one scaled by alpha / r, and forward runs the weight plus
// each active adapter's delta (the weight alone once the layer is disabled).
TEST(ParamWrapperAlone, DeltaAndForwardOnOneRank) {
  RealModule m(moe_header("upstream", 2, 1));
  m.load();
  real::LoraLayer& layer = m.peft.layer(0);
  real::ParamWrapper pw(m.layout, 0, m.params, m.dtensor, m.pg);
  const at::Tensor w = m.params.registered(m.layout.layers[0].weight).detach().clone();
  auto delta = [&](const std::string& adapter, int index) {
    return real::experts_delta_per_expert(m.params.registered(m.param("moe.lora_A." + adapter)).detach(),
                                          m.params.registered(m.param("moe.lora_B." + adapter)).detach(), 2) *
           real::lora_scaling(m.layout, index);
  };
  const at::Tensor da = delta("a", 0), db = delta("b", 1);
  ASSERT_GT(da.abs().sum().item<float>(), 0.0f);
  real::DeltaValue what;
  ASSERT_EQ(real::lora_scaling(m.layout, 1), 2.0f);  // b's delta is scaled: alpha 8 / r 4
  EXPECT_TRUE(at::allclose(pw.get_delta_weight(1, false, &what), db, 1e-5, 1e-6));
  EXPECT_EQ(what.form, real::kDeltaFull);
  EXPECT_EQ(what.shape, (std::vector<int64_t>{2, 8, 4}));
  EXPECT_TRUE(at::allclose(pw.get_delta_weight(0, true), da, 1e-5, 1e-6));  // a merge's add: the whole delta at world 1

  const at::Tensor h = seeded({3, 8}, 0.3);
  layer.active = AdapterSet::of(0) | AdapterSet::of(1);
  EXPECT_TRUE(at::allclose(pw.forward(layer, h).detach(), at::matmul(h, (w + da + db).sum(0)), 1e-4, 1e-5));
  layer.active = AdapterSet::of(1);
  EXPECT_TRUE(at::allclose(pw.forward(layer, h).detach(), at::matmul(h, (w + db).sum(0)), 1e-4, 1e-5));
  layer.disabled = true;
  EXPECT_TRUE(at::allclose(pw.forward(layer, h).detach(), at::matmul(h, w.sum(0)), 1e-4, 1e-5));
}
