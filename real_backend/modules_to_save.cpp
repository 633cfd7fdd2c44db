// PeftModel's modules_to_save on real tensors (peft/utils/other.py::ModulesToSaveWrapper).
// Method names mirror model/machine/modules_to_save.cpp; nothing here asks the model.
#include "real_backend/modules_to_save.hpp"
#include "real_backend/activation_dtype.hpp"

#include <ATen/core/grad_mode.h>

#include "real_backend/op_raised.hpp"

namespace fsdpsim::real {

void ModulesToSaveWrapper::reset() {
  wrapped = false;
  trains = AdapterSet();
  copy_active = -1;
}

// fully_shard swaps the class of each module it is given for FSDP<name>; the root's call is on
// the PeftModel, so a wrapper in the root's group keeps its name.
std::string ModulesToSaveWrapper::class_name() const {
  return fsdp_->prepared && !layout_->groups[layout_->layers[layer_].group].is_root ? "FSDPModulesToSaveWrapper"
                                                                                     : "ModulesToSaveWrapper";
}

bool ModulesToSaveWrapper::copy_registered(int adapter) const {
  const int p = layout_->layers[layer_].saved_w[adapter];
  return p >= 0 && params_->registered(p).defined();
}

// other.py::ModulesToSaveWrapper.update: copy.deepcopy(self.original_module), i.e. the
// registered weight and bias as they are now, requires_grad included (frozen by then), in the
// original's device and dtype (a meta original gives a meta copy).
void ModulesToSaveWrapper::update(int adapter) {
  at::NoGradGuard ng;
  const LayerSpec& ls = layout_->layers[layer_];
  for (const auto& [from, to] : {std::pair{ls.weight, ls.saved_w[adapter]}, std::pair{ls.bias, ls.saved_b[adapter]}}) {
    const at::Tensor& src = (*params_)[from].registered;
    ParamTensors& dst = (*params_)[to].leaf;
    dst = ParamTensors{};
    dst.s = src.detach().clone().requires_grad_(src.requires_grad());
    dst.place = (*params_)[from].leaf.place.clone();
    (*params_)[to].registered = dst.s;
  }
}

// other.py::_set_layer_requires_grad on one adapter's copy (weight and bias).
void ModulesToSaveWrapper::set_copy_rg(int adapter, bool rg) {
  const LayerSpec& ls = layout_->layers[layer_];
  for (int p : {ls.saved_w[adapter], ls.saved_b[adapter]})
    if (p >= 0) params_->set_requires_grad(p, rg);
}

// The running copy is frozen, then the new one gets requires_grad = not inference_mode.
void ModulesToSaveWrapper::set_adapter(int adapter, bool inference_mode) {
  if (copy_active >= 0) set_copy_rg(copy_active, false);
  copy_active = adapter;
  if (adapter >= 0) set_copy_rg(adapter, !inference_mode);
}

// ModulesToSaveWrapper.check_set_adapter takes a plain name as it is, and of a list the names
// with a copy here (none given, or more than one found, raises); a wrapper without a copy for
// the chosen name runs none.
void ModulesToSaveWrapper::set_adapter_named(AdapterSet names, bool list_form, bool inference_mode) {
  if (list_form && names.empty()) throw OpError(Status::ValueError, "Please specify at least one adapter to set");
  AdapterSet here = names;
  if (list_form) {
    here = AdapterSet();
    for (int a : names)
      if (copy_registered(a)) here.insert(a);
  }
  // Its text formats the module, whose repr spans lines: the first line ends with the class.
  if (here.count() > 1) throw OpError(Status::ValueError, "Only one adapter can be set at a time for " + class_name() + "(");
  const int a = here.empty() ? -1 : here.first();
  set_adapter(a >= 0 && trains.contains(a) ? a : -1, inference_mode);
}

// Disabling freezes every copy in modules_to_save, enabling unfreezes the running one (its
// adapter's inference_mode unread).
void ModulesToSaveWrapper::enable_adapters(bool enabled) {
  module_->disabled = !enabled;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!copy_registered(static_cast<int>(a))) continue;
    if (!enabled) set_copy_rg(static_cast<int>(a), false);
    else if (static_cast<int>(a) == copy_active) set_copy_rg(static_cast<int>(a), true);
  }
}

// Disabled, or its active adapter not among its _adapters (or none active: _forward_wrapped),
// runs original_module; else the active copy.
at::Tensor ModulesToSaveWrapper::forward(const at::Tensor& h) {
  const LayerSpec& ls = layout_->layers[layer_];
  const int a = copy_active;
  const bool copy = !module_->disabled && a >= 0 && trains.contains(a);
  const int w = copy ? ls.saved_w[a] : ls.weight, b = copy ? ls.saved_b[a] : ls.bias;
  // original_module made around a child group's FSDP module: FSDP's casts wrap its call
  // (_fsdp_state.py::FSDPState._pre_forward / _post_forward); the copy has none.
  const GroupSpec& gs = layout_->groups[ls.group];
  if (!copy && layout_->mixed_precision && ls.lora_after_fsdp && !gs.is_root)
    return fsdp_cast_out(gs, ckpt_->linear(fsdp_cast_in(gs, h), h.scalar_type(), w, b));
  return ckpt_->linear(h, params_->param_dtype(w), w, b);
}

// At the end of tuners_utils.py::BaseTuner.inject_adapter (before the requires_grad restore):
// a layer already wrapped gets the adapter's copy (update) and set_adapter(its own active
// adapter) with the new adapter's inference_mode; a new wrapper runs the new copy when the
// adapter is active (activate_adapter), else none.
void ModulesToSaveWrapper::add(int adapter, bool inference_mode, bool active) {
  const bool existed = wrapped;
  wrapped = true;
  trains.insert(adapter);
  update(adapter);
  if (existed) set_adapter(copy_active, inference_mode);
  else set_adapter(active ? adapter : -1, inference_mode);
}

// new_active: the first LoRA layer's active adapters after its own delete (empty: none, PEFT's None).
void ModulesToSaveWrapper::delete_adapter(int adapter, AdapterSet new_active) {
  if (!wrapped || !copy_registered(adapter)) return;
  const LayerSpec& ls = layout_->layers[layer_];
  if (new_active.count() > 1) {
    std::string list;
    for (int a : new_active) list += (list.empty() ? "['" : ", '") + layout_->adapters[a].name + "'";
    throw OpError(Status::ValueError, "Attempted to set multiple (" + list + "]) adapters at once for " + class_name() +
                                          ", which is not allowed.");
  }
  trains.erase(adapter);
  auto drop = [&]() { (*params_)[ls.saved_w[adapter]].registered = (*params_)[ls.saved_b[adapter]].registered = at::Tensor(); };
  const int next = new_active.empty() ? -1 : new_active.first();
  if (next < 0 || !copy_registered(next)) {
    drop();
    copy_active = -1;
    return;
  }
  // `new_active_adapter != self.active_adapters[0]` on a wrapper running none.
  if (copy_active < 0) throw OpError(Status::Exception, "IndexError: list index out of range");
  if (next != copy_active) set_adapter(next, false);
  drop();
}

}  // namespace fsdpsim::real
