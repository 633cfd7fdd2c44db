// The built-in default scenario the main job runs: seed 000 (peft#3872) at world 2.
#pragma once

namespace fsdpsim {

extern const char* const kDefaultScenario;

}  // namespace fsdpsim
