// PeftModel's modules_to_save on real tensors (peft/utils/other.py::ModulesToSaveWrapper):
// the layer kept as original_module plus one deep copy per adapter, each a leaf in the
// registry like any parameter. Every requires_grad flip goes through set_registered_rg, so it
// lands on whatever object is registered now (the unsharded copy U while its group is
// unsharded, lost at the next reshard, as a LoRA flip is). Method names mirror
// model/machine/modules_to_save.cpp; nothing here asks the model.
#include <ATen/core/grad_mode.h>

#include "real_backend/real_rank.hpp"

namespace fsdpsim::real {
namespace {

// fully_shard swaps the class of each module it is given for FSDP<name>; the root's call is on
// the PeftModel, so a wrapper in the root's group keeps its name.
std::string wrapper_class(const Layout& l, int layer, bool prepared) {
  return prepared && !l.groups[l.layers[layer].group].is_root ? "FSDPModulesToSaveWrapper" : "ModulesToSaveWrapper";
}

}  // namespace

bool RealRank::copy_registered(int layer, int adapter) const {
  const int p = layout_->layers[layer].saved_w[adapter];
  return p >= 0 && registered(p).defined();
}

// other.py::ModulesToSaveWrapper.update: copy.deepcopy(self.original_module), i.e. the
// registered weight and bias as they are now, requires_grad included (frozen by then), in the
// original's device and dtype (a meta original gives a meta copy).
void RealRank::create_copy(int layer, int adapter) {
  at::NoGradGuard ng;
  const LayerSpec& ls = layout_->layers[layer];
  for (const auto& [from, to] : {std::pair{ls.weight, ls.saved_w[adapter]}, std::pair{ls.bias, ls.saved_b[adapter]}}) {
    const at::Tensor& src = params_[from].registered;
    ParamTensors& dst = params_[to].leaf;
    dst = ParamTensors{};
    dst.s = src.detach().clone().requires_grad_(src.requires_grad());
    dst.place = params_[from].leaf.place.clone();
    params_[to].registered = dst.s;
  }
}

// other.py::_set_layer_requires_grad on one adapter's copy (weight and bias).
void RealRank::set_copy_rg(int layer, int adapter, bool rg) {
  const LayerSpec& ls = layout_->layers[layer];
  for (int p : {ls.saved_w[adapter], ls.saved_b[adapter]})
    if (p >= 0) set_registered_rg(p, rg);
}

// other.py::ModulesToSaveWrapper.set_adapter: the running copy is frozen, then the new one gets
// requires_grad = not inference_mode; -1 is set_adapter([]): no copy runs.
void RealRank::wrapper_set_adapter(int layer, int adapter, bool inference_mode) {
  if (layers_[layer].copy_active >= 0) set_copy_rg(layer, layers_[layer].copy_active, false);
  layers_[layer].copy_active = adapter;
  if (adapter >= 0) set_copy_rg(layer, adapter, !inference_mode);
}

// other.py::_set_adapter, which tuners_utils.py::set_adapter runs on every wrapper before any
// LoRA layer: ModulesToSaveWrapper.check_set_adapter takes a plain name as it is, and of a
// list the names with a copy here (none given, or more than one found, raises); a wrapper
// without a copy for the chosen name runs none.
void RealRank::wrappers_set_adapter(AdapterSet names, bool list_form, bool inference_mode) {
  for (size_t l = 0; l < layout_->layers.size(); ++l) {
    if (!layers_[l].wrapper) continue;
    const int layer = static_cast<int>(l);
    if (list_form && names.empty()) throw OpError(Status::ValueError, "Please specify at least one adapter to set");
    AdapterSet here = names;
    if (list_form) {
      here = AdapterSet();
      for (int a : names)
        if (copy_registered(layer, a)) here.insert(a);
    }
    // Its text formats the module, whose repr spans lines: the first line ends with the class.
    if (here.count() > 1)
      throw OpError(Status::ValueError, "Only one adapter can be set at a time for " +
                                            wrapper_class(*layout_, layer, fsdp_.prepared) + "(");
    const int a = here.empty() ? -1 : here.first();
    wrapper_set_adapter(layer, a >= 0 && layers_[l].trains.contains(a) ? a : -1, inference_mode);
  }
}

// other.py::ModulesToSaveWrapper.enable_adapters: disabling freezes every copy in
// modules_to_save, enabling unfreezes the running one (its adapter's inference_mode unread).
void RealRank::wrapper_enable_adapters(int layer, bool enabled) {
  layers_[layer].disabled = !enabled;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!copy_registered(layer, static_cast<int>(a))) continue;
    if (!enabled) set_copy_rg(layer, static_cast<int>(a), false);
    else if (static_cast<int>(a) == layers_[layer].copy_active) set_copy_rg(layer, static_cast<int>(a), true);
  }
}

// other.py::AuxiliaryTrainingWrapper.forward: disabled, or its active adapter not among its
// _adapters (or none active: _forward_wrapped), runs original_module; else the active copy.
at::Tensor RealRank::wrapper_module_forward(int layer, const at::Tensor& h) {
  const LayerSpec& ls = layout_->layers[layer];
  const int a = layers_[layer].copy_active;
  const bool copy = !layers_[layer].disabled && a >= 0 && layers_[layer].trains.contains(a);
  const int w = copy ? ls.saved_w[a] : ls.weight, b = copy ? ls.saved_b[a] : ls.bias;
  return saving_linear(h, param_dtype(w), w, b);
}

// other.py::set_additional_trainable_modules -> _set_trainable, at the end of
// tuners_utils.py::BaseTuner.inject_adapter (before the requires_grad restore): a layer already
// wrapped gets the adapter's copy (update) and set_adapter(its own active adapter) with the new
// adapter's inference_mode; a new wrapper runs the new copy when the adapter is active
// (activate_adapter), else none.
void RealRank::set_additional_trainable_modules(int adapter, bool inference_mode) {
  for (size_t l = 0; l < layout_->layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    if (layout_->layers[l].saved_w[adapter] < 0) continue;
    const bool existed = layers_[l].wrapper;
    layers_[l].wrapper = true;
    layers_[l].trains.insert(adapter);
    create_copy(layer, adapter);
    if (existed) wrapper_set_adapter(layer, layers_[layer].copy_active, inference_mode);
    else wrapper_set_adapter(layer, active_.contains(adapter) ? adapter : -1, inference_mode);
  }
}

// tuners_utils.py::_delete_auxiliary_adapter -> ModulesToSaveWrapper.delete_adapter on every
// wrapper holding the adapter's copy, with new_active the first LoRA layer's active adapters
// after its own delete (empty: none, PEFT's None).
void RealRank::wrappers_delete_adapter(int adapter, AdapterSet new_active) {
  for (size_t l = 0; l < layout_->layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    if (!layers_[l].wrapper || !copy_registered(layer, adapter)) continue;
    const LayerSpec& ls = layout_->layers[l];
    if (new_active.count() > 1) {
      std::string list;
      for (int a : new_active) list += (list.empty() ? "['" : ", '") + layout_->adapters[a].name + "'";
      throw OpError(Status::ValueError, "Attempted to set multiple (" + list + "]) adapters at once for " +
                                            wrapper_class(*layout_, layer, fsdp_.prepared) + ", which is not allowed.");
    }
    layers_[l].trains.erase(adapter);
    auto drop = [&]() { params_[ls.saved_w[adapter]].registered = params_[ls.saved_b[adapter]].registered = at::Tensor(); };
    const int next = new_active.empty() ? -1 : new_active.first();
    if (next < 0 || !copy_registered(layer, next)) {
      drop();
      layers_[l].copy_active = -1;
      continue;
    }
    // `new_active_adapter != self.active_adapters[0]` on a wrapper running none.
    if (layers_[l].copy_active < 0) throw OpError(Status::Exception, "IndexError: list index out of range");
    if (next != layers_[l].copy_active) wrapper_set_adapter(layer, next, false);
    drop();
  }
}

}  // namespace fsdpsim::real
