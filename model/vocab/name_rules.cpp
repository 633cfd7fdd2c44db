#include "model/vocab/name_rules.hpp"

#include <algorithm>
#include <cctype>

namespace fsdpsim {
namespace {

// dir(torch.nn.Module()) on torch 2.13 (the NAMEs among them). A child of such a name is
// refused by torch/nn/modules/module.py::Module.add_module ("attribute '...' already
// exists"); set as an attribute instead, it is shadowed by the method (get_submodule then
// finds `to` "is not an nn.Module") or breaks the module's own state (`training`).
const std::vector<std::string> kModuleAttributes = {
    "T_destination", "__annotations__", "__call__", "__class__", "__delattr__", "__dict__", "__dir__", "__doc__",
    "__eq__", "__format__", "__ge__", "__getattr__", "__getattribute__", "__getstate__", "__gt__", "__hash__",
    "__init__", "__init_subclass__", "__le__", "__lt__", "__module__", "__ne__", "__new__", "__reduce__",
    "__reduce_ex__", "__repr__", "__setattr__", "__setstate__", "__sizeof__", "__str__", "__subclasshook__",
    "__weakref__", "_apply", "_backward_hooks", "_backward_pre_hooks", "_buffers", "_call_impl",
    "_compiled_call_impl", "_forward_hooks", "_forward_hooks_always_called", "_forward_hooks_with_kwargs",
    "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_get_backward_hooks", "_get_backward_pre_hooks",
    "_get_name", "_is_full_backward_hook", "_load_from_state_dict", "_load_state_dict_post_hooks",
    "_load_state_dict_pre_hooks", "_maybe_warn_non_full_backward_hook", "_modules", "_named_members",
    "_non_persistent_buffers_set", "_parameters", "_register_load_state_dict_pre_hook", "_register_state_dict_hook",
    "_replicate_for_data_parallel", "_save_to_state_dict", "_slow_forward", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_version", "_wrapped_call_impl", "add_module", "apply", "bfloat16", "buffers",
    "call_super_init", "children", "compile", "cpu", "cuda", "double", "dump_patches", "eval", "extra_repr", "float",
    "forward", "get_buffer", "get_extra_state", "get_parameter", "get_submodule", "half", "ipu", "load_state_dict",
    "modules", "mtia", "named_buffers", "named_children", "named_modules", "named_parameters", "parameters",
    "register_backward_hook", "register_buffer", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook", "register_load_state_dict_post_hook",
    "register_load_state_dict_pre_hook", "register_module", "register_parameter", "register_state_dict_post_hook",
    "register_state_dict_pre_hook", "requires_grad_", "set_extra_state", "set_submodule", "share_memory",
    "state_dict", "to", "to_empty", "train", "training", "type", "xpu", "zero_grad",
};

// What dir(torch.nn.ModuleDict()) adds on torch 2.13: its mapping methods. PEFT keys its
// lora_A / lora_B / modules_to_save ModuleDicts by adapter name, and
// torch/nn/modules/container.py::ModuleDict.__setitem__ goes through Module.add_module.
const std::vector<std::string> kModuleDictExtra = {"__contains__", "__delitem__", "__getitem__", "__iter__",
                                                   "__len__",      "__setitem__", "clear",       "items",
                                                   "keys",         "pop",         "update",      "values"};

// The parts of an adapter's state-dict keys other than the adapter and layer names
// (`base_model.model.L.lora_A.A.weight`, `L.modules_to_save.A.bias`, under `checkpoint`
// `L._checkpoint_wrapped_module.lora_A.A.weight`, torch's CheckpointWrapper child).
// peft/utils/save_and_load.py::_filter_state_dict_for_adapter_name drops from one
// adapter's save every key containing ".OTHER." or ending in ".OTHER" for each other
// adapter, so an adapter so named empties the others' saves.
const std::vector<std::string> kStateDictKeyParts = {"model", "lora_A", "lora_B", "weight", "bias", "modules_to_save",
                                                     "_checkpoint_wrapped_module"};

// The attributes PEFT sets on or reads off the base model (the scenario's network, whose
// children are the layers): a layer so named is taken for them.
struct PeftAttribute {
  const char* name;
  const char* use;
  const char* where;
};
const std::vector<PeftAttribute>& peft_base_model_attributes() {
  static const std::vector<PeftAttribute> attrs = {
      {"peft_config", "stores its adapters' configs on the base model under that name",
       "peft/tuners/tuners_utils.py::BaseTuner.__init__"},
      {"config", "reads the base model's `config` as its model config",
       "peft/tuners/tuners_utils.py::BaseTuner.get_model_config"},
      {"_tied_weights_keys", "reads the base model's `_tied_weights_keys` as the names of its tied weights",
       "peft/utils/other.py::_get_module_names_tied_with_embedding"},
      {"enable_input_require_grads", "calls the base model's `enable_input_require_grads()` when it has one",
       "peft/peft_model.py::PeftModel._prepare_model_for_gradient_checkpointing"},
      {"get_input_embeddings", "calls the base model's `get_input_embeddings()` when it has one",
       "peft/peft_model.py::PeftModel._prepare_model_for_gradient_checkpointing"},
  };
  return attrs;
}

constexpr const char* kSaveFilter = "peft/utils/save_and_load.py::_filter_state_dict_for_adapter_name";

bool contains(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

}  // namespace

// No '.': parameter names join names with dots ("lin0.lora_A.b"), so a dot in a name would
// make two declarations spell the same parameter (layer `x.lora_A` + adapter `weight` on `x`)
// and an owner unreadable from a name; torch's Module.add_module refuses it as well.
bool is_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  if (!(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

std::string layer_name_refusal(const std::string& name) {
  // peft/utils/save_and_load.py::get_peft_model_state_dict keeps every key containing "lora_"
  if (name.find("lora_") != std::string::npos)
    return "layer names may not contain 'lora_' (PEFT treats such parameters as adapter weights), got '" + name + "'";
  // torch/nn/modules/module.py::Module.add_module: "attribute '...' already exists"
  if (contains(kModuleAttributes, name))
    return "'" + name + "' is an attribute of every torch module and cannot name a layer (torch's Module.add_module " +
           "refuses it: attribute '" + name + "' already exists)";
  for (const auto& a : peft_base_model_attributes())
    if (name == a.name) return "'" + name + "' cannot name a layer: PEFT " + a.use + " (" + a.where + ")";
  return "";
}

std::string adapter_name_refusal(const std::string& name) {
  // torch/nn/modules/container.py::ModuleDict.__setitem__ -> Module.add_module: "already exists"
  if (contains(kModuleAttributes, name) || contains(kModuleDictExtra, name))
    return "'" + name + "' is an attribute of torch's nn.ModuleDict and cannot name an adapter (PEFT keeps adapters " +
           "in ModuleDicts, whose add_module refuses it: attribute '" + name + "' already exists)";
  // peft/utils/save_and_load.py::_filter_state_dict_for_adapter_name matches names inside keys
  if (contains(kStateDictKeyParts, name))
    return "'" + name + "' cannot name an adapter: it is part of every adapter's state-dict keys " +
           "(L.lora_A.NAME.weight), and PEFT's save drops the keys that contain another adapter's name (" + kSaveFilter + ")";
  return "";
}

std::string shared_name_refusal(const std::string& name, bool adapter_declared_second) {
  // peft/utils/save_and_load.py::_filter_state_dict_for_adapter_name: ".OTHER." in a key
  return std::string(adapter_declared_second ? "adapter" : "layer") + " '" + name + "' has the name of " +
         (adapter_declared_second ? "layer" : "adapter") + " '" + name + "': a layer and an adapter may not share a name " +
         "(PEFT's save drops the keys that contain another adapter's name, here the layer's: " + kSaveFilter + ")";
}

bool is_python_identifier(const std::string& name) {
  // the keywords of Python 3.11 (soft keywords such as `match` are identifiers)
  static const std::vector<std::string> keywords = {
      "False", "None",   "True",    "and",      "as",     "assert", "async", "await",    "break",
      "class", "continue", "def",   "del",      "elif",   "else",   "except", "finally", "for",
      "from",  "global", "if",      "import",   "in",     "is",     "lambda", "nonlocal", "not",
      "or",    "pass",   "raise",   "return",   "try",    "while",  "with",   "yield"};
  return is_name(name) && name.find('-') == std::string::npos && !contains(keywords, name);
}

bool is_python_attribute_safe(const std::string& name) {
  // Python mangles `self.__x` to `self._Class__x` inside a class body: a name that starts with
  // two underscores and does not end with two (`__x__`, `___` are left alone)
  const bool ends_dunder = name.size() >= 2 && name.compare(name.size() - 2, 2, "__") == 0;
  const bool mangled = name.compare(0, 2, "__") == 0 && !ends_dunder;
  return is_python_identifier(name) && !mangled;
}

const std::vector<std::string>& torch_module_attributes() { return kModuleAttributes; }
const std::vector<std::string>& torch_module_dict_extra_attributes() { return kModuleDictExtra; }

}  // namespace fsdpsim
