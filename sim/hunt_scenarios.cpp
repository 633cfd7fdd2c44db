#include "sim/hunt_scenarios.hpp"

#include "sim/builtin_scenarios.hpp"

namespace fsdpsim {

std::vector<NamedScenario> hunt_scenarios() {
  std::vector<NamedScenario> out;
  for (const auto& b : builtin_scenarios()) out.push_back({b.name, b.file});
  return out;
}

// The explorer is not built in yet: the hunt fuzzes only.
ExploreHook hunt_explore_hook() { return {}; }

}  // namespace fsdpsim
