// The built-in scenario set (sim/core/builtin_scenarios.cpp): every entry parses,
// names are unique and found by name, the seed entries replay their seed's
// finding, and the set covers the shapes the hunt promises to explore.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "sim/core/builtin_scenarios.hpp"
#include "sim/core/simulator.hpp"

using namespace fsdpsim;

namespace {
std::set<std::string> specs_of(const SeqFile& f) {
  std::set<std::string> out;
  for (const auto& x : run_checked(f).findings) out.insert(x.spec);
  return out;
}
}  // namespace

TEST(BuiltinScenarios, NamesAreUniqueAndFound) {
  std::set<std::string> names;
  for (const auto& b : builtin_scenarios()) {
    EXPECT_TRUE(names.insert(b.name).second) << b.name;
    EXPECT_EQ(find_builtin(b.name), &b);
    EXPECT_FALSE(b.description.empty()) << b.name;
    EXPECT_EQ(b.description.find('\n'), std::string::npos) << b.name;
  }
  EXPECT_EQ(find_builtin("no_such_scenario"), nullptr);
  EXPECT_NE(builtin_names().find("seed000_merged_raf_false"), std::string::npos);
}

// Each seed's sequence reaches the finding its corpus file expects.
TEST(BuiltinScenarios, SeedSequencesReproduceTheirFindings) {
  const std::map<std::string, std::set<std::string>> want = {
      {"seed000_merged_raf_false", {"S1", "S3"}},
      {"seed001_ram_efficient_bf16", {"S1", "S5"}},  // prepare part-fills rank 1; its train_step raises
      {"seed001_frozen_adapters", {}},  // no_grad_fn, by design of frozen adapters
      {"seed002_experts", {}},          // torch 2.13 redistributes: the delta is exact
      {"seed003_two_adapters", {"S5"}},
      {"seed004_eval_optimizer", {"S4"}},
      {"late_adapter_per_rank_data", {"S5", "S6"}},  // beyond-seeds B1: replicas apart, rank 0's copy saved
      {"b6_unsynced_accumulation", {"S1"}},  // the kept U grads reach `default` at the synced step
      {"mixed_dtype_adapters", {"S1"}},  // FSDP's uniform-dtype AssertionError at lazy init
      {"b7_activation_checkpoint", {"S1"}},  // after the CheckpointError FSDP reduces nothing again
  };
  for (const auto& [name, specs] : want) {
    const BuiltinScenario* b = find_builtin(name);
    ASSERT_NE(b, nullptr) << name;
    EXPECT_FALSE(b->file.ops.empty()) << name;
    EXPECT_EQ(specs_of(b->file), specs) << name;
  }
}

// The set spans what the hunt must cover beyond one model shape.
TEST(BuiltinScenarios, CoverExpertsLoadingDtypeReshardAndWorld) {
  bool experts = false, ram = false, bf16 = false, raf_false_child = false, deferred = false, world3 = false,
       per_rank = false;
  for (const auto& b : builtin_scenarios()) {
    const Scenario& s = b.file.scenario;
    EXPECT_GE(s.world, 2) << b.name;
    for (const auto& l : s.layers) experts = experts || l.experts > 0;
    ram = ram || s.loading == Loading::RamEfficient;
    bf16 = bf16 || s.dtype == DType::BF16;
    for (const auto& d : s.shards) raf_false_child = raf_false_child || (!d.is_root() && d.raf == Raf::False);
    for (const auto& a : s.adapters) deferred = deferred || a.deferred;
    world3 = world3 || s.world == 3;
    per_rank = per_rank || s.data == Data::PerRank;
    run_checked(b.file);  // every sequence runs to its end on the model
  }
  EXPECT_TRUE(experts && ram && bf16 && raf_false_child && deferred && world3 && per_rank);
}
