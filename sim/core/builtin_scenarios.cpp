#include "sim/core/builtin_scenarios.hpp"

#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "sim/core/builtin_texts.hpp"

namespace fsdpsim {
namespace {

// Each built-in scenario's name and one line saying what it covers; its text is
// sim/core/builtin/NAME.seq (compiled in by sim/core/builtin_texts.cmake), whose header
// follows the corpus file its comment names, so a scenario's seed sequence is the
// one the corpus checks against the real libraries. Listed in this order.
struct Source {
  const char* name;
  const char* description;
};

const Source kSources[] = {
    {"seed000_merged_raf_false",
     "seed 000 (peft#3872): merge, then set_adapter, with reshard_after_forward=false groups left unsharded"},
    {"seed001_ram_efficient_bf16",
     "seed 001 (peft#2834): a second adapter loaded under ram-efficient loading, bf16 base, prepare's broadcasts"},
    {"seed001_frozen_adapters",
     "seed 001's workaround: both adapters loaded frozen with full loading, nothing on the forward path trains"},
    {"seed002_experts",
     "seed 002 (peft#3080): ParamWrapper get_delta_weight and merge on a sharded experts parameter (E=2)"},
    {"seed003_two_adapters",
     "seed 003: two adapters trained in turn, saved and reloaded; a switch on one rank only cross-pairs collectives"},
    {"seed004_eval_optimizer",
     "seed 004: an optimizer checkpoint after a no_grad eval leaves the root group (holding vis) unsharded"},
    {"raf_false_groups",
     "child groups with reshard_after_forward false and true under a false root; a zero-init adapter on part of the layers"},
    {"added_after_shard_bf16",
     "a bf16 base with an adapter added after fully_shard (unmanaged by FSDP) next to a managed one"},
    {"late_adapter_per_rank_data",
     "beyond-seeds B1: an adapter added after fully_shard (no group reduces its grads), trained on per-rank batches"},
    {"mixed_dtype_adapters",
     "beyond-seeds B2: bf16 base, an fp32 (autocast) and a bf16 (autocast=false) adapter made trainable together in one group"},
    {"three_ranks_padding",
     "three ranks, dims that do not divide by three (a rank holds padding rows), two adapters"},
    {"b6_unsynced_accumulation",
     "hazard B6: a micro-batch with gradient sync off, set_adapter, then a synced step that also reduces the kept U grads"},
    {"b7_activation_checkpoint",
     "hazard B7: lin0 in checkpoint_wrapper; set_adapter to an adapter of another r between forward and backward"},
    {"b8_modules_to_save",
     "hazard B8: lin1 in modules_to_save (a trainable copy per adapter) in a reshard_after_forward=false group, set_adapter after an eval"},
};

const char* text_of(const char* name) {
  for (int i = 0; i < kBuiltinTextCount; ++i)
    if (std::strcmp(kBuiltinTexts[i].name, name) == 0) return kBuiltinTexts[i].text;
  throw std::logic_error(fmt::format("built-in scenario {} has no sim/core/builtin/{}.seq", name, name));
}

}  // namespace

const std::vector<BuiltinScenario>& builtin_scenarios() {
  static const std::vector<BuiltinScenario> all = [] {
    std::vector<BuiltinScenario> v;
    for (const Source& s : kSources)
      v.push_back({s.name, s.description, parse_seq(text_of(s.name), fmt::format("<built-in {}>", s.name))});
    if (v.size() != static_cast<size_t>(kBuiltinTextCount))
      throw std::logic_error("a sim/core/builtin/*.seq file that no built-in scenario names");
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
