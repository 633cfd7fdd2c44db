#include "sim/core/default_scenario.hpp"

#include "sim/core/builtin_texts.hpp"

namespace fsdpsim {

// sim/core/builtin/seed000_merged_raf_false.seq: seed 000 (peft#3872) at world 2.
const char* const kDefaultScenario = kBuiltin_seed000_merged_raf_false;

}  // namespace fsdpsim
