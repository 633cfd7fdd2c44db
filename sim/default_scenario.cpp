#include "sim/default_scenario.hpp"

namespace fsdpsim {

const char* const kDefaultScenario = R"(# seed 000 (peft#3872): set_adapter on a merged model, reshard_after_forward=false
world 2
seed 0
profile upstream
layer lin0 10 20
layer lin1 20 2
adapter default r=8 alpha=8 targets=lin0,lin1 init=random
adapter other r=8 alpha=8 targets=lin0,lin1 init=random
fully_shard lin0 reshard_after_forward=false
fully_shard root reshard_after_forward=false
optimizer trainable
---
eval
merge
set_adapter other
train_step
train_step
train_step
)";

}  // namespace fsdpsim
