// Seed 003: what N adapters cost, from the model's observations.
#include <gtest/gtest.h>

#include "properties/test_util.hpp"
#include "sim/core/cost.hpp"

namespace fsdpsim::test {
namespace {

std::string two_adapters(const std::string& ops) {
  return "world 2\nlayer lin0 8 8\nlayer lin1 8 4\nadapter a r=4 alpha=8 targets=lin0,lin1\n"
         "adapter b r=4 alpha=8 targets=lin0,lin1\nfully_shard lin0 reshard_after_forward=true\n"
         "fully_shard root reshard_after_forward=true\n---\n" + ops;
}

const CostRow& row(const CostReport& r, int rank, const std::string& owner) {
  for (const auto& x : r.rows)
    if (x.rank == rank && x.owner == owner) return x;
  throw std::runtime_error("no row " + owner);
}

TEST(Cost, FrozenAdaptersAreGatheredButNotReduced) {
  SeqFile f;
  RunResult res = simulate(two_adapters("train_step\n"), &f);
  CostReport c = cost_report(f, res.observations);
  EXPECT_EQ(c.train_steps, 1);
  // a and b each: lin0 A (4x8) + B (8x4) + lin1 A (4x8) + B (4x4) = 112 floats, padded
  // shards of 2 rows: 16+16+16+8 = 56 floats = 224 bytes per rank.
  for (int rank : {0, 1}) {
    EXPECT_EQ(row(c, rank, "a").sharded, 224);
    EXPECT_EQ(row(c, rank, "b").sharded, 224);
    EXPECT_EQ(row(c, rank, "base").sharded, (4 * 8 + 4 + 2 * 8 + 2) * 4);  // lin0 8x8 + 8, lin1 4x8 + 4
    // Both groups reshard after forward, so backward gathers them again: 2 x 448.
    EXPECT_EQ(row(c, rank, "a").all_gather, 2 * 56 * 2 * 4);
    EXPECT_EQ(row(c, rank, "b").all_gather, 2 * 56 * 2 * 4);  // frozen, still gathered
    EXPECT_EQ(row(c, rank, "a").reduce_scatter, 56 * 2 * 4);
    EXPECT_EQ(row(c, rank, "b").reduce_scatter, 0);
    EXPECT_EQ(row(c, rank, "base").reduce_scatter, 0);
  }
}

// torch 2.13 issues no collective at world 1: 0 bytes gathered and reduced,
// while the unsharded copies still take memory.
TEST(Cost, WorldOneGathersAndReducesNothing) {
  SeqFile f;
  std::string text = two_adapters("train_step\n");
  RunResult res = simulate(text.replace(0, 7, "world 1"), &f);
  CostReport c = cost_report(f, res.observations);
  for (const char* owner : {"a", "b", "base", "total"}) {
    EXPECT_EQ(row(c, 0, owner).all_gather, 0) << owner;
    EXPECT_EQ(row(c, 0, owner).reduce_scatter, 0) << owner;
  }
  EXPECT_GT(row(c, 0, "total").peak_unsharded, 0);
  EXPECT_EQ(row(c, 0, "a").sharded, 112 * 4);  // the whole tensors: one rank holds every row
}

TEST(Cost, TwoActiveAdaptersBothReduceAndPeakCountsEveryGroup) {
  SeqFile f;
  RunResult res = simulate(two_adapters("set_adapter [a,b]\ntrain_step\n"), &f);
  EXPECT_EQ(*obs_at(res, 2, 0).grads, (std::vector<std::string>{"a", "b"}));
  CostReport c = cost_report(f, res.observations);
  EXPECT_EQ(row(c, 1, "b").reduce_scatter, 56 * 2 * 4);
  const CostRow& total = row(c, 0, "total");
  EXPECT_EQ(total.peak_unsharded, row(c, 0, "a").peak_unsharded + row(c, 0, "b").peak_unsharded + row(c, 0, "base").peak_unsharded);
  EXPECT_GT(row(c, 0, "a").peak_unsharded, 0);
}

TEST(Cost, ThreeAdaptersGatherMoreThanTwo) {
  std::string three = "world 2\nlayer lin0 8 8\nadapter a r=4 targets=lin0\nadapter b r=4 targets=lin0\n"
                      "adapter c r=4 targets=lin0\nfully_shard root\n---\ntrain_step\n";
  std::string two = "world 2\nlayer lin0 8 8\nadapter a r=4 targets=lin0\nadapter b r=4 targets=lin0\n"
                    "fully_shard root\n---\ntrain_step\n";
  SeqFile f3, f2;
  CostReport c3 = cost_report(f3, simulate(three, &f3).observations);
  CostReport c2 = cost_report(f2, simulate(two, &f2).observations);
  EXPECT_EQ(row(c3, 0, "total").all_gather - row(c2, 0, "total").all_gather, row(c3, 0, "c").all_gather);
  EXPECT_GT(row(c3, 0, "c").all_gather, 0);
}

TEST(Cost, CompareNamesEachDifferingCell) {
  SeqFile f;
  RunResult res = simulate(two_adapters("train_step\n"), &f);
  CostReport a = cost_report(f, res.observations), b = a;
  b.rows[1].all_gather += 4;
  EXPECT_EQ(compare_cost(a, b), (std::vector<std::string>{"rank 0 b all_gather: 896 vs 900"}));
  EXPECT_TRUE(compare_cost(a, a).empty());
}

// An owner the scenario does not declare (a backend naming a parameter it
// should not) is an error, not a row index past the table (the heap overflow
// of issue 11, where "c.d" split to "d").
TEST(Cost, AnUndeclaredOwnerIsAnErrorNotAnOverflow) {
  SeqFile f;
  RunResult res = simulate(two_adapters("train_step\n"), &f);
  std::vector<Observation> obs = res.observations;
  obs.back().sharded_bytes.push_back({"ghost", 64});
  EXPECT_THROW(cost_report(f, obs), std::runtime_error);
  // A collective part of an undeclared parameter counts for the base: only
  // declared adapter parameters have an adapter owner.
  obs = res.observations;
  for (auto& o : obs)
    for (auto& c : o.collectives)
      for (auto& p : c.parts)
        if (p.param == "lin0.lora_A.a") p.param = "lin0.lora_A.x.a";
  CostReport c = cost_report(f, obs);
  EXPECT_LT(row(c, 0, "a").all_gather, row(cost_report(f, res.observations), 0, "a").all_gather);
}

}  // namespace
}  // namespace fsdpsim::test
