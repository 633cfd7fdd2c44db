// PEFT's ModulesToSaveWrapper (peft/utils/other.py): a modules_to_save layer kept as
// original_module, plus a whole trainable copy per adapter. Its requires_grad flips go through
// set_registered_rg like a LoRA layer's, so they land on whatever object FSDP has registered
// (a flip on the unsharded copy is lost at the next reshard, as seed 000's is).
#include "model/machine/rank_model.hpp"

#include <fmt/format.h>

namespace fsdpsim {

namespace {
// fully_shard swaps the class of each module it is given for FSDP<name>; the root's call is on
// the PeftModel, so a wrapper in the root's group keeps its name.
const char* wrapper_class(const Topology& t, int layer, bool prepared) {
  return prepared && !t.groups[t.layers[layer].group].is_root ? "FSDPModulesToSaveWrapper" : "ModulesToSaveWrapper";
}
}  // namespace

// peft utils/other.py::_set_layer_requires_grad on one adapter's copy (weight and bias).
void LoraLayer::set_copy_rg(const LayerContext& c, int adapter, bool rg) {
  const LayerInfo& li = c.topo.layers[c.layer];
  for (int p : {li.SW[adapter], li.SB[adapter]})
    if (p >= 0 && c.params[p].present) set_registered_rg(c.topo, c.params, c.groups, p, rg);
}

// other.py::ModulesToSaveWrapper.set_adapter: freezes the copy running now, then (unless
// inference_mode) unfreezes the new one; -1 is `set_adapter([])`, no copy runs.
void LoraLayer::wrapper_set_adapter(const LayerContext& c, int adapter, bool inference_mode) {
  if (copy_active >= 0) set_copy_rg(c, copy_active, false);
  copy_active = static_cast<int8_t>(adapter);
  if (adapter >= 0) set_copy_rg(c, adapter, !inference_mode);
}

// other.py::_set_adapter, which tuners_utils.py::set_adapter runs before any LoRA layer:
// each wrapper's check_set_adapter picks its one adapter of `names` among its copies (a plain
// name passes as it is), and a wrapper not training along with it runs none.
Raise RankModel::wrappers_set_adapter(AdapterSet names, bool list_form, bool inference_mode) {
  for (size_t l = 0; l < topo_->layers.size(); ++l) {
    LoraLayer& lp = st_.layers[l];
    if (!lp.wrapper) continue;
    // inject_adapter passes the active list, empty after a delete left none active.
    if (list_form && names.empty()) return raise(Status::ValueError, "Please specify at least one adapter to set");
    const AdapterSet here = list_form ? names & lp.copies : names;
    if (here.count() > 1) {
      // Its text formats the module, whose repr spans lines: the first line ends with the class.
      return raise(Status::ValueError,
                   fmt::format("Only one adapter can be set at a time for {}(", wrapper_class(*topo_, static_cast<int>(l), st_.prepared)));
    }
    const int a = here.empty() ? -1 : here.first();
    lp.wrapper_set_adapter(layer_context(static_cast<int>(l)), a >= 0 && lp.trains.contains(a) ? a : -1, inference_mode);
  }
  return {};
}

// other.py::ModulesToSaveWrapper.enable_adapters: disabling freezes every copy, enabling
// unfreezes the running one, whatever its adapter's inference_mode.
void LoraLayer::wrapper_enable_adapters(const LayerContext& c, bool enabled) {
  disabled = !enabled;
  for (int a : copies)
    if (!enabled || a == copy_active) set_copy_rg(c, a, enabled);
}

// other.py::set_additional_trainable_modules -> _set_trainable, at the end of
// BaseTuner.inject_adapter: a new wrapper runs the new adapter's copy when that adapter is
// active; an existing one adds a copy (a deep copy of original_module, frozen like it:
// ModulesToSaveWrapper.update) and re-runs set_adapter on its own active adapter.
void RankModel::set_additional_trainable_modules(int adapter, bool inference_mode) {
  for (size_t l = 0; l < topo_->layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    if (topo_->layers[l].SW[adapter] < 0) continue;
    LoraLayer& lp = st_.layers[l];
    const bool existed = lp.wrapper;
    lp.wrapper = true;
    lp.copies.insert(adapter);
    lp.trains.insert(adapter);
    const LayerContext c = layer_context(layer);
    lp.set_copy_rg(c, adapter, false);
    if (existed) lp.wrapper_set_adapter(c, lp.copy_active, inference_mode);
    else lp.wrapper_set_adapter(c, st_.active.contains(adapter) ? adapter : -1, inference_mode);
  }
}

// tuners_utils.py::_delete_auxiliary_adapter -> ModulesToSaveWrapper.delete_adapter, with the
// first LoRA layer's active adapters after its own delete (none: no LoRA layer).
Raise RankModel::wrappers_delete_adapter(int adapter, AdapterSet new_active) {
  for (size_t l = 0; l < topo_->layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    LoraLayer& lp = st_.layers[l];
    if (!lp.wrapper || !lp.copies.contains(adapter)) continue;
    const LayerInfo& li = topo_->layers[l];
    auto drop = [&]() {
      for (int p : {li.SW[adapter], li.SB[adapter]}) st_.params[p].present = false;
      lp.copies.erase(adapter);
    };
    if (new_active.count() > 1) {
      std::string list;
      for (int a : new_active) fmt::format_to(std::back_inserter(list), "{}'{}'", list.empty() ? "[" : ", ", topo_->adapters[a].name);
      return raise(Status::ValueError, fmt::format("Attempted to set multiple ({}]) adapters at once for {}, which is not allowed.", list,
                                                   wrapper_class(*topo_, layer, st_.prepared)));
    }
    lp.trains.erase(adapter);
    const int next = new_active.empty() ? -1 : new_active.first();
    if (next < 0 || !lp.copies.contains(next)) {
      drop();
      lp.copy_active = -1;
      continue;
    }
    // It compares the new adapter with active_adapters[0], which a wrapper running none lacks:
    // the copy stays in the ModuleDict, out of _adapters.
    if (lp.copy_active < 0) return raise(Status::Exception, "IndexError: list index out of range");
    // ModulesToSaveWrapper.set_adapter would refuse a `next` outside _adapters, but only a
    // deleted adapter leaves _adapters, and no LoRA layer names a deleted one as active.
    if (next != lp.copy_active) lp.wrapper_set_adapter(layer_context(layer), next, false);
    drop();
  }
  return {};
}

}  // namespace fsdpsim
