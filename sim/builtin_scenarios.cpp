#include "sim/builtin_scenarios.hpp"

#include <fmt/format.h>

#include "sim/default_scenario.hpp"

namespace fsdpsim {
namespace {

struct Source {
  const char* name;
  const char* description;
  const char* text;  // a .seq file (its op part may be empty)
};

// Headers follow the corpus files named in each comment, so a scenario's
// seed sequence is the one the corpus checks against the real libraries.
const Source kSources[] = {
    {"seed000_merged_raf_false",
     "seed 000 (peft#3872): merge, then set_adapter, with reshard_after_forward=false groups left unsharded",
     kDefaultScenario},  // corpus/regressions/seed000_merged_set_adapter_w2.seq
    {"seed001_ram_efficient_bf16",
     "seed 001 (peft#2834): a second adapter loaded under ram-efficient loading, bf16 base, prepare's broadcasts",
     R"(# seed 001: corpus/regressions/seed001_ram_efficient_upstream.seq
world 2
seed 1
profile upstream
layer lin0 8 8
layer lin1 8 4
adapter reference r=4 alpha=8 targets=lin0,lin1 init=random inference_mode
adapter policy r=4 alpha=8 targets=lin0,lin1 init=random deferred
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=none
optimizer trainable
loading ram_efficient
dtype bf16 autocast_adapter_dtype=false
---
load_adapter policy frozen
set_adapter [reference,policy]
prepare
train_step
)"},
    {"seed001_frozen_adapters",
     "seed 001's workaround: both adapters loaded frozen with full loading, nothing on the forward path trains",
     R"(# seed 001: corpus/regressions/seed001_full_loading_frozen.seq
world 2
seed 1
profile upstream
layer lin0 8 8
layer lin1 8 4
adapter reference r=4 alpha=8 targets=lin0,lin1 init=random inference_mode
adapter policy r=4 alpha=8 targets=lin0,lin1 init=random deferred
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=none
optimizer trainable
---
load_adapter policy frozen
prepare
train_step
)"},
    {"seed002_experts",
     "seed 002 (peft#3080): ParamWrapper get_delta_weight and merge on a sharded experts parameter (E=2)",
     R"(# seed 002: corpus/regressions/seed002_experts_delta_upstream.seq
world 2
seed 2
profile upstream
layer lin0 8 8
layer moe 8 4 experts=2
adapter default r=3 alpha=6 targets=lin0,moe init=random
fully_shard moe reshard_after_forward=true
fully_shard root reshard_after_forward=true
optimizer trainable
---
train_step
delta_weight moe
merge
reshard
unmerge
)"},
    {"seed003_two_adapters",
     "seed 003: two adapters trained in turn, saved and reloaded; a switch on one rank only cross-pairs collectives",
     R"(# seed 003: corpus/regressions/seed003_rank_divergent_switch.seq
world 2
seed 3
profile upstream
layer lin0 8 8
layer lin1 8 4
adapter a r=4 alpha=8 targets=lin0,lin1 init=random
adapter b r=4 alpha=8 targets=lin0,lin1 init=random
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=true
optimizer trainable
---
train_step
@1 set_adapter b
train_step
)"},
    {"seed004_eval_optimizer",
     "seed 004: an optimizer checkpoint after a no_grad eval leaves the root group (holding vis) unsharded",
     R"(# seed 004: corpus/regressions/seed004_eval_then_save_optimizer.seq
world 2
seed 0
profile upstream
layer vis 8 8
layer lin0 8 16
layer lin1 16 2
adapter default r=4 alpha=8 targets=vis,lin0,lin1 init=random
fully_shard lin0 reshard_after_forward=true
fully_shard lin1 reshard_after_forward=true
fully_shard root reshard_after_forward=none
optimizer trainable
---
train_step
save_optimizer
eval
save_optimizer
load_optimizer
)"},
    {"raf_false_groups",
     "child groups with reshard_after_forward false and true under a false root; a zero-init adapter on part of the layers",
     R"(# the issue's patched-profile class: merge, an eval leaving a raf=false group unsharded, set_adapter
world 2
seed 5
profile upstream
layer lin0 8 8
layer lin1 8 8
layer lin2 8 4
adapter default r=4 alpha=8 targets=lin0,lin1,lin2 init=random
adapter other r=4 alpha=8 targets=lin1,lin2 init=zero
fully_shard lin0 reshard_after_forward=false
fully_shard lin1 reshard_after_forward=true
fully_shard root reshard_after_forward=false
optimizer trainable
---
merge
eval
set_adapter other
train_step
)"},
    {"added_after_shard_bf16",
     "a bf16 base with an adapter added after fully_shard (unmanaged by FSDP) next to a managed one",
     R"(# beyond the seeds: adapters added after fully_shard, bf16 base weights
world 2
seed 6
profile upstream
layer lin0 8 8
layer lin1 8 4
adapter default r=4 alpha=8 targets=lin0,lin1 init=zero
adapter late r=4 alpha=8 targets=lin0 init=random deferred
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=true
optimizer trainable
dtype bf16
---
add_adapter late
set_adapter late
train_step
)"},
    {"late_adapter_per_rank_data",
     "beyond-seeds B1: an adapter added after fully_shard (no group reduces its grads), trained on per-rank batches",
     R"(# beyond the seeds B1: corpus/regressions/late_adapter_per_rank_replicas.seq
world 2
seed 8
profile upstream
layer lin0 8 8
layer lin1 8 4
adapter default r=4 alpha=8 targets=lin0,lin1 init=zero
adapter late r=4 alpha=8 targets=lin0,lin1 init=zero deferred
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=true
optimizer trainable
data per_rank
---
add_adapter late
set_adapter late
new_optimizer
train_step
train_step
save_adapters
load_adapters
)"},
    {"mixed_dtype_adapters",
     "beyond-seeds B2: bf16 base, an fp32 (autocast) and a bf16 (autocast=false) adapter made trainable together in one group",
     R"(# beyond the seeds: corpus/regressions/mixed_dtype_adapters_trainable_at_lazy_init.seq
world 2
seed 5
profile upstream
layer lin0 8 6
layer lin1 6 4
adapter default r=2 alpha=4 targets=lin0,lin1 init=random
adapter other r=2 alpha=4 targets=lin0,lin1 init=random autocast=false
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=true
optimizer trainable
dtype bf16
---
set_adapter [default,other]
train_step
)"},
    {"three_ranks_padding",
     "three ranks, dims that do not divide by three (a rank holds padding rows), two adapters",
     R"(# beyond the seeds: world 3, uneven shards
world 3
seed 7
profile upstream
layer lin0 8 5
layer lin1 5 4
adapter a r=2 alpha=4 targets=lin0,lin1 init=random
adapter b r=2 alpha=4 targets=lin0,lin1 init=random
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=false
optimizer trainable
---
train_step
set_adapter b
merge
train_step
)"},
    {"b6_unsynced_accumulation",
     "hazard B6: a micro-batch with gradient sync off, set_adapter, then a synced step that also reduces the kept U grads",
     R"(# beyond the seeds: corpus/regressions/unsynced_grad_carried_to_set_adapter.seq
world 2
seed 0
profile upstream
layer lin0 10 20
layer lin1 20 2
adapter default r=8 alpha=8 targets=lin0,lin1 init=random
adapter other r=8 alpha=8 targets=lin0,lin1 init=random
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=true
optimizer trainable
---
gradient_sync off
train_step
set_adapter other
gradient_sync on
train_step
)"},
    {"b7_activation_checkpoint",
     "hazard B7: lin0 in checkpoint_wrapper; set_adapter to an adapter of another r between forward and backward",
     R"(# beyond the seeds: corpus/regressions/checkpoint_error_wedges_later_training.seq
world 2
seed 0
profile upstream
layer lin0 10 20
layer lin1 20 2
adapter default r=8 alpha=8 targets=lin0,lin1 init=random
adapter other r=4 alpha=8 targets=lin0,lin1 init=random
fully_shard lin0 reshard_after_forward=true
fully_shard root reshard_after_forward=true
optimizer trainable
checkpoint lin0
---
forward
set_adapter other
backward
train_step
)"},
    {"b8_modules_to_save",
     "hazard B8: lin1 in modules_to_save (a trainable copy per adapter) in a reshard_after_forward=false group, set_adapter after an eval",
     R"(# beyond the seeds: corpus/regressions/modules_to_save_set_adapter_on_unsharded_copy.seq
world 2
seed 5
profile upstream
layer lin0 6 8
layer lin1 8 3
adapter a r=2 alpha=2 targets=lin0 modules_to_save=lin1
adapter b r=2 alpha=2 targets=lin0 modules_to_save=lin1
fully_shard lin0 reshard_after_forward=true
fully_shard lin1 reshard_after_forward=false
fully_shard root reshard_after_forward=true
optimizer trainable
---
eval
set_adapter b
train_step
train_step
)"},
};

}  // namespace

const std::vector<BuiltinScenario>& builtin_scenarios() {
  static const std::vector<BuiltinScenario> all = [] {
    std::vector<BuiltinScenario> v;
    for (const Source& s : kSources)
      v.push_back({s.name, s.description, parse_seq(s.text, fmt::format("<built-in {}>", s.name))});
    return v;
  }();
  return all;
}

const BuiltinScenario* find_builtin(const std::string& name) {
  for (const auto& b : builtin_scenarios())
    if (b.name == name) return &b;
  return nullptr;
}

std::string builtin_names() {
  std::string out;
  for (const auto& b : builtin_scenarios()) out += (out.empty() ? "" : ", ") + b.name;
  return out;
}

}  // namespace fsdpsim
