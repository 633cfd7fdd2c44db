// PeftModel / BaseTuner ops on the real module (peft/peft_model.py,
// peft/tuners/tuners_utils.py), in the order the profile switches choose: the adapter lifecycle
// (set_adapter, merge, disable, add, delete, delta_weight); the adapter checkpoints are
// save_and_load.cpp's.
#include "real_backend/peft_model.hpp"

#include <algorithm>

#include "real_backend/values.hpp"

namespace fsdpsim::real {

PeftModel::PeftModel(const Layout& layout, Parameters& params, FsdpState& fsdp, DTensor& dtensor, ProcessGroup& pg,
                     CheckpointWrapper& ckpt, Accelerator& accelerator)
    : layout_(&layout), params_(&params), fsdp_(&fsdp), dtensor_(&dtensor), pg_(&pg), accelerator_(&accelerator) {
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    layers_.push_back(std::make_unique<LoraLayer>(layout, static_cast<int>(l), params, dtensor, ckpt, pg));
    wrappers_.push_back(std::make_unique<ModulesToSaveWrapper>(layout, static_cast<int>(l), params, fsdp, ckpt, *layers_.back()));
  }
}

// mapping.py::get_peft_model, then PeftModel.add_adapter for each further declared adapter:
// each adapter's tensors created and placed, its config added, then injected.
void PeftModel::get_peft_model() {
  for (auto& ly : layers_) ly->reset();
  for (auto& w : wrappers_) w->reset();
  present_ = AdapterSet();
  peft_config_.clear();
  active_ = AdapterSet::of(0);
  active_order_ = AdapterOrder{};
  peft_active_ = 0;
  inference_mode_ = AdapterSet();
  disabled_ = false;
  saved_adapters_ = AdapterSet();
  saved_file_order_.clear();
  saved_.clear();
  bool first = true;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    const AdapterDecl& d = layout_->adapters[a];
    if (d.deferred) continue;
    accelerator_->place_new_adapter(static_cast<int>(a), false);
    present_.insert(static_cast<int>(a));
    peft_config_.push_back(static_cast<int>(a));
    if (d.inference_mode) inference_mode_.insert(static_cast<int>(a));
    inject_adapter(static_cast<int>(a), d.inference_mode, first);  // get_peft_model, then add_adapter
    first = false;
  }
}

void PeftModel::check_active_config() const {
  if (!present_.contains(peft_active_))
    throw OpError(Status::KeyError, "KeyError: '" + layout_->adapters[peft_active_].name + "'");
}

// An experts layer runs its ParamWrapper first; a ModulesToSaveWrapper has no LoRA, its output
// is the FSDP module's.
at::Tensor PeftModel::layer_forward(int layer, const at::Tensor& h, at::Tensor* base_out) {
  if (layout_->layers[layer].experts == 0 && wrappers_[layer]->wrapped) {
    at::Tensor y = wrappers_[layer]->forward(h);
    if (base_out) *base_out = y;
    return y;
  }
  return layers_[layer]->forward(h, base_out);
}

bool PeftModel::in_some_layer(int adapter) const {
  for (const auto& ls : layout_->layers)
    if (ls.lora_a[adapter] >= 0 && params_->registered(ls.lora_a[adapter]).defined()) return true;
  return false;
}

bool PeftModel::any_merged() const {
  for (const auto& ly : layers_)
    if (!ly->merged.empty()) return true;
  return false;
}
// tuners_utils.py::set_adapter (module level): the modules_to_save wrappers first
// (other.py::_set_adapter), then per layer unmerge a merged layer and flip.
void PeftModel::set_adapter_module_level(AdapterSet names, bool list_form, bool inference_mode) {
  // other.py::_set_adapter on every wrapper first
  for (auto& w : wrappers_)
    if (w->wrapped) w->set_adapter_named(names, list_form, inference_mode);
  for (auto& ly : layers_) {
    if (!ly->merged.empty()) ly->unmerge();
    ly->set_adapter(names, inference_mode);
  }
  active_ = names;
}

// peft_model.py::PeftModel.set_adapter (a name) or BaseTuner.set_adapter (a list).
void PeftModel::set_adapter(const Op& op) {
  const AdapterSet names = adapters_named(op.names);
  if (!op.list_form) {  // the profile's fix runs around the call: before PeftModel.set_adapter's check
    switch (layout_->profile.get(Switch::SetAdapterReshard)) {
      case sw::kNone:  // peft 0.21.2 peft_model.py::PeftModel.set_adapter: no reshard (the upstream profile)
        break;
      case sw::kSkipMerged:  // _reshard_fsdp_modules (#3872): skips modules holding a merged layer
        reshard_groups_without_merged();
        break;
      case sw::kUnmergeFirst:  // #3895
        if (any_merged()) unmerge_adapter();
        fsdp_->module_reshard_all();
        break;
    }
  }
  // PeftModel.set_adapter checks its peft_config; BaseTuner.set_adapter (a list) checks nothing.
  if (!op.list_form && !present_.includes(names)) throw OpError(Status::ValueError, "Adapter " + op.names[0] + " not found.");
  if (!op.list_form) peft_active_ = names.first();  // PeftModel.set_adapter names its own first
  if (tuner_flags_reshard()) {  // flag-on-copy.patch's module-level set_adapter: unmerge, then reshard
    for (auto& ly : layers_)
      if (!ly->merged.empty()) ly->unmerge();
    reshard_groups_without_merged();
  }
  set_adapter_module_level(names, op.list_form, false);
  active_order_ = AdapterOrder{};
  for (const auto& n : op.names)
    if (layout_->adapter_named(n) >= 0) active_order_.push_back(layout_->adapter_named(n));
}

// BaseTuner.merge_adapter: each layer merges the named adapters, or its active ones in the order
// set_adapter listed them (tuners_utils.py::check_adapters_to_merge: the layer's active_adapters list).
void PeftModel::merge(const Op& op) {
  for (size_t l = 0; l < layout_->layers.size(); ++l) {
    if (op.names.empty()) {
      const AdapterSet active = layers_[l]->active;
      std::vector<int> order = active_order_.only(active).list();
      for (int a : active.without(active_order_.set())) order.push_back(a);
      for (int a : order) layers_[l]->merge(a);
    } else {
      for (const auto& n : op.names) layers_[l]->merge(layout_->adapter_named(n));
    }
  }
}

// FSDPModule.reshard on every FSDP module holding no merged layer (#3872's _reshard_fsdp_modules,
// flag-on-copy.patch's _reshard_fsdp2_modules).
void PeftModel::reshard_groups_without_merged() {
  for (size_t g = 0; g < layout_->groups.size(); ++g) {
    bool merged = false;
    for (int l : layout_->groups[g].layers) merged = merged || !layers_[l]->merged.empty();
    if (!merged) fsdp_->groups[g].module_reshard();
  }
}

// tuner_flags_reshard=on: the tuner reshards before it writes adapter flags (flag-on-copy.patch).
bool PeftModel::tuner_flags_reshard() const { return layout_->profile.get(Switch::TunerFlagsReshard) == sw::kOn; }

void PeftModel::unmerge_adapter() {
  for (auto& ly : layers_) ly->unmerge();
}

// tuners_utils.py::BaseTunerLayer.enable_adapters on each layer, or the wrapper around it
// (other.py::ModulesToSaveWrapper.enable_adapters).
void PeftModel::enable_adapter_layers(bool enabled) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (wrappers_[l]->wrapped) wrappers_[l]->enable_adapters(enabled);
    else layers_[l]->enable_adapters(enabled, inference_mode_);
  }
}

// PeftModel.disable_adapter, entering: disable_adapter_layers (no unmerge).
void PeftModel::disable_enter() {
  if (disabled_) throw OpError(Status::ValueError, "disable_enter inside disable_adapter(): the context is already entered");
  // peft_model.py::PeftModel.disable_adapter reads peft_config[self.active_adapter] first.
  if (!present_.contains(peft_active_))
    throw OpError(Status::KeyError, "KeyError: '" + layout_->adapters[peft_active_].name + "'");
  active_without_config();  // BaseTuner.disable_adapter_layers, before any layer
  if (tuner_flags_reshard()) reshard_groups_without_merged();  // _enable_adapter_layers(False)
  enable_adapter_layers(false);
  disabled_ = true;
}

// BaseTuner.disable_adapter_layers and _mark_only_adapters_as_trainable read peft_config[name]
// for each of the tuner's active adapters: a name a list-form set_adapter gave it without a
// config raises KeyError (in declaration order; the list's differs only with two such names).
void PeftModel::active_without_config() const {
  for (int a : active_.without(present_)) throw OpError(Status::KeyError, "KeyError: '" + layout_->adapters[a].name + "'");
}

// PeftModel.disable_adapter, leaving: enable_adapter_layers; with
// disable_exit_reshard (#3800) unmerge and reshard first.
void PeftModel::disable_exit() {
  if (!disabled_) throw OpError(Status::ValueError, "disable_exit outside disable_adapter(): no matching disable_enter");
  if (layout_->profile.get(Switch::DisableExitReshard) == sw::kOn) {
    if (any_merged()) unmerge_adapter();
    fsdp_->module_reshard_all();
  }
  if (tuner_flags_reshard()) reshard_groups_without_merged();  // _enable_adapter_layers(True)
  enable_adapter_layers(true);
  disabled_ = false;
}

// tuners_utils.py::BaseTuner.inject_adapter: set_adapter(active) with the new
// config's inference_mode, then every parameter registered before gets back the
// requires_grad it had (the new adapter's excluded; not on the first injection).
void PeftModel::inject_adapter(int adapter, bool inference_mode, bool first) {
  std::vector<std::pair<int, bool>> kept;  // mapping_existing_parameter_requires_grad
  for (size_t p = 0; p < params_->size() && !first; ++p) {
    const int a = layout_->params[p].adapter;
    if (a >= 0 && a != adapter && params_->registered(p).defined()) kept.push_back({static_cast<int>(p), params_->registered(p).requires_grad()});
  }
  // Each target's lora/layer.py::LoraLayer.update_layer ends with the layer's own set_adapter (its
  // active adapters, the new config's inference_mode): what stays where the set_adapter below
  // raises (an unmerge) before reaching that layer or at it. A new LoRA layer is active on the new
  // adapter, frozen (lora/model.py::LoraModel._create_and_replace).
  for (size_t l = 0; l < layout_->layers.size() && !first; ++l) {
    if (layout_->layers[l].lora_a[adapter] >= 0) layers_[l]->update_layer(adapter, inference_mode);
  }
  for (size_t l = 0; l < layout_->layers.size(); ++l)
    if (layout_->layers[l].lora_a[adapter] >= 0) layers_[l]->tuner = true;
  // BaseTuner.inject_adapter passes its active_adapters, a list; an unmerge that raises skips the restore.
  set_adapter_module_level(active_, true, inference_mode);
  active_without_config();  // BaseTuner._mark_only_adapters_as_trainable: a raise skips the restore
  // other.py::set_additional_trainable_modules -> _set_trainable on each layer listing the adapter
  for (size_t l = 0; l < layout_->layers.size(); ++l)
    if (layout_->layers[l].saved_w[adapter] >= 0) wrappers_[l]->add(adapter, inference_mode, active_.contains(adapter));
  for (const auto& [p, rg] : kept) params_->set_requires_grad(p, rg);
}

// PeftModel.add_adapter / load_adapter -> inject_adapter: new plain leaves (no
// FSDP group manages them once prepared), placed by
// _move_adapter_to_device_of_base_layer; the new adapter is inactive, so frozen,
// until load_adapter(is_trainable=True) calls PeftModel.set_requires_grad on it.
void PeftModel::add_adapter(int adapter, bool inference_mode, bool load, bool trainable) {
  // peft_model.py::PeftModel.load_adapter of a name in peft_config: no add_adapter, no
  // set_requires_grad; set_peft_model_state_dict loads into the existing tensors.
  if (load && present_.contains(adapter)) {
    if (fsdp_->prepared) fsdp_->reshard_all();  // load_state_dict's pre-hook, before the copy
    accelerator_->load_into_adapter(adapter);
    load_state_dict_hooks();
    return;
  }
  if (present_.contains(adapter))
    throw OpError(Status::ValueError, "Adapter with name " + layout_->adapters[adapter].name + " already exists.");
  // peft lora/model.py::LoraModel._check_new_adapter_config, first thing inject_adapter does.
  const std::string conflict = target_parameters_conflict(layout_->target_parameters, layout_->adapters, adapter, present_.bits());
  if (!conflict.empty()) throw OpError(Status::ValueError, conflict);
  // peft tuners_utils.py::BaseTuner._inject_parameters knows an existing ParamWrapper by its class
  // name, which fully_shard renamed on the modules it was given: the injection raises, after
  // inject_adapter injected the Linear targets and the experts ones before it (each layer's
  // update_layer ran set_adapter with the new config's inference_mode; the housekeeping after
  // never runs), and PeftModel.add_adapter drops only the config.
  auto partial = [&](int l) {
    accelerator_->place_new_adapter_in(l, adapter, load, false);  // _cast_adapter_dtype would come after: never reached
    layers_[l]->update_layer(adapter, inference_mode);
  };
  // add_adapter_rollback=on (docs/findings/half-added-adapter.patch): requires_grad of every
  // registered parameter before the injection, restored by the rollback (roll_back_injection).
  const bool rollback = layout_->profile.get(Switch::AddAdapterRollback) == sw::kOn;
  std::vector<std::pair<int, bool>> before;
  for (size_t p = 0; p < params_->size() && rollback; ++p)
    if (layout_->params[p].adapter >= 0 && params_->registered(p).defined()) before.push_back({static_cast<int>(p), params_->registered(p).requires_grad()});
  auto refuse = [&](Status status, const std::string& message) {
    if (rollback) roll_back_injection(adapter, before);
    throw OpError(status, message);
  };
  // peft tuners_utils.py::BaseTuner.inject_adapter finds the targets by module path: after
  // prepare a checkpointed layer's path holds the checkpoint_wrapper, which LoraModel's
  // _create_new_module refuses, after the targets before it were injected.
  for (size_t w = 0; w < layout_->layers.size() && fsdp_->prepared; ++w) {
    const LayerSpec& lw = layout_->layers[w];
    if (!lw.checkpoint || lw.lora_a[adapter] < 0) continue;
    for (size_t l = 0; l < w; ++l)
      if (layout_->layers[l].experts == 0 && layout_->layers[l].lora_a[adapter] >= 0) partial(static_cast<int>(l));
    // the first line of the message (the wrapper's repr spans lines); fully_shard renamed its class
    refuse(Status::ValueError, std::string("Target module ") + (layout_->groups[lw.group].is_root ? "CheckpointWrapper(" : "FSDPCheckpointWrapper("));
  }
  int refused = -1;
  for (size_t l = 0; l < layout_->layers.size() && fsdp_->prepared && refused < 0; ++l) {
    const LayerSpec& ls = layout_->layers[l];
    if (ls.experts > 0 && ls.lora_a[adapter] >= 0 && layers_[l]->tuner && !layout_->groups[ls.group].is_root && !ls.wrapper_after_fsdp)
      refused = static_cast<int>(l);
  }
  if (refused >= 0) {
    for (size_t l = 0; l < layout_->layers.size(); ++l)
      if (layout_->layers[l].experts == 0 && layout_->layers[l].lora_a[adapter] >= 0) partial(static_cast<int>(l));
    for (int l = 0; l < refused; ++l)
      if (layout_->layers[l].experts > 0 && layout_->layers[l].lora_a[adapter] >= 0) partial(l);
    refuse(Status::ValueError, "Trying to wrap an `nn.Parameter` of layer '" + layout_->layers[refused].name +
                                          "' of type Experts, which is not a valid target. Make sure that this layer "
                                          "is not also targeted with `target_modules`. For some models, PEFT will do "
                                          "this automatically, try setting `target_modules=[]` to prevent it.");
  }
  // peft_model.py::PeftModel.add_adapter: `self.peft_config[adapter_name] = peft_config`, a new key at the end
  present_.insert(adapter);
  peft_config_.push_back(adapter);
  inference_mode_.set(adapter, inference_mode);
  accelerator_->place_new_adapter(adapter, load);
  try {
    inject_adapter(adapter, inference_mode, false);
  } catch (const OpError&) {
    // peft_model.py::PeftModel.add_adapter rolls back: `del self.peft_config[adapter_name]`, then re-raises.
    present_.erase(adapter);
    peft_config_.pop_back();
    throw;
  }
  if (!load) return;
  if (trainable)
    for (const auto& ls : layout_->layers)  // peft_model.py::PeftModel.load_adapter: set_requires_grad(adapter_name)
      for (int p : ls.adapter_params(adapter)) params_->set_requires_grad(p, true);
  load_state_dict_hooks();
}

// add_adapter_rollback=on, half-added-adapter.patch's PeftModel.add_adapter rollback: each layer the
// refused injection reached loses the adapter (BaseTunerLayer.delete_adapter), then every parameter
// registered before gets back its requires_grad (the same objects: nothing resharded since).
void PeftModel::roll_back_injection(int adapter, const std::vector<std::pair<int, bool>>& before) {
  for (size_t l = 0; l < layout_->layers.size(); ++l) {
    const LayerSpec& ls = layout_->layers[l];
    if (ls.lora_a[adapter] < 0 || !params_->registered(ls.lora_a[adapter]).defined()) continue;
    for (int p : ls.adapter_params(adapter)) (*params_)[p].registered = at::Tensor();
    layers_[l]->delete_adapter(adapter);
  }
  for (const auto& [p, rg] : before) params_->set_requires_grad(p, rg);
}

// BaseTuner.delete_adapter: refuses merged adapters; then each tuner layer's
// BaseTunerLayer.delete_adapter: a layer whose active list held it keeps the
// rest, or falls back to sorted(its own adapters)[0] (made trainable); the
// model's active adapter is the first tuner layer's, which the modules_to_save
// wrappers then follow. FSDP's group keeps gathering it.
void PeftModel::delete_adapter(int adapter) {
  const std::string& name = layout_->adapters[adapter].name;
  if (!present_.contains(adapter)) throw OpError(Status::ValueError, "Adapter " + name + " does not exist");
  for (const auto& ly : layers_)
    for (int a : ly->merged)
      if (a == adapter)
        throw OpError(Status::ValueError, "Cannot delete adapter(s) ['" + name + "'] while they are merged. Please unmerge them first.");
  if (tuner_flags_reshard()) reshard_groups_without_merged();  // the fallback's flags reach the shards
  present_.erase(adapter);
  peft_config_.erase(std::find(peft_config_.begin(), peft_config_.end(), adapter));
  for (const auto& ls : layout_->layers)
    for (int p : ls.adapter_params(adapter)) (*params_)[p].registered = at::Tensor();
  bool first = true;
  AdapterSet tuner_active;
  const bool shared = layout_->profile.get(Switch::DeleteFallback) == sw::kShared;
  for (auto& ly : layers_) {
    if (!ly->tuner) continue;
    const bool was_active = ly->active.contains(adapter);
    ly->delete_adapter(adapter);
    if (first) tuner_active = ly->active;
    // delete_fallback=shared (docs/findings/delete-fallback-per-layer.patch): the first layer's pick on every layer.
    else if (shared && was_active && !(ly->active == tuner_active)) ly->set_adapter(tuner_active, false);
    first = false;
  }
  // ... then BaseTuner.delete_adapter freezes an active adapter whose config has inference_mode.
  for (size_t l = 0; shared && l < layout_->layers.size(); ++l) {
    const LayerSpec& ls = layout_->layers[l];
    for (int a : tuner_active & inference_mode_)
      if (ls.lora_a[a] >= 0 && params_->registered(ls.lora_a[a]).defined() && !wrappers_[l]->wrapped)
        for (int p : ls.adapter_params(a)) params_->set_requires_grad(p, false);
  }
  for (auto& w : wrappers_) w->delete_adapter(adapter, tuner_active);
  active_ = tuner_active;
  // PeftModel.delete_adapter follows only a single remaining active adapter.
  if (tuner_active.count() == 1) peft_active_ = tuner_active.first();
}

// The delta_weight op: get_delta_weight for each active adapter of the layer
// (lora/layer.py::Linear / ParamWrapper.get_delta_weight), each reported as it
// is computed; a raising one stops the op.
void PeftModel::delta_weight(int layer, OpResult* res) {
  const LayerSpec& ls = layout_->layers[layer];
  // tuners_utils.py::BaseTuner.active_adapters keeps set_adapter's list order: those first, then
  // any other active adapter in declaration order.
  std::vector<int> order = active_order_.only(active_).list();
  for (int a : active_.without(active_order_.set())) order.push_back(a);
  for (size_t a : order) {
    // The tuner's active adapters (BaseTuner.active_adapters), which a delete can leave
    // different from this layer's own list.
    if (!active_.contains(static_cast<int>(a)) || ls.lora_a[a] < 0 || !params_->registered(ls.lora_a[a]).defined()) continue;
    // B @ A on whatever is registered, judged by the observer against the full B @ A of every
    // rank's shards (observer.cpp): off a stale unsharded copy, or through an all-gather mixed
    // with another tensor's rows, the values are not the adapter's delta.
    DeltaValue got;
    at::Tensor d = layers_[layer]->delta_value(static_cast<int>(a), &got);
    d = d.detach().to(at::kFloat).contiguous();
    got.values.assign(d.data_ptr<float>(), d.data_ptr<float>() + d.numel());
    res->delta_layer = layer;
    res->delta_values.push_back(std::move(got));
    res->deltas.push_back({layout_->adapters[a].name});  // its class: the observer's
  }
}

}  // namespace fsdpsim::real
