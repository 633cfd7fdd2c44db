// The `model` scenario line: a transformers causal-LM family and the sizes its config is built
// with (AutoModelForCausalLM.from_config), in place of `layer` lines (docs/guide/seq-format.md,
// "Real models"). The module tree it stands for is module_tree.hpp's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/source_error.hpp"

namespace fsdpsim {

enum class Family : uint8_t { Llama, Qwen2, Mistral, Gpt2, Qwen2Moe };
const char* family_name(Family f);
bool family_from_name(const std::string& s, Family* out);
const std::vector<std::string>& family_names();

struct ModelDecl {
  Family family = Family::Llama;
  int hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, vocab = 0;
  // Resolved at parse time to the family config's default when the line omits it (gpt2 ties,
  // the others do not), so the printed line spells it out and parses back the same.
  bool tie_embeddings = false;
  int experts = 0, top_k = 0;  // qwen2_moe only: num_experts, num_experts_per_tok
  int seq_len = 16;            // the token-id batches' length
  SourcePos pos;
  bool operator==(const ModelDecl& o) const {
    return family == o.family && hidden == o.hidden && intermediate == o.intermediate && layers == o.layers &&
           heads == o.heads && kv_heads == o.kv_heads && vocab == o.vocab && tie_embeddings == o.tie_embeddings &&
           experts == o.experts && top_k == o.top_k && seq_len == o.seq_len;
  }
};

// `fully_shard_plan`: the fully_shard calls a recipe makes instead of explicit `fully_shard` lines.
// TransformerLayers: accelerate's transformer-class auto-wrap (each decoder layer a unit, then the
// root); LoraModules: PEFT's fsdp_auto_wrap_policy, each LoRA submodule its own unit as well.
enum class ShardPlan : uint8_t { None, TransformerLayers, LoraModules };
const char* shard_plan_name(ShardPlan p);

}  // namespace fsdpsim
