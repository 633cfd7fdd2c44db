// The DTensor port driven on its own (model/machine/dtensor.hpp): one rank's DTensor
// all-gathers, the settlement of a matched gather across ranks, and the mix encodings
// (version_token.hpp), on parameters and logs the test builds, no RankModel.
#include <gtest/gtest.h>

#include "model/machine/dtensor.hpp"
#include "model/vocab/model_lowering.hpp"
#include "model/vocab/seq.hpp"
#include "properties/test_util.hpp"

using namespace fsdpsim;

namespace {

// One rank's pieces the port reaches: parameters, groups (all SHARDED), this op's log.
struct RankPieces {
  std::vector<FsdpParam> params;
  std::vector<FsdpParamGroup> groups;
  CollectiveLog log;
  explicit RankPieces(const Topology& t) : params(t.params.size()), groups(t.groups.size()) {}
  DTensor port(const Topology& t, int rank) { return DTensor(t, rank, params, groups, log, nullptr); }
};

Topology topology(int world) { return compile_topology(parse_seq(test::seed000_header(world), "<test>")); }

}  // namespace

TEST(DTensor, MixVersionIsTheCommonVersionOrAMixAboveTheVersions) {
  EXPECT_EQ(version::mix_version({3, 3, kNoRows}), 3u);
  EXPECT_EQ(version::mix_version({kNoRows, kNoRows}), 0u);  // padding only: nothing gathered
  const uint32_t mix = version::mix_version({3, 4});
  EXPECT_GE(mix, version::kMixBase);
  EXPECT_NE(mix, version::mix_version({4, 3}));  // which rank held what is part of the mix
  EXPECT_EQ(version::foreign_mix(5), version::kMixBase + 5);
}

TEST(DTensor, AShardMergeGathersAAndLeavesWUntilTheGatherSettles) {
  const Topology t = topology(2);
  RankPieces r0(t);
  const int layer = t.layer_index("lin0");
  const LayerInfo& li = t.layers[layer];
  r0.params[li.B[0]].ver_s = 2;  // B updated: the delta is not zero
  DTensor dt = r0.port(t, 0);
  dt.all_gather(li.A[0], CollRecord::kIntoShard, layer, 0, +1);
  ASSERT_EQ(r0.log.records().size(), 1u);
  const CollRecord& c = r0.log.records()[0];
  EXPECT_EQ(c.op, CollOp::AllGather);
  EXPECT_EQ(c.count, t.params[li.A[0]].shard_numel);
  EXPECT_EQ(r0.params[li.weight].w_s, WeightContent{});  // nothing merged before the gather pairs
  dt.settle(c, 7);
  EXPECT_EQ(r0.params[li.weight].w_s.coeff[0], 1);
  EXPECT_EQ(r0.params[li.weight].w_s.ver[0], dt.delta_id(0, 7, 2));
}

TEST(DTensor, OnOneRankTheMergeAppliesAtOnceWithNoCollective) {
  const Topology t = topology(1);
  RankPieces r0(t);
  const int layer = t.layer_index("lin0");
  const LayerInfo& li = t.layers[layer];
  r0.params[li.B[0]].ver_s = 2;
  r0.params[li.A[0]].ver_s = 5;
  r0.port(t, 0).all_gather(li.A[0], CollRecord::kIntoShard, layer, 0, +1);
  EXPECT_TRUE(r0.log.records().empty());
  EXPECT_TRUE(r0.log.members().empty());
  EXPECT_EQ(r0.params[li.weight].w_s.ver[0], r0.port(t, 0).delta_id(0, 5, 2));
}

// Two ranks merge off shards: agreeing A shards give the adapter's delta; an A that differs on
// one rank gives a delta of an A no rank holds (a mix), on both ranks.
TEST(DTensor, SettlingAMatchedGatherUsesTheVersionEveryRankContributed) {
  const Topology t = topology(2);
  const int layer = t.layer_index("lin0");
  const LayerInfo& li = t.layers[layer];
  for (uint32_t a1 : {0u, 9u}) {
    RankPieces r0(t), r1(t);
    for (RankPieces* r : {&r0, &r1}) r->params[li.B[0]].ver_s = 2;
    r1.params[li.A[0]].ver_s = a1;
    r0.port(t, 0).all_gather(li.A[0], CollRecord::kIntoShard, layer, 0, +1);
    r1.port(t, 1).all_gather(li.A[0], CollRecord::kIntoShard, layer, 0, +1);
    std::vector<MatchedGather> g{{r0.port(t, 0), &r0.log.records()[0]}, {r1.port(t, 1), &r1.log.records()[0]}};
    std::vector<uint32_t> gathered_a(2, kNoRows);
    std::vector<GatherSettled> out;
    DTensor::settle_deltas(g, gathered_a, out);
    ASSERT_TRUE(out[0].settled && out[1].settled);
    const uint32_t want = a1 == 0 ? 0u : version::mix_version({0, a1});
    EXPECT_EQ(gathered_a[0], want);
    if (a1 != 0) EXPECT_GE(want, version::kMixBase);
    for (RankPieces* r : {&r0, &r1}) EXPECT_EQ(r->params[li.weight].w_s.ver[0], r0.port(t, 0).delta_id(0, want, 2)) << a1;
  }
}

// A gpt2 Conv1D (weight (in, out), Shard(0) over its input rows): PEFT's transposed delta is
// redistributed to the weight's rows from every rank's B rows (lora_layer.cpp), so a merge on the
// shard settles with the ranks' B, not this rank's alone; a Linear's rows take this rank's B rows.
TEST(DTensor, AConv1DShardMergeTakesEveryRanksBRows) {
  const Topology conv = compile_topology(lowered_file(parse_seq(
      "world 2\nmodel gpt2 hidden=16 intermediate=32 layers=1 heads=4 kv_heads=4 vocab=64 seq_len=8\n"
      "adapter default r=4 alpha=8 targets=c_attn init=random\nfully_shard_plan transformer_layers\n---\n",
      "<test>")));
  const Topology linear = topology(2);
  for (const Topology* t : {&conv, &linear}) {
    const bool is_conv = t == &conv;
    const int layer = t->layer_index(is_conv ? "transformer.h.0.attn.c_attn" : "lin0");
    const LayerInfo& li = t->layers[layer];
    EXPECT_EQ(li.conv1d, is_conv);
    RankPieces r0(*t), r1(*t);
    r0.params[li.B[0]].ver_s = 2;
    r1.params[li.B[0]].ver_s = 3;  // the ranks' B rows moved apart (a step one rank took)
    r0.port(*t, 0).all_gather(li.A[0], CollRecord::kIntoShard, layer, 0, +1);
    r1.port(*t, 1).all_gather(li.A[0], CollRecord::kIntoShard, layer, 0, +1);
    std::vector<MatchedGather> g{{r0.port(*t, 0), &r0.log.records()[0]}, {r1.port(*t, 1), &r1.log.records()[0]}};
    std::vector<uint32_t> gathered_a(2, kNoRows);
    std::vector<GatherSettled> out;
    DTensor::settle_deltas(g, gathered_a, out);
    ASSERT_TRUE(out[0].settled && out[1].settled);
    const DTensor d0 = r0.port(*t, 0);
    const uint32_t both = version::mix_version({2, 3});
    EXPECT_EQ(r0.params[li.weight].w_s.ver[0], d0.delta_id(0, 0, is_conv ? both : 2u)) << is_conv;
    EXPECT_EQ(r1.params[li.weight].w_s.ver[0], d0.delta_id(0, 0, is_conv ? both : 3u)) << is_conv;
  }
}

// A peer that gathered another tensor fills its slot with that one's rows: a delta_weight read
// through it is no adapter's delta.
TEST(DTensor, APeerGatheringAnotherTensorMakesTheDeltaReadCorrupt) {
  const Topology t = topology(2);
  const int layer = t.layer_index("lin0");
  const LayerInfo& li = t.layers[layer];
  RankPieces r0(t), r1(t);
  for (RankPieces* r : {&r0, &r1}) r->params[li.B[0]].ver_s = r->params[li.B[1]].ver_s = 2;
  r0.port(t, 0).all_gather(li.A[0], CollRecord::kNowhere, layer, 0);
  r1.port(t, 1).all_gather(li.A[1], CollRecord::kNowhere, layer, 1);  // the other adapter's A
  std::vector<MatchedGather> g{{r0.port(t, 0), &r0.log.records()[0]}, {r1.port(t, 1), &r1.log.records()[0]}};
  std::vector<uint32_t> gathered_a(2, kNoRows);
  std::vector<GatherSettled> out;
  DTensor::settle_deltas(g, gathered_a, out);
  EXPECT_TRUE(out[0].corrupt_delta);
  EXPECT_TRUE(out[1].corrupt_delta);
  EXPECT_FALSE(out[0].settled);  // a read, not a merge: W is untouched
  EXPECT_GE(gathered_a[0], version::kMixBase);
}

// A broadcast that sent half the bytes rank 1 posted (bf16 into fp32): distribute_tensor's scatter
// fills the first half of rank 1's chunk with rank 0's chunk bytes and leaves torch.empty's tail.
// Rank 1's 10 rows of B (20 x 8) reach that tail: its merge writes NaN (corrupt).
TEST(DTensor, AMergeOfBRowsInAPartFilledTailIsCorrupt) {
  const Topology t = topology(2);
  const int layer = t.layer_index("lin0");
  const LayerInfo& li = t.layers[layer];
  const ParamInfo& pb = t.params[li.B[0]];
  const int64_t numel = static_cast<int64_t>(pb.dim0) * pb.rest;
  for (bool part_filled : {false, true}) {
    RankPieces r(t);
    r.log.pack(li.B[0]);
    CollRecord bc{CollOp::Broadcast, -1, numel};
    bc.member_count = 1;
    bc.dtype = DType::F32;
    r.log.issue(bc);
    DTensor dt = r.port(t, 1);
    if (part_filled) dt.mark_part_filled(r.log.records()[0], numel * 2);  // the root's bf16 bytes: half of fp32's
    EXPECT_EQ(r.params[li.B[0]].nan_rows, part_filled);
    dt.all_gather(li.A[0], CollRecord::kIntoShard, layer, 0, +1);
    dt.settle(r.log.records().back(), 3);
    EXPECT_EQ(r.params[li.weight].w_s.corrupt, part_filled);
  }
}

// The tail is measured in rank 1's chunk, not in the broadcast's buffer: A (3 x 10) at world 2
// gives rank 1 one row of a two-row chunk, which rank 0's bf16 chunk bytes fill whole (crosscheck
// seed 40120: upstream's rank 0 gathers no NaN from it); one more row would reach the tail.
TEST(DTensor, APartFilledChunkIsNaNOnlyPastTheRootsChunkBytes) {
  const Topology t = compile_topology(parse_seq(
      "world 2\nseed 1\nprofile upstream\nlayer lin0 10 2\nadapter default r=3 alpha=3 targets=lin0\n"
      "fully_shard root reshard_after_forward=true\noptimizer trainable\n---\nprepare\n",
      "<test>"));
  const LayerInfo& li = t.layers[t.layer_index("lin0")];
  const ParamInfo& pa = t.params[li.A[0]];
  ASSERT_EQ(pa.local_rows(1), 1);
  ASSERT_EQ(pa.chunk_rows, 2);
  RankPieces r(t);
  r.log.pack(li.A[0]);
  CollRecord bc{CollOp::Broadcast, -1, int64_t{pa.dim0} * pa.rest};
  bc.member_count = 1;
  bc.dtype = DType::F32;
  r.log.issue(bc);
  r.port(t, 1).mark_part_filled(r.log.records()[0], bc.count * 2);
  EXPECT_FALSE(r.params[li.A[0]].nan_rows);
  EXPECT_EQ(r.params[li.A[0]].ver_s, kMixedVersion);  // bf16 bytes read as fp32: values no rank holds
}

// A delta_weight read and a merge gather every rank's rows of A: rank 1's NaN rows make the delta
// NaN on rank 0 as well (a read: corrupt; a merge: W corrupt), though rank 0's own rows are whole.
TEST(DTensor, APeersNaNRowsOfAReachEveryRanksDelta) {
  const Topology t = topology(2);
  const int layer = t.layer_index("lin0");
  const LayerInfo& li = t.layers[layer];
  for (CollRecord::Into into : {CollRecord::kNowhere, CollRecord::kIntoShard})
    for (bool nan : {false, true}) {
      RankPieces r0(t), r1(t);
      for (RankPieces* r : {&r0, &r1}) r->params[li.B[0]].ver_s = 2;
      r1.params[li.A[0]].nan_rows = nan;
      const int sign = into == CollRecord::kNowhere ? 0 : +1;
      r0.port(t, 0).all_gather(li.A[0], into, layer, 0, sign);
      r1.port(t, 1).all_gather(li.A[0], into, layer, 0, sign);
      std::vector<MatchedGather> g{{r0.port(t, 0), &r0.log.records()[0]}, {r1.port(t, 1), &r1.log.records()[0]}};
      std::vector<uint32_t> gathered_a(2, kNoRows);
      std::vector<GatherSettled> out;
      DTensor::settle_deltas(g, gathered_a, out);
      if (into == CollRecord::kNowhere) {
        EXPECT_EQ(out[0].corrupt_delta, nan);
      } else {
        EXPECT_EQ(r0.params[li.weight].w_s.corrupt, nan);
      }
    }
}
