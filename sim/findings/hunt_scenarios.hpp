// What the hunt runs over: the built-in scenarios, and the explorer as the
// hunt's ExploreHook.
#pragma once
#include <vector>

#include "sim/findings/hunt.hpp"

namespace fsdpsim {

std::vector<NamedScenario> hunt_scenarios();
ExploreHook hunt_explore_hook();

}  // namespace fsdpsim
