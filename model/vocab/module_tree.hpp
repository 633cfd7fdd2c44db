// The module tree a `model` line stands for: what AutoModelForCausalLM.from_config builds for the
// family on the pinned transformers 5.24 (named_modules() and named_parameters(remove_duplicate=False),
// in their order, with class names, shapes and tied parameters), and which of its modules an
// adapter's `targets=` wraps, matched as PEFT's target_modules. No torch here: the upstream test
// properties/vocab/module_tree_test.py compares it with the real transformers model.
#pragma once
#include <string>
#include <vector>

#include "model/vocab/model_decl.hpp"

namespace fsdpsim {

// What a module is to PEFT's LoRA: Linear and Conv1D (transformers pytorch_utils.py, GPT-2's
// transposed Linear that PEFT wraps with fan_in_fan_out) are what `all-linear` selects;
// Embedding is a LoRA target of its own kind; the rest cannot be targeted.
enum class ModuleKind : uint8_t { Linear, Conv1D, Embedding, Other };

struct TreeModule {
  std::string name;  // "" for the root, as named_modules() lists it
  std::string type;  // the class name, type(module).__name__
  ModuleKind kind = ModuleKind::Other;
};

struct TreeParam {
  std::string name;
  std::vector<int> shape;
  std::string tied_to;  // the first name of the same Parameter object ("" if none): lm_head.weight under tie_embeddings
};

struct ModuleTree {
  std::vector<TreeModule> modules;
  std::vector<TreeParam> params;
  std::vector<std::string> decoder_layers;  // the transformer blocks, in forward order
  std::string output_head;                  // get_output_embeddings(): what `all-linear` leaves out
  int module_index(const std::string& name) const;
};

ModuleTree module_tree(const ModelDecl& m);

// An adapter's `targets=` resolved as PEFT's inject_adapter resolves target_modules: `all-linear`
// (tuners_utils.py::_maybe_include_all_linear_layers) or names matched whole or as a dotted suffix
// (tuners_utils.py::check_target_module_exists). `modules`: the matches in module order; `error`:
// why PEFT (or, for what it takes but the simulator does not model, fsdpsim) refuses them, else "".
struct TargetResolution {
  std::vector<std::string> modules;
  std::string error;
};
TargetResolution resolve_targets(const ModuleTree& tree, const std::vector<std::string>& targets);

// `PATH` is a dotted module path: NAME pieces ([A-Za-z0-9_-], at least one character) joined by '.'.
bool is_module_path(const std::string& s);

// The tree as `fsdpsim scenario --tree` prints it: `module NAME TYPE` lines, then
// `param NAME [d0,d1] [tied=NAME]` lines (the root module's name printed as `.`).
std::string module_tree_text(const ModuleTree& tree);

}  // namespace fsdpsim
