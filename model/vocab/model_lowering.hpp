// A `model` scenario lowered to what the model's machine runs: the modules of the transformers
// tree that own parameters become its layers (dotted names, module order), adapters' targets=
// the modules PEFT wraps, and each fully_shard call (written, or made by `fully_shard_plan`) the
// layers it claims. No torch here; the upstream backend builds the real model instead
// (real_backend/upstream/fsdpsim_upstream/model_config.py) and observes the same names.
#pragma once
#include <string>

#include "model/vocab/scenario.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

// The most lowered modules a scenario may have: the spec's held-weight checker reports a rank's
// layers in one uint32_t (model/spec/s2_held_weight_checker.hpp). A 3-layer llama has 30.
constexpr int kMaxModelModules = 32;

// Lowers s (s.model set) in place: s.layers become the modules that own parameters (dotted names,
// module order, from module_tree.hpp), each adapter's targets the modules PEFT wraps (resolve_targets),
// and s.shards the calls made, each given the layers it claims (bottom-up: what an earlier call
// claimed is not claimed again), preceded by its first written path where that is not itself a
// layer, so that its group is named after that path (model/machine/topology.cpp names a group
// after its call's first module). `fully_shard_plan transformer_layers` becomes accelerate's calls.
// Returns why the machine cannot run it yet ("" when it can), with the line in *at: qwen2_moe's
// experts, the lora_modules plan, LoRA submodules as units, a tied output head as a target, a call
// that claims no parameters; past a refusal it lowers what it can. The parser lowers a copy for
// the names its ops and expectations take (s.layers), leaving the refusals to the commands that
// run the file (sim/core/crosscheck.cpp model_refusal); the file as written (targets, fully_shard
// paths, the plan) is what prints.
std::string lower_model(Scenario& s, SourcePos* at);

// f with its scenario lowered where it has a `model` line (model_refusal said nothing), else f.
SeqFile lowered_file(const SeqFile& f);

// A lowered layer's shape facts the LayerDecl does not carry: its module has a bias, and its
// weight is stored (in, out) (transformers pytorch_utils.py::Conv1D). Layer scenarios: true, false.
// `sharded_call_op`: the aten op that raises when the module runs on a plain input while its
// parameters are the sharded DTensors (no FSDP pre-forward unsharded them: PeftModel.generate
// skips the root unit's hooks), torch distributed/tensor/_dispatch.py::OpDispatcher.unwrap_to_op_info;
// measured per module class on torch 2.13 ("" for layer scenarios).
struct ModuleShape {
  bool bias = true;
  bool transposed = false;
  std::string sharded_call_op;
};
ModuleShape module_shape(const Scenario& s, const std::string& layer);

// name is the module at dotted path `path` or one under it ("model.layers.1.mlp" under "model.layers.1").
bool under_module(const std::string& name, const std::string& path);

// The lowered layer whose weight a tied output head shares (tie_embeddings=true: the input
// embedding, which the lowering keeps once), or "" where nothing is tied. Module.state_dict()
// still lists that Parameter under the head's key as well (torch nn/modules/module.py::
// Module._save_to_state_dict, per module, no dedup), the last key of a causal LM's dict.
std::string tied_head_source(const Scenario& s);

}  // namespace fsdpsim
