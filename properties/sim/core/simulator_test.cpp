// The N-rank simulator: collective matching, hang and mismatch detection,
// determinism (sim/core/simulator.cpp).
#include <gtest/gtest.h>

#include <set>

#include "properties/test_util.hpp"
#include "sim/core/generator.hpp"

using namespace fsdpsim;
using namespace fsdpsim::test;

TEST(Simulator, Seed000ObservationsMatchTheThread) {
  for (int world : {1, 2}) {
    RunResult r = simulate(seed000_header(world) + "eval\nmerge\nset_adapter other\ntrain_step\ntrain_step\ntrain_step\n");
    for (int rank = 0; rank < world; ++rank) {
      const Observation& s1 = obs_at(r, 4, rank);
      ASSERT_EQ(s1.status, Status::Ok);
      EXPECT_EQ(*s1.grads, std::vector<std::string>{"other"});
      const Observation& s2 = obs_at(r, 5, rank);
      EXPECT_EQ(s2.status, Status::NoGradFn);
      EXPECT_EQ(s2.message, "element 0 of tensors does not require grad and does not have a grad_fn");
      EXPECT_TRUE(s2.grads->empty());
    }
  }
}

TEST(Simulator, OneRankCollectiveWithoutPartnerIsAHang) {
  RunResult r = simulate(seed000_header(2) + "@0 unshard lin0\n");
  EXPECT_TRUE(r.hang);
  const Observation& o = obs_at(r, 1, 0);
  EXPECT_EQ(o.status, Status::Hang);
  EXPECT_NE(o.message.find("rank 0 in all_gather(lin0, "), std::string::npos) << o.message;
  EXPECT_NE(o.message.find("rank 1 issues no matching collective"), std::string::npos) << o.message;
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings.back().spec, "S5");
}

TEST(Simulator, RankOpsMatchAcrossDifferentSteps) {
  RunResult r = simulate(seed000_header(2) + "@0 unshard lin0\n@1 unshard lin0\ntrain_step\n");
  EXPECT_FALSE(r.hang);
  EXPECT_FALSE(r.mismatch);
  EXPECT_EQ(obs_at(r, 1, 0).status, Status::Ok);
  EXPECT_EQ(obs_at(r, 3, 1).status, Status::Ok);
}

TEST(Simulator, DifferentReduceSetsAreAMismatch) {
  // default has r=8, other r=4: the ranks reduce-scatter different element counts.
  RunResult r = simulate(seed000_header(2, "patched") + "@1 set_adapter other\ntrain_step\ntrain_step\n");
  EXPECT_TRUE(r.mismatch);
  const Observation& o0 = obs_at(r, 2, 0);
  EXPECT_EQ(o0.status, Status::Mismatch);
  EXPECT_NE(o0.message.find("reduce_scatter(root, "), std::string::npos) << o0.message;
  EXPECT_EQ(obs_at(r, 2, 1).status, Status::Mismatch);
  // Nothing runs after a mismatch.
  for (const auto& o : r.observations) EXPECT_LT(o.step, 3);
}

TEST(Simulator, SameSizeOfAnotherGroupIsCrossPaired) {
  // gloo pairs by op and bytes: both all-gathers complete, each copy holding the peer's other layer.
  const std::string head =
      "world 2\nlayer lin0 8 8\nlayer lin1 8 8\nadapter a r=2 alpha=4 targets=lin0,lin1\n"
      "fully_shard lin0\nfully_shard lin1\nfully_shard root\n---\n";
  RunResult r = simulate(head + "@0 unshard lin0\n@1 unshard lin1\n");
  EXPECT_FALSE(r.mismatch);
  const Observation& o0 = obs_at(r, 1, 0);
  EXPECT_EQ(o0.status, Status::Ok);
  EXPECT_EQ(o0.message.rfind("cross-paired: rank 0 in all_gather(lin0, 52) of lin0.weight,", 0), 0u) << o0.message;
  EXPECT_NE(o0.message.find("rank 1 in all_gather(lin1, 52) of lin1.weight,"), std::string::npos) << o0.message;
  EXPECT_EQ(obs_at(r, 2, 1).message, o0.message);
  EXPECT_EQ(o0.layers[0].registered, WeightClass::Corrupt);  // the unsharded copy holds lin1's rows
  EXPECT_EQ(o0.layers[0].stored, WeightClass::Exact);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].spec, "S5");
  // Other bytes: gloo aborts the rank that receives more than it posted.
  std::string other = head;
  other.replace(other.find("layer lin1 8 8"), 14, "layer lin1 8 6");
  RunResult m = simulate(other + "@0 unshard lin0\n@1 unshard lin1\n");
  EXPECT_TRUE(m.mismatch);
  EXPECT_EQ(obs_at(m, 1, 0).status, Status::Mismatch);
}

TEST(Simulator, AnotherOpIsAHangNotAMismatch) {
  // gloo never pairs an all-gather with a reduce-scatter: both ranks wait out its timeout
  // (measured, docs/design/upstream-backend.md), whatever the sizes.
  const std::string head =
      "world 2\nlayer lin0 8 8\nlayer lin1 8 8\nadapter a r=2 alpha=4 targets=lin0,lin1\n"
      "fully_shard lin0 reshard_after_forward=false\nfully_shard lin1 reshard_after_forward=false\n"
      "fully_shard root reshard_after_forward=false\n---\n";
  RunResult r = simulate(head + "forward\n@0 reshard lin0\n@0 unshard lin0\n@1 backward\n");
  EXPECT_TRUE(r.hang);
  EXPECT_FALSE(r.mismatch);
  const Observation& o = obs_at(r, 3, 0);
  EXPECT_EQ(o.status, Status::Hang);
  EXPECT_EQ(o.message, "hang: rank 0 in all_gather(lin0, 52) at step 3; rank 1 in reduce_scatter(lin1, 16) at step 4");
  EXPECT_EQ(obs_at(r, 4, 1).status, Status::Hang);
}

TEST(Simulator, AFailingRankLeavesItsPeerWaitingInTheReduceScatter) {
  // Rank 1 freezes everything (disable), so its backward raises no_grad_fn and
  // never joins the reduce-scatter rank 0 issues.
  RunResult r = simulate(seed000_header(2, "patched") + "@1 disable_enter\ntrain_step\n");
  EXPECT_EQ(obs_at(r, 2, 1).status, Status::NoGradFn);
  EXPECT_EQ(obs_at(r, 2, 0).status, Status::Hang);
}

TEST(Simulator, SameSequenceSameTraceHash) {
  std::string text = seed000_header(2) + "eval\nmerge\nset_adapter other\ntrain_step\ntrain_step\n";
  RunResult a = simulate(text), b = simulate(text);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_EQ(a.observations, b.observations);
  RunResult c = simulate(seed000_header(2, "patched") + "eval\nmerge\nset_adapter other\ntrain_step\ntrain_step\n");
  EXPECT_NE(a.trace_hash, c.trace_hash);
  for (const auto& f : a.findings) EXPECT_NE(f.spec, "S8");
}

TEST(Simulator, RunWithoutObservationsIsDeterministicToo) {
  SeqFile f = parse_seq(seed000_header(2) + "eval\nmerge\nset_adapter other\ntrain_step\ntrain_step\n");
  Topology topo = compile_topology(f);
  Simulator sim(topo);
  RunOptions fast;
  fast.observe = false;
  RunResult a = sim.run(f.ops, fast), b = sim.run(f.ops, fast);
  EXPECT_EQ(a.trace_hash, b.trace_hash);
  EXPECT_TRUE(a.observations.empty());
  EXPECT_EQ(a.rank_ops, 10);
  RunResult full = sim.run(f.ops);
  EXPECT_EQ(full.observations.size(), 10u);
}

// The hunt's, the shrinker's and the fuzzer's loops run run_checked_sampled: its light run
// (no observation hash, S8 on one sequence in 16, the spec's fields only) must see what
// run_checked sees.
TEST(Simulator, SampledRunSeesWhatTheCheckedRunSees) {
  int with_findings = 0;
  for (int world = 1; world <= 4; ++world)
    for (uint64_t s = 1; s <= 300; ++s) {
      GenOptions g;
      g.world = world;
      g.checkpoint_percent = 15;
      Prng rng(s * 11 + static_cast<uint64_t>(world));
      SeqFile f = generate_seq(rng, g);
      RunResult full = run_checked(f);
      // The light run leaves out what no spec check reads (RunOptions::spec_fields_only).
      std::vector<Observation> spec_fields = full.observations;
      for (Observation& o : spec_fields) o.collectives.clear(), o.sharded_bytes.clear(), o.peak_unsharded.clear();
      for (uint32_t every : {1u, 16u}) {
        RunResult light = run_checked_sampled(f, every);
        ASSERT_EQ(light.observations, spec_fields) << print_seq(f);
        ASSERT_EQ(light.findings.size(), full.findings.size()) << print_seq(f);
        for (size_t i = 0; i < full.findings.size(); ++i) {
          EXPECT_EQ(light.findings[i].spec, full.findings[i].spec);
          EXPECT_EQ(light.findings[i].step, full.findings[i].step);
          EXPECT_EQ(light.findings[i].rank, full.findings[i].rank);
          EXPECT_EQ(light.findings[i].kind, full.findings[i].kind);
          EXPECT_EQ(light.findings[i].text, full.findings[i].text);
        }
        recycle(std::move(light));
      }
      with_findings += !full.findings.empty();
    }
  EXPECT_GT(with_findings, 100);  // the comparison covers findings, not only clean runs
}

// compile_topology_reused keeps the last file's topology while the next one's scenario and the
// ops' effects on it (adapters added before an explicit prepare, their order) are the same:
// files that share a scenario but not those effects must each run as on a fresh compile.
TEST(Simulator, AReusedTopologyRunsAsAFreshlyCompiledOne) {
  int explicit_prepare = 0;
  for (int world = 1; world <= 4; ++world)
    for (uint64_t s = 1; s <= 60; ++s) {
      GenOptions g;
      g.world = world;
      Prng rng(s * 7 + static_cast<uint64_t>(world));
      SeqFile f = generate_seq(rng, g);
      SeqFile other = generate_seq(rng, g);
      for (int k = 0; k < 8; ++k) {
        SeqFile v = f;  // the same scenario, other ops: with or without a prepare, adapters loaded before it
        v.ops = generate_ops(rng, f.scenario, g);
        explicit_prepare += prepare_index(v) >= 0;
        if (k % 3 == 2) compile_topology_reused(other);  // now and then another scenario in between
        const Topology& topo = compile_topology_reused(v);
        RunResult a = run_checked_sampled(v, topo, 1), b = run_checked_sampled(v, 1);
        ASSERT_EQ(a.observations, b.observations) << print_seq(v);
        ASSERT_EQ(a.findings.size(), b.findings.size()) << print_seq(v);
        for (size_t i = 0; i < a.findings.size(); ++i) EXPECT_EQ(a.findings[i].text, b.findings[i].text) << print_seq(v);
      }
    }
  EXPECT_GT(explicit_prepare, 100);  // files whose ops change what the topology holds at prepare
  // An adapter loaded and deleted before prepare: the same adapters at fully_shard, in the same
  // order, but its LoRA layer was injected before FSDP wrapped lin1 (LayerInfo::lora_after_fsdp).
  const std::string scenario =
      "world 2\nlayer lin0 4 4\nlayer lin1 4 2\nadapter default r=2 alpha=2 targets=lin0\n"
      "adapter other r=2 alpha=2 targets=lin1 deferred\nfully_shard lin1\nfully_shard root\n---\n";
  const SeqFile early = parse_seq(scenario + "load_adapter other trainable\ndelete_adapter other\nprepare\n", "<early>");
  const SeqFile late = parse_seq(scenario + "prepare\n", "<late>");
  EXPECT_TRUE(compile_topology_reused(early).layers[1].lora_after_fsdp == compile_topology(early).layers[1].lora_after_fsdp);
  EXPECT_TRUE(compile_topology_reused(late).layers[1].lora_after_fsdp == compile_topology(late).layers[1].lora_after_fsdp);
  EXPECT_NE(compile_topology(early).layers[1].lora_after_fsdp, compile_topology(late).layers[1].lora_after_fsdp);
}

// Under a mixed_precision policy a collective's observation names its wire dtype (the all-gather
// casts to param_dtype, the reduce-scatter runs in reduce_dtype); without one it stays fp32.
TEST(Simulator, PolicyCollectivesObserveTheirWireDtype) {
  const std::string head =
      "world 2\nseed 3\nlayer lin0 8 6\nlayer lin1 6 4\nadapter default r=2 alpha=4 targets=lin0,lin1 init=random\n"
      "fully_shard lin0 reshard_after_forward=true\nfully_shard root reshard_after_forward=true\noptimizer trainable\n";
  auto dtypes = [](const RunResult& r) {
    std::set<std::pair<CollOp, DType>> seen;
    for (const auto& c : obs_at(r, 1, 0).collectives) seen.insert({c.op, c.dtype});
    return seen;
  };
  RunResult mp = simulate(head + "mixed_precision param_dtype=bf16 reduce_dtype=fp32\n---\ntrain_step\n");
  EXPECT_EQ(dtypes(mp), (std::set<std::pair<CollOp, DType>>{{CollOp::AllGather, DType::BF16}, {CollOp::ReduceScatter, DType::F32}}));
  RunResult plain = simulate(head + "dtype bf16 autocast_adapter_dtype=false\n---\ntrain_step\n");
  ASSERT_FALSE(dtypes(plain).empty());
  for (const auto& [op, dtype] : dtypes(plain)) EXPECT_EQ(dtype, DType::F32) << coll_op_name(op);
}
