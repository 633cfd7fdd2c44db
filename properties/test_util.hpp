// Shared helpers for the tests: build a scenario from `.seq` text and run ops
// on one rank model or through the simulator.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "model/machine/rank_model.hpp"
#include "model/vocab/seq.hpp"
#include "sim/core/simulator.hpp"

namespace fsdpsim::test {

// Seed 000's topology with the given world, profile and reshard_after_forward.
inline std::string seed000_header(int world = 1, const std::string& profile = "upstream", const std::string& raf = "false") {
  return "world " + std::to_string(world) + "\nprofile " + profile +
         "\nlayer lin0 10 20\nlayer lin1 20 2\n"
         "adapter default r=8 alpha=8 targets=lin0,lin1\n"
         "adapter other r=4 alpha=8 targets=lin0,lin1\n"
         "fully_shard lin0 reshard_after_forward=" + raf + "\nfully_shard root reshard_after_forward=" + raf + "\n---\n";
}

// One rank model over a scenario; `op("merge")` parses and applies one op line,
// which must end ok (a setup op that raised would leave another state than the
// test reads); an op the test means to raise goes through op_may_raise. Every rank
// of the scenario's world runs it in a simulator, so the collectives pair up and a
// shard merge settles as in every simulated run (there is no lone-rank path).
struct OneRank {
  SeqFile file;
  std::unique_ptr<Topology> topo;
  std::unique_ptr<Simulator> sim;
  const RankModel* model = nullptr;  // the simulator's rank `rank`
  int steps = 0;
  explicit OneRank(const std::string& header, int rank = 0) {
    file = parse_seq(header, "<test>");
    topo = std::make_unique<Topology>(compile_topology(file));
    sim = std::make_unique<Simulator>(*topo);
    model = &sim->ranks().at(rank);
  }
  Op parse_op(const std::string& line) const { return parse_seq(print_scenario(file.scenario) + "---\n" + line + "\n", "<test>").ops.at(0); }
  const OpResult& op(const std::string& line) {
    const OpResult& r = op_may_raise(line);
    EXPECT_TRUE(r.status == Status::Ok) << line << " raised " << status_name(r.status) << ": " << r.message;
    return r;
  }
  const OpResult& op_may_raise(const std::string& line) {
    RunOptions no_observations;
    no_observations.observe = false;
    sim->run_more({parse_op(line)}, steps++, no_observations);
    return model->result();
  }
  int param(const std::string& name) const {
    for (size_t p = 0; p < topo->params.size(); ++p)
      if (topo->params[p].name == name) return static_cast<int>(p);
    return -1;
  }
  int group(const std::string& name) const {
    for (size_t g = 0; g < topo->groups.size(); ++g)
      if (topo->groups[g].name == name) return static_cast<int>(g);
    return -1;
  }
  const FsdpParam& ps(const std::string& name) const { return model->state().params.at(param(name)); }
  ShardedState state(const std::string& g) const { return model->state().groups.at(group(g)).sharded; }
  int layer(const std::string& name) const { return topo->layer_index(name); }
};

// What each rank's save_adapters lists in corpus/regressions/add_adapter_raised_half_added_saved_per_adapter.seq:
// the tensors the refused add_adapter left in lin1 are in default's and b's dicts (step 2), then
// in default's alone (step 3).
inline std::vector<SavedObs> half_added_saved(bool both) {
  if (both)
    return {{"lin1.lora_A.default", 1, 1, DType::F32}, {"lin1.lora_A.b", 1, 1, DType::F32},
            {"lin1.lora_A.other", 2, 2, DType::F32},   {"lin1.lora_A.other", 2, 2, DType::F32},
            {"lin1.lora_B.default", 4, 4, DType::F32}, {"lin1.lora_B.b", 4, 4, DType::F32},
            {"lin1.lora_B.other", 4, 4, DType::F32},   {"lin1.lora_B.other", 4, 4, DType::F32}};
  return {{"lin1.lora_A.default", 1, 1, DType::F32}, {"lin1.lora_A.other", 2, 2, DType::F32},
          {"lin1.lora_B.default", 4, 4, DType::F32}, {"lin1.lora_B.other", 4, 4, DType::F32}};
}

// Parses a whole file and runs it through the simulator (twice, S8).
inline RunResult simulate(const std::string& text, SeqFile* out = nullptr) {
  SeqFile f = parse_seq(text, "<test>");
  RunResult r = run_checked(f);
  if (out) *out = f;
  return r;
}

inline const Observation& obs_at(const std::vector<Observation>& obs, int step, int rank) {
  for (const auto& o : obs)
    if (o.step == step && o.rank == rank) return o;
  throw std::runtime_error("no observation for step " + std::to_string(step) + " rank " + std::to_string(rank));
}

inline const Observation& obs_at(const RunResult& r, int step, int rank) { return obs_at(r.observations, step, rank); }

}  // namespace fsdpsim::test
