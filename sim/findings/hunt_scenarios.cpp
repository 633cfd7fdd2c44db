#include "sim/findings/hunt_scenarios.hpp"

#include "sim/core/builtin_scenarios.hpp"
#include "sim/core/explore.hpp"
#include "sim/core/memory_use.hpp"

namespace fsdpsim {

std::vector<NamedScenario> hunt_scenarios() {
  std::vector<NamedScenario> out;
  for (const auto& b : builtin_scenarios()) out.push_back({b.name, b.file});
  return out;
}

// The explorer from the scenario's setup (its ops up to an explicit prepare),
// breadth-first to depth 6 or until `seconds` run out, core alphabet, every
// op on every rank (rank-divergent misuse is left to the fuzzing): the
// shortest sequence of each finding class it reaches.
ExploreHook hunt_explore_hook() {
  return [](const SeqFile& scenario, double seconds, int64_t max_states) {
    SeqFile setup = scenario;
    const int p = prepare_index(scenario);
    setup.ops.resize(p >= 0 ? static_cast<size_t>(p) + 1 : 0);
    ExploreOptions opt;
    opt.depth = 6;
    opt.max_seconds = seconds;
    if (max_states > 0) opt.max_states = max_states;
    opt.max_bytes = default_memory_budget();  // the hunt's explorer under the same memory cap as `explore`
    std::vector<SeqFile> out;
    for (auto& c : explore(setup, opt).classes) out.push_back(std::move(c.file));
    return out;
  };
}

}  // namespace fsdpsim
