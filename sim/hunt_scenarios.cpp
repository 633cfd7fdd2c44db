#include "sim/hunt_scenarios.hpp"

#include "sim/default_scenario.hpp"

namespace fsdpsim {

std::vector<NamedScenario> hunt_scenarios() { return {{"seed000", parse_seq(kDefaultScenario, "<built-in seed000>")}}; }

ExploreHook hunt_explore_hook() { return {}; }

}  // namespace fsdpsim
