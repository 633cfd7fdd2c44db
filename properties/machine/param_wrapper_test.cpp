// Seed 002: get_delta_weight on a sharded ParamWrapper (experts) target.
#include <gtest/gtest.h>

#include "model/machine/param_wrapper.hpp"
#include "properties/machine/bare_state.hpp"
#include "properties/test_util.hpp"

namespace fsdpsim::test {
namespace {

std::string experts(const std::string& profile, int E, int r, int world = 2) {
  return "world " + std::to_string(world) + "\nprofile " + profile +
         "\nlayer lin0 8 8\nlayer moe 8 4 experts=" + std::to_string(E) +
         "\nadapter default r=" + std::to_string(r) +
         " alpha=6 targets=lin0,moe\nfully_shard moe reshard_after_forward=true\nfully_shard root\n---\n";
}

TEST(ParamWrapper, TopologyShapes) {
  OneRank m(experts("upstream", 2, 3) + "forward\n");
  const ParamInfo& w = m.topo->params[m.param("moe.weight")];
  EXPECT_EQ(w.dim0, 2);
  EXPECT_EQ(w.rest, 32);
  EXPECT_EQ(m.param("moe.bias"), -1);
  EXPECT_EQ(m.topo->params[m.param("moe.lora_A.default")].dim0, 6);  // r*E rows of in
  EXPECT_EQ(m.topo->params[m.param("moe.lora_B.default")].rest, 6);  // out rows of r*E
}

// Under FSDP2 (torch 2.13) the sharded read hands get_delta_weight DTensors: the
// reshape / einsum redistribute A (one all-gather of A) and the delta is exact
// (FSDP1's local-rows failure of #3080 does not occur).
TEST(ParamWrapper, UpstreamShardedDeltaGathersAAndIsExact) {
  RunResult r = simulate(experts("upstream", 2, 3) + "train_step\ndelta_weight moe\n");
  for (int rank : {0, 1}) {
    const Observation& o = obs_at(r, 2, rank);
    EXPECT_EQ(o.status, Status::Ok) << o.message;
    ASSERT_EQ(o.collectives.size(), 1u);
    EXPECT_EQ(o.collectives[0].parts, (std::vector<CollPart>{{"moe.lora_A.default", 24}}));
    EXPECT_EQ(o.deltas, (std::vector<DeltaObs>{{"default", WeightClass::Exact}}));
  }
  EXPECT_TRUE(r.findings.empty());
}

// A merge's `param.data += delta` redistributes once more: an all-gather named
// after the weight, the size of its shard (1 of 2 experts: 32).
TEST(ParamWrapper, UpstreamMergeGathersAThenTheWeight) {
  RunResult r = simulate(experts("upstream", 2, 3) + "merge\nunmerge\n");
  for (int step : {1, 2}) {
    const Observation& o = obs_at(r, step, 0);
    ASSERT_EQ(o.status, Status::Ok) << o.message;
    ASSERT_EQ(o.collectives.size(), 3u);  // lin0's A, moe's A, moe.weight
    EXPECT_EQ(o.collectives[1].parts, (std::vector<CollPart>{{"moe.lora_A.default", 24}}));
    EXPECT_EQ(o.collectives[2].parts, (std::vector<CollPart>{{"moe.weight", 32}}));
    EXPECT_EQ(o.layers[1].stored, WeightClass::Exact);
  }
  EXPECT_TRUE(r.findings.empty());
}

TEST(ParamWrapper, UnevenExpertsRaiseTorchsUnflattenError) {
  RunResult r = simulate(experts("upstream", 3, 3) + "delta_weight moe\nmerge\n");
  for (int rank : {0, 1}) {
    EXPECT_EQ(obs_at(r, 1, rank).status, Status::Exception);
    EXPECT_EQ(obs_at(r, 1, rank).message,
              "RuntimeError: Cannot unflatten unevenly sharded tensor: output dimension 0 (size 3) is not evenly divisible "
              "by mesh dimension 0 (size 2). Please redistribute the tensor before this operation.");
    const Observation& m = obs_at(r, 2, rank);
    EXPECT_EQ(m.status, Status::Exception);
    EXPECT_EQ(m.layers[0].merged, (std::vector<std::string>{"default"}));  // lin0 merged before moe raised
    EXPECT_TRUE(m.layers[1].merged.empty());
  }
  // r = 1: the reshape splits nothing, so three experts over two ranks work.
  RunResult r1 = simulate(experts("upstream", 3, 1) + "delta_weight moe\n");
  EXPECT_EQ(obs_at(r1, 1, 0).status, Status::Ok);
}

TEST(ParamWrapper, PatchedGathersAAndBAndTheDeltaIsExact) {
  RunResult r = simulate(experts("patched", 2, 3) + "train_step\ndelta_weight moe\nmerge\nreshard\n");
  const Observation& d = obs_at(r, 2, 1);
  EXPECT_EQ(d.status, Status::Ok);
  ASSERT_EQ(d.collectives.size(), 2u);
  EXPECT_EQ(d.collectives[0].parts, (std::vector<CollPart>{{"moe.lora_A.default", 24}}));
  EXPECT_EQ(d.collectives[1].parts, (std::vector<CollPart>{{"moe.lora_B.default", 12}}));
  EXPECT_EQ(d.deltas, (std::vector<DeltaObs>{{"default", WeightClass::Exact}}));
  const Observation& m = obs_at(r, 3, 0);
  EXPECT_EQ(m.layers[1].merged, (std::vector<std::string>{"default"}));
  EXPECT_EQ(m.layers[1].stored, WeightClass::Exact);
  EXPECT_TRUE(r.findings.empty());
}

// E == 1 takes Linear's path: a (4, 8) delta for a (1, 8, 4) weight (PEFT 0.21.2).
TEST(ParamWrapper, OneExpertFailsInForwardAndItsDeltaIsCorrupt) {
  RunResult r = simulate(experts("upstream", 1, 3) + "train_step\ndelta_weight moe\n");
  const Observation& f = obs_at(r, 1, 0);
  EXPECT_EQ(f.status, Status::ShapeError);
  EXPECT_EQ(f.message, "The size of tensor a (4) must match the size of tensor b (8) at non-singleton dimension 2");
  EXPECT_EQ(obs_at(r, 2, 1).deltas, (std::vector<DeltaObs>{{"default", WeightClass::Corrupt}}));
}

// PEFT 0.21.2's Linear path on the one-expert weight, under every profile that keeps it (the
// patched profile's single_expert_delta=param_layout takes the weight's layout instead).
TEST(ParamWrapper, OneExpertShardedMergeRaisesDTensorsBroadcastError) {
  for (const char* profile : {"upstream", "patched"}) {
    std::string text = experts(profile, 1, 3) + "merge\n";
    text.insert(text.find("\nlayer"), "\nset single_expert_delta=linear");
    RunResult r = simulate(text);
    const Observation& m = obs_at(r, 1, 0);
    EXPECT_EQ(m.status, Status::ShapeError) << profile;
    EXPECT_EQ(m.message,
              "Attempting to broadcast a dimension of length 8 at -1! Mismatching argument at index 1 had torch.Size([4, 8]); "
              "but expected shape should be broadcastable to [1, 8, 4]")
        << profile;
  }
}

TEST(ParamWrapper, UnshardedGroupReadsFullTensors) {
  RunResult r = simulate(experts("upstream", 2, 3) + "unshard moe\ndelta_weight moe\n");
  EXPECT_EQ(obs_at(r, 2, 0).status, Status::Ok);
  EXPECT_TRUE(obs_at(r, 2, 0).collectives.empty());
}

// Rank 0 after prepare with the experts layer `l` a tuner layer running adapter 0.
LoraLayer& prepared_moe(BareRank& r, int l) {
  r.st.prepared = true;
  LoraLayer& lp = r.st.layers[l];
  lp.tuner = true;
  lp.active = AdapterSet::of(0);
  return lp;
}

// ParamWrapper driven without the dispatcher, on a bare rank 0 of a 2-rank mesh (every group
// sharded): a merge of the experts target reads A off its shard through one DTensor all-gather
// (E * r = 6 rows of 8, shard-padded: 24 elements) whose delta lands in the layer's shard once
// the gather is matched, then the einsum's add redistributes the weight (its shard: 32). Nothing
// lands in W before the settlement; the layer records the merge.
TEST(ParamWrapperAlone, AShardMergeGathersAThroughThePortThenTheWeight) {
  BareRank r(experts("upstream", 2, 3));
  const int l = r.topo.layer_index("moe");
  LoraLayer& lp = prepared_moe(r, l);
  ASSERT_FALSE(ParamWrapper::forward(lp, r.layer(l)));  // a wrapper made before fully_shard: nothing to activate
  ASSERT_FALSE(lp.merge(r.layer(l), 0));
  EXPECT_EQ(lp.n_merged, 1);
  const std::vector<CollRecord>& c = r.log.records();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].op, CollOp::AllGather);
  EXPECT_EQ(c[0].count, 24);
  EXPECT_EQ(c[0].into, CollRecord::kIntoShard);
  EXPECT_EQ(c[0].target, l);
  EXPECT_EQ(c[0].sign, 1);
  EXPECT_EQ(c[1].count, 32);
  EXPECT_EQ(c[1].into, CollRecord::kNowhere);
  EXPECT_EQ(r.st.params[r.param("moe.weight")].w_s, WeightContent{});
}


// ParamWrapper's own methods called directly (not through LoraLayer::merge), on a bare rank 0 of
// a 2-rank mesh: the delta_weight op's read (sign 0) of a sharded experts target gathers A only
// and adds nothing; E = 1 returns Linear's (out, in) delta, which the read notes as corrupt;
// forward of a wrapper made after fully_shard meets W's shard and raises DTensor's mixed-tensor
// error (torch.baddbmm: one fp32 adapter on E > 1 experts).
TEST(ParamWrapperAlone, DeltaReadAndForwardCalledDirectly) {
  BareRank r(experts("upstream", 2, 3));
  const int l = r.topo.layer_index("moe");
  LoraLayer& lp = prepared_moe(r, l);
  const DeltaRead read{true, false, CollRecord::kNowhere, false, &r.corrupt_deltas};
  ASSERT_FALSE(ParamWrapper::get_delta_weight(lp, r.layer(l), 0, 0, read));
  ASSERT_EQ(r.log.records().size(), 1u);
  EXPECT_EQ(r.log.records()[0].op, CollOp::AllGather);
  EXPECT_EQ(r.log.records()[0].count, 24);  // A: E * r = 6 rows of 8, shard-padded
  EXPECT_EQ(r.st.params[r.param("moe.weight")].w_s, WeightContent{});
  EXPECT_TRUE(r.corrupt_deltas.empty());

  BareRank one(experts("upstream", 1, 3));
  one.st.prepared = true;
  const int l1 = one.topo.layer_index("moe");
  const DeltaRead read1{true, false, CollRecord::kNowhere, false, &one.corrupt_deltas};
  ASSERT_FALSE(ParamWrapper::get_delta_weight(one.st.layers[l1], one.layer(l1), 0, 0, read1));
  EXPECT_EQ(one.corrupt_deltas, AdapterSet::of(0));

  r.topo.layers[l].wrapper_after_fsdp = true;
  const Raise f = ParamWrapper::forward(lp, r.layer(l));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->message, "RuntimeError: aten.baddbmm.default got mixed torch.Tensor and DTensor, need to convert all "
                        "torch.Tensor to DTensor before calling distributed operators!");
}

}  // namespace
}  // namespace fsdpsim::test
