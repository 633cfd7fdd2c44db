// PEFT's ModulesToSaveWrapper (peft/utils/other.py): a modules_to_save layer kept as
// original_module, plus a whole trainable copy per adapter. Its requires_grad flips go through
// set_registered_rg like a LoRA layer's, so they land on whatever object FSDP has registered
// (a flip on the unsharded copy is lost at the next reshard, as seed 000's is).
#include "model/machine/modules_to_save.hpp"

#include <fmt/format.h>

namespace fsdpsim {

// fully_shard swaps the class of each module it is given for FSDP<name>; the root's call is on
// the PeftModel, so a wrapper in the root's group keeps its name.
const char* ModulesToSaveWrapper::class_name() const {
  return own_.prepared && !own_.topo.groups[own_.info().group].is_root ? "FSDPModulesToSaveWrapper" : "ModulesToSaveWrapper";
}

// peft utils/other.py::_set_layer_requires_grad on one adapter's copy (weight and bias).
void ModulesToSaveWrapper::set_copy_rg(int adapter, bool rg) {
  const LayerInfo& li = own_.info();
  for (int p : {li.SW[adapter], li.SB[adapter]})
    if (p >= 0 && own_.params[p].present) own_.set_registered_rg(p, rg);
}

// other.py::ModulesToSaveWrapper.set_adapter: freezes the copy running now, then (unless
// inference_mode) unfreezes the new one; -1 is `set_adapter([])`, no copy runs.
void ModulesToSaveWrapper::set_adapter(int adapter, bool inference_mode) {
  if (module_.copy_active >= 0) set_copy_rg(module_.copy_active, false);
  module_.copy_active = static_cast<int8_t>(adapter);
  if (adapter >= 0) set_copy_rg(adapter, !inference_mode);
}

// other.py::_set_adapter, which tuners_utils.py::set_adapter runs before any LoRA layer:
// the wrapper's check_set_adapter picks its one adapter of `names` among its copies (a plain
// name passes as it is), and a wrapper not training along with it runs none.
Raise ModulesToSaveWrapper::set_adapter_named(AdapterSet names, bool list_form, bool inference_mode) {
  // inject_adapter passes the active list, empty after a delete left none active.
  if (list_form && names.empty()) return raise_at(prov_, Status::ValueError, "Please specify at least one adapter to set");
  const AdapterSet here = list_form ? names & module_.copies : names;
  if (here.count() > 1) {
    // Its text formats the module, whose repr spans lines: the first line ends with the class.
    return raise_at(prov_, Status::ValueError, fmt::format("Only one adapter can be set at a time for {}(", class_name()));
  }
  const int a = here.empty() ? -1 : here.first();
  set_adapter(a >= 0 && module_.trains.contains(a) ? a : -1, inference_mode);
  return {};
}

// other.py::ModulesToSaveWrapper.enable_adapters: disabling freezes every copy, enabling
// unfreezes the running one, whatever its adapter's inference_mode.
void ModulesToSaveWrapper::enable_adapters(bool enabled) {
  module_.disabled = !enabled;
  for (int a : module_.copies)
    if (!enabled || a == module_.copy_active) set_copy_rg(a, enabled);
}

// other.py::set_additional_trainable_modules -> _set_trainable, at the end of
// BaseTuner.inject_adapter: a new wrapper runs the new adapter's copy when that adapter is
// active; an existing one adds a copy (a deep copy of original_module, frozen like it:
// ModulesToSaveWrapper.update) and re-runs set_adapter on its own active adapter.
void ModulesToSaveWrapper::add(int adapter, bool inference_mode, bool active) {
  const bool existed = module_.wrapper;
  module_.wrapper = true;
  module_.copies.insert(adapter);
  module_.trains.insert(adapter);
  set_copy_rg(adapter, false);
  if (existed) set_adapter(module_.copy_active, inference_mode);
  else set_adapter(active ? adapter : -1, inference_mode);
}

// tuners_utils.py::_delete_auxiliary_adapter -> ModulesToSaveWrapper.delete_adapter, with the
// first LoRA layer's active adapters after its own delete (none: no LoRA layer).
Raise ModulesToSaveWrapper::delete_adapter(int adapter, AdapterSet new_active) {
  const LayerInfo& li = own_.info();
  auto drop = [&]() {
    for (int p : {li.SW[adapter], li.SB[adapter]}) own_.params[p].present = false;
    module_.copies.erase(adapter);
  };
  if (new_active.count() > 1) {
    std::string list;
    for (int a : new_active) fmt::format_to(std::back_inserter(list), "{}'{}'", list.empty() ? "[" : ", ", own_.topo.adapters[a].name);
    return raise_at(prov_, Status::ValueError,
                    fmt::format("Attempted to set multiple ({}]) adapters at once for {}, which is not allowed.", list, class_name()));
  }
  module_.trains.erase(adapter);
  const int next = new_active.empty() ? -1 : new_active.first();
  if (next < 0 || !module_.copies.contains(next)) {
    drop();
    module_.copy_active = -1;
    return {};
  }
  // It compares the new adapter with active_adapters[0], which a wrapper running none lacks:
  // the copy stays in the ModuleDict, out of _adapters.
  if (module_.copy_active < 0) return raise_at(prov_, Status::Exception, "IndexError: list index out of range");
  // ModulesToSaveWrapper.set_adapter would refuse a `next` outside _adapters, but only a
  // deleted adapter leaves _adapters, and no LoRA layer names a deleted one as active.
  if (next != module_.copy_active) set_adapter(next, false);
  drop();
  return {};
}

}  // namespace fsdpsim
