// Seed 002: get_delta_weight on a sharded ParamWrapper (experts) target.
#include <gtest/gtest.h>

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

TEST(ParamWrapper, UpstreamShardedReadRaisesLibtorchsReshapeError) {
  RunResult r = simulate(experts("upstream", 2, 3) + "train_step\ndelta_weight moe\n");
  for (int rank : {0, 1}) {
    const Observation& o = obs_at(r, 2, rank);
    EXPECT_EQ(o.status, Status::ShapeError);
    EXPECT_EQ(o.message, "shape '[2, -1, 8]' is invalid for input of size 24");  // 3 local rows of 6
    EXPECT_TRUE(o.collectives.empty());
  }
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].text, "S7 step 2 rank 0: get_delta_weight raised: shape '[2, -1, 8]' is invalid for input of size 24");
}

TEST(ParamWrapper, UpstreamDivisibleLocalRowsFailInEinsum) {
  RunResult r = simulate(experts("upstream", 2, 4) + "delta_weight moe\n");
  EXPECT_EQ(obs_at(r, 1, 0).message,
            "einsum(): subscript r has size 2 for operand 1 which does not broadcast with previously seen size 4");
  // E=3, r=1 over 2 ranks: rank 1 holds 1 row of 3 -> reshape fails; rank 0 holds 2.
  RunResult e3 = simulate(experts("upstream", 3, 1) + "delta_weight moe\n");
  EXPECT_EQ(obs_at(e3, 1, 0).message, "shape '[3, -1, 8]' is invalid for input of size 16");
  EXPECT_EQ(obs_at(e3, 1, 1).message, "shape '[3, -1, 8]' is invalid for input of size 8");
}

// One local row block per expert (r=2, E=2: 2 rows of A each): the einsum
// broadcasts the size-1 subscript, so the read returns a wrong delta and the
// merge fails adding it to W's shard.
TEST(ParamWrapper, UpstreamSizeOneSliceBroadcastsIntoAWrongDelta) {
  RunResult r = simulate(experts("upstream", 2, 2) + "delta_weight moe\nmerge\n");
  const Observation& d = obs_at(r, 1, 0);
  EXPECT_EQ(d.status, Status::Ok);
  EXPECT_TRUE(d.collectives.empty());
  EXPECT_EQ(d.deltas, (std::vector<DeltaObs>{{"default", WeightClass::Corrupt}}));
  EXPECT_EQ(r.findings[0].text, "S7 step 1 rank 0: delta of default is corrupt (not the delta of the full A and B)");
  const Observation& m = obs_at(r, 2, 1);
  EXPECT_EQ(m.status, Status::ShapeError);
  EXPECT_EQ(m.message, "The size of tensor a (4) must match the size of tensor b (2) at non-singleton dimension 2");
}

// r = 1: B's r dimension has size 1 and broadcasts against a rank's 0 rows of A.
TEST(ParamWrapper, UpstreamRankOneBroadcastsAgainstAnEmptyShard) {
  RunResult r = simulate("world 3\nlayer lin0 8 8\nlayer moe 8 20 experts=2\nadapter default r=1 targets=moe\n"
                         "fully_shard moe\nfully_shard root\n---\ndelta_weight moe\nmerge\n");
  EXPECT_EQ(obs_at(r, 1, 2).deltas, (std::vector<DeltaObs>{{"default", WeightClass::Corrupt}}));  // A: 0 of 2 rows
  EXPECT_EQ(obs_at(r, 2, 2).message, "The size of tensor a (20) must match the size of tensor b (6) at non-singleton dimension 2");
}

TEST(ParamWrapper, UpstreamMergeStopsAtTheExpertsLayer) {
  RunResult r = simulate(experts("upstream", 2, 3) + "merge\n");
  const Observation& o = obs_at(r, 1, 0);
  EXPECT_EQ(o.status, Status::ShapeError);
  EXPECT_EQ(o.layers[0].merged, (std::vector<std::string>{"default"}));  // lin0 merged before moe raised
  EXPECT_TRUE(o.layers[1].merged.empty());
  EXPECT_EQ(o.layers[1].stored, WeightClass::Exact);
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

TEST(ParamWrapper, OneExpertWorksUnderBothProfiles) {
  for (const char* profile : {"upstream", "patched"}) {
    RunResult r = simulate(experts(profile, 1, 3) + "train_step\ndelta_weight moe\nmerge\n");
    EXPECT_EQ(obs_at(r, 2, 0).status, Status::Ok) << profile;
    EXPECT_EQ(obs_at(r, 3, 1).layers[1].stored, WeightClass::Exact) << profile;
    EXPECT_TRUE(r.findings.empty()) << profile;
  }
}

TEST(ParamWrapper, UnshardedGroupReadsFullTensors) {
  RunResult r = simulate(experts("upstream", 2, 3) + "unshard moe\ndelta_weight moe\n");
  EXPECT_EQ(obs_at(r, 2, 0).status, Status::Ok);
  EXPECT_TRUE(obs_at(r, 2, 0).collectives.empty());
}

}  // namespace
}  // namespace fsdpsim::test
