// PeftModel / BaseTuner level ops (peft/peft_model.py, peft/tuners/tuners_utils.py).
// The order of reshards, unmerges and flips is what the profile switches choose.
#include "model/machine/peft_model.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "model/machine/provenance.hpp"
#include "model/machine/version_token.hpp"

namespace fsdpsim {

// tuners_utils.py::set_adapter (module level): the modules_to_save wrappers first, then per
// layer in module order, unmerge if merged ("Adapter cannot be set when the model is merged"),
// then the layer's set_adapter.
Raise PeftModel::set_adapter_module_level(AdapterSet names, bool list_form, bool inference_mode) {
  // other.py::_set_adapter: the modules_to_save wrappers first.
  for (size_t l = 0; l < p_.layers.size(); ++l)
    if (p_.layers[l].wrapper)
      if (Raise r = modules_to_save(static_cast<int>(l)).set_adapter_named(names, list_form, inference_mode))
        return r;
  for (size_t l = 0; l < p_.topo.layers.size(); ++l) {
    if (p_.layers[l].any_merged())
      if (Raise r = p_.layers[l].unmerge(layer_port(static_cast<int>(l)))) return r;
    p_.layers[l].set_adapter(layer_port(static_cast<int>(l)), names, inference_mode);
  }
  p_.config.active = names;
  return {};
}

// `set_adapter X`: peft_model.py::PeftModel.set_adapter. `set_adapter [..]`:
// tuners_utils.py::BaseTuner.set_adapter (no FSDP handling at all).
Raise PeftModel::set_adapter(const Op& op) {
  const AdapterSet names = adapters_named(op.names);
  // The profile's fix runs around the call, so before PeftModel.set_adapter's own check.
  if (!op.list_form) {
    switch (p_.topo.profile.get(Switch::SetAdapterReshard)) {
      case sw::kNone:  // peft 0.21.2 peft_model.py::PeftModel.set_adapter: no reshard (the upstream profile)
        break;
      case sw::kSkipMerged:
        // _reshard_fsdp_modules as of #3872: a module holding any merged layer is skipped.
        reshard_groups_without_merged();
        break;
      case sw::kUnmergeFirst:
        // #3895: unmerge_adapter, then reshard every FSDP module, then set_adapter.
        if (any_merged())
          if (Raise r = unmerge_adapter()) return r;  // get_delta_weight raised inside unmerge
        p_.fsdp.module_reshard_all();
        break;
    }
  }
  // PeftModel.set_adapter checks its peft_config; BaseTuner.set_adapter (the list form) checks
  // nothing: a name no layer has is simply part of the active list.
  if (!op.list_form && !p_.config.present.includes(names)) return raise(Status::ValueError, fmt::format("Adapter {} not found.", op.names[0]));
  // peft_model.py::PeftModel.set_adapter names its own active_adapter first.
  if (!op.list_form) p_.config.peft_active = static_cast<int8_t>(names.first());
  // tuner_flags_reshard=on (docs/findings/flag-on-copy.patch, module-level set_adapter, both forms):
  // every layer unmerges first, then every FSDP module reshards, so the flags reach the shards.
  if (tuner_flags_reshard()) {
    for (size_t l = 0; l < p_.topo.layers.size(); ++l)
      if (p_.layers[l].any_merged())
        if (Raise r = p_.layers[l].unmerge(layer_port(static_cast<int>(l)))) return r;
    reshard_groups_without_merged();
  }
  if (Raise r = set_adapter_module_level(names, op.list_form, false)) return r;
  p_.config.active_order = AdapterOrder::named(p_.topo.adapters, op.names);
  return {};
}

// tuners_utils.py::BaseTuner.merge_adapter -> each layer's merge(adapter_names);
// by default a layer merges its own active adapters, in the order set_adapter listed them
// (tuners_utils.py::check_adapters_to_merge returns the layer's active_adapters list).
Raise PeftModel::merge(const Op& op) {
  for (size_t l = 0; l < p_.topo.layers.size(); ++l) {
    if (op.names.empty()) {
      const AdapterSet active = p_.layers[l].active;
      std::vector<int> order = p_.config.active_order.only(active).list();
      for (int a : active.without(p_.config.active_order.set())) order.push_back(a);
      for (int a : order)
        if (Raise r = p_.layers[l].merge(layer_port(static_cast<int>(l)), a)) return r;
    } else {
      for (const auto& n : op.names)
        if (Raise r = p_.layers[l].merge(layer_port(static_cast<int>(l)), adapters_named({n}).first())) return r;
    }
  }
  return {};
}

// FSDPModule.reshard on every FSDP module that holds no merged layer (resharding would drop the
// merged weight): peft#3872's _reshard_fsdp_modules, and flag-on-copy.patch's _reshard_fsdp2_modules.
void PeftModel::reshard_groups_without_merged() {
  for (size_t g = 0; g < p_.topo.groups.size(); ++g) {
    bool merged = false;
    for (int l : p_.topo.groups[g].layers) merged = merged || p_.layers[l].any_merged();
    if (!merged) p_.fsdp.group(static_cast<int>(g)).reshard(p_.fsdp.context(static_cast<int>(g)));  // FSDPModule.reshard
  }
}

// tuner_flags_reshard=on: the tuner reshards before it writes adapter flags (flag-on-copy.patch:
// tuners_utils.py's module-level set_adapter, BaseTuner._enable_adapter_layers and delete_adapter).
bool PeftModel::tuner_flags_reshard() const { return p_.topo.profile.get(Switch::TunerFlagsReshard) == sw::kOn; }

// tuners_utils.py::BaseTuner.unmerge_adapter: every layer unmerges.
Raise PeftModel::unmerge_adapter() {
  for (size_t l = 0; l < p_.topo.layers.size(); ++l)
    if (Raise r = p_.layers[l].unmerge(layer_port(static_cast<int>(l)))) return r;
  return {};
}

// peft_model.py::PeftModel.disable_adapter (enter): peft_config[active_adapter], then
// disable_adapter_layers, no unmerge.
Raise PeftModel::disable_enter() {
  if (p_.config.disabled) return raise(Status::ValueError, "disable_enter inside disable_adapter(): the context is already entered");
  // Its first read is peft_config[self.active_adapter]: a name a delete left behind raises.
  if (p_.config.peft_active >= 0 && !p_.config.present.contains(p_.config.peft_active))
    return raise(Status::KeyError, fmt::format("KeyError: '{}'", p_.topo.adapters[p_.config.peft_active].name));
  // tuners_utils.py::BaseTuner.disable_adapter_layers, before any layer
  if (Raise r = active_without_config()) return r;
  if (tuner_flags_reshard()) reshard_groups_without_merged();  // _enable_adapter_layers(False)
  for (size_t l = 0; l < p_.topo.layers.size(); ++l) p_.layers[l].enable_adapters(layer_port(static_cast<int>(l)), false, p_.config.inference_mode);
  p_.config.disabled = true;
  return {};
}

// tuners_utils.py::BaseTuner.disable_adapter_layers and _mark_only_adapters_as_trainable read
// peft_config[name] (its bias) for each of the tuner's active adapters: a name a list-form
// set_adapter gave it without a config raises (crosscheck --world 3 --against upstream, seed 900098).
// In declaration order: the list's own order differs only with two such names.
Raise PeftModel::active_without_config() const {
  for (int a : p_.config.active)
    if (!p_.config.present.contains(a)) return raise(Status::KeyError, fmt::format("KeyError: '{}'", p_.topo.adapters[a].name));
  return {};
}

// peft_model.py::PeftModel.disable_adapter (exit): enable_adapter_layers. With
// disable_exit_reshard on (#3800), unmerge and reshard every module first, so
// the flips reach the shards.
Raise PeftModel::disable_exit() {
  if (!p_.config.disabled) return raise(Status::ValueError, "disable_exit outside disable_adapter(): no matching disable_enter");
  if (p_.topo.profile.get(Switch::DisableExitReshard) == sw::kOn) {
    if (any_merged())
      if (Raise r = unmerge_adapter()) return r;
    p_.fsdp.module_reshard_all();
  }
  if (tuner_flags_reshard()) reshard_groups_without_merged();  // _enable_adapter_layers(True)
  for (size_t l = 0; l < p_.topo.layers.size(); ++l) p_.layers[l].enable_adapters(layer_port(static_cast<int>(l)), true, p_.config.inference_mode);
  p_.config.disabled = false;
  return {};
}

// tuners_utils.py::BaseTuner.inject_adapter: places the new adapter
// (_move_adapter_to_device_of_base_layer), re-runs set_adapter(active) with the
// *new* config's inference_mode (unmerging merged layers on the way), and then
// restores the requires_grad it snapshotted of every parameter the modules
// registered before (named_parameters(recurse=False), the new adapter's
// excluded), except on the very first injection (get_peft_model's).
Raise PeftModel::inject_adapter(int adapter, bool inference_mode, bool first) {
  TrScope scope(site(), Tr::InjectAdapter);
  // mapping_existing_parameter_requires_grad; a buffer per thread (every reset injects each adapter)
  thread_local std::vector<std::pair<int, bool>> kept;
  kept.clear();
  if (!first)
    for (size_t p = 0; p < p_.topo.params.size(); ++p) {
      int a = p_.topo.params[p].adapter;
      if (a >= 0 && a != adapter && p_.params[p].present) kept.push_back({static_cast<int>(p), registered_rg(static_cast<int>(p))});
    }
  // Each target's lora/layer.py::LoraLayer.update_layer (LoraLayer::update_layer): what it leaves
  // stays where the housekeeping's set_adapter below raises (an unmerge) before reaching that
  // layer or at it (crosscheck --world 4 seed 41400026).
  for (size_t l = 0; l < p_.topo.layers.size() && !first; ++l)
    if (p_.topo.layers[l].A[adapter] >= 0) p_.layers[l].update_layer(layer_port(static_cast<int>(l)), adapter, inference_mode);
  for (size_t l = 0; l < p_.topo.layers.size(); ++l)
    if (p_.topo.layers[l].A[adapter] >= 0) p_.layers[l].tuner = true;
  p_.accelerator.place_new_adapter(adapter);
  // It passes its active_adapters, a list.
  if (Raise r = set_adapter_module_level(p_.config.active, true, inference_mode)) return r;  // an unmerge raised: no restore
  // tuners_utils.py::BaseTuner._mark_only_adapters_as_trainable comes next: no restore either.
  if (Raise r = active_without_config()) return r;
  // other.py::set_additional_trainable_modules -> _set_trainable on each layer the adapter lists.
  for (size_t l = 0; l < p_.topo.layers.size(); ++l)
    if (p_.topo.layers[l].SW[adapter] >= 0)
      modules_to_save(static_cast<int>(l)).add(adapter, inference_mode, p_.config.active.contains(adapter));
  for (const auto& [p, rg] : kept) set_registered_rg(p_.topo, p_.params, p_.groups, p, rg);
  return {};
}

// peft_model.py::PeftModel.add_adapter / load_adapter -> BaseTuner.inject_adapter.
// After fully_shard the new A, B are plain tensors no FSDP group manages. The
// new adapter is inactive, so frozen; load_adapter(is_trainable=True) then calls
// PeftModel.set_requires_grad(adapter_name), which makes it trainable.
Raise PeftModel::add_adapter(int adapter, bool inference_mode, bool load, bool trainable) {
  if (load && p_.config.present.contains(adapter)) return load_into_existing(adapter);
  if (p_.config.present.contains(adapter))
    return raise(Status::ValueError, fmt::format("Adapter with name {} already exists.", p_.topo.adapters[adapter].name));
  // peft lora/model.py::LoraModel._check_new_adapter_config, first thing inject_adapter does.
  const std::string conflict = target_parameters_conflict(p_.topo.target_parameters, p_.topo.adapters, adapter, p_.config.present.bits());
  if (!conflict.empty()) return raise(Status::ValueError, conflict);
  // peft tuners/lora/layer.py::LoraLayer.update_layer: new nn.Linear modules; torch
  // _fsdp_init.py::_get_managed_states ran at fully_shard, so no group manages them and the
  // group keeps the deleted module's FSDPParam.
  auto create_in = [&](const LayerInfo& li) {
    for (int p : li.tensors(adapter)) {
      FsdpParam& ps = p_.params[p];
      if (p_.prepared && p_.topo.params[p].group >= 0 && !ps.detached) ps.keep_ghost();
      // Loaded weights differ from a fresh init, except an init=zero B: the checkpoint is that
      // adapter's own fresh init, saved (peft lora/layer.py::LoraLayer.reset_lora_parameters), so B is zero.
      const bool zero_b = p_.topo.params[p].kind == ParamKind::LoraB && p_.topo.adapters[adapter].init == LoraInit::Zero;
      ps.recreate(load && !zero_b ? version::kLoaded : 0u);
      // A graph recorded before a delete_adapter holds the deleted Parameter: the next backward
      // writes its grad there, not into this new object (crosscheck seed 880700).
      p_.graph_grad[p] = 0;
    }
  };
  // A refused injection is not atomic: inject_adapter has already injected the targets before
  // the refused one; each LoRA layer's update_layer ran its set_adapter with the new config's
  // inference_mode, and the housekeeping that follows (set_adapter on the model, the
  // requires_grad restore) never runs. PeftModel.add_adapter then drops only the config: the
  // adapter is in those layers but not in the model.
  auto partial = [&](int l) {
    create_in(p_.topo.layers[l]);
    p_.layers[l].update_layer(layer_port(l), adapter, inference_mode);
  };
  // add_adapter_rollback=on (docs/findings/half-added-adapter.patch): the requires_grad of every
  // registered parameter before the injection, for the rollback to restore (roll_back_injection).
  const bool rollback = p_.topo.profile.get(Switch::AddAdapterRollback) == sw::kOn;
  std::vector<std::pair<int, bool>> before;
  for (size_t p = 0; p < p_.topo.params.size() && rollback; ++p)
    if (p_.topo.params[p].adapter >= 0 && p_.params[p].present) before.push_back({static_cast<int>(p), registered_rg(static_cast<int>(p))});
  auto refused_by = [&](Raise r) {
    if (rollback) roll_back_injection(adapter, before);
    return r;
  };
  // peft tuners_utils.py::BaseTuner.inject_adapter matches target_modules against module paths:
  // after prepare a checkpointed layer's path holds the checkpoint_wrapper, which
  // lora/model.py::LoraModel._create_new_module refuses (not a supported module type).
  for (size_t w = 0; w < p_.topo.layers.size() && p_.prepared; ++w) {
    const LayerInfo& lw = p_.topo.layers[w];
    if (!lw.checkpoint || lw.A[adapter] < 0) continue;
    for (size_t l = 0; l < w; ++l)
      if (p_.topo.layers[l].experts == 0 && p_.topo.layers[l].A[adapter] >= 0) partial(static_cast<int>(l));
    p_.accelerator.place_new_adapter(adapter, false);  // _cast_adapter_dtype comes after the injection: never reached
    // The module's repr spans lines; its first line is the message. fully_shard renamed the wrapper's class.
    return refused_by(raise(Status::ValueError,
                            fmt::format("Target module {}(", p_.topo.groups[lw.group].is_root ? "CheckpointWrapper" : "FSDPCheckpointWrapper")));
  }
  // peft tuners_utils.py::BaseTuner._inject_parameters reuses a ParamWrapper only by its class
  // name, which fully_shard changed (FSDPParamWrapper) on a module it was given: it raises. A
  // ParamWrapper made after fully_shard (around the FSDP module) keeps its name.
  int refused = -1;
  for (size_t l = 0; l < p_.topo.layers.size() && p_.prepared && refused < 0; ++l) {
    const LayerInfo& li = p_.topo.layers[l];
    if (li.experts > 0 && li.A[adapter] >= 0 && p_.layers[l].tuner && !p_.topo.groups[li.group].is_root && !li.wrapper_after_fsdp)
      refused = static_cast<int>(l);
  }
  if (refused >= 0) {
    // Linear targets come first (target_modules), then the experts targets before this one.
    for (size_t l = 0; l < p_.topo.layers.size(); ++l)
      if (p_.topo.layers[l].experts == 0 && p_.topo.layers[l].A[adapter] >= 0) partial(static_cast<int>(l));
    for (int l = 0; l < refused; ++l)
      if (p_.topo.layers[l].experts > 0 && p_.topo.layers[l].A[adapter] >= 0) partial(l);
    p_.accelerator.place_new_adapter(adapter, false);  // _cast_adapter_dtype comes after the injection: never reached
    return refused_by(raise(Status::ValueError, fmt::format("Trying to wrap an `nn.Parameter` of layer '{}' of type Experts, which is not a "
                                                 "valid target. Make sure that this layer is not also targeted with "
                                                 "`target_modules`. For some models, PEFT will do this automatically, try setting "
                                                 "`target_modules=[]` to prevent it.",
                                                 p_.topo.layers[refused].name.str())));
  }
  // peft_model.py::PeftModel.add_adapter: peft_config[name] = config, a dict key at the end
  p_.config.present.insert(adapter);
  p_.config.config_order.push_back(adapter);
  p_.config.inference_mode.set(adapter, inference_mode);
  for (const auto& li : p_.topo.layers)
    if (li.A[adapter] >= 0) create_in(li);
  // peft_model.py::PeftModel.add_adapter drops the config of an injection that raised.
  if (Raise r = inject_adapter(adapter, inference_mode, false)) {
    p_.config.present.erase(adapter);
    p_.config.config_order.erase(adapter);
    return r;
  }
  if (!load) return {};
  if (trainable) {
    // peft_model.py::PeftModel.load_adapter: set_requires_grad(adapter_name) when is_trainable
    for (const auto& li : p_.topo.layers) {
      if (li.A[adapter] < 0) continue;
      for (int p : li.tensors(adapter)) set_registered_rg(p_.topo, p_.params, p_.groups, p, true);
    }
  }
  return load_state_dict_hooks();
}

// set_peft_model_state_dict -> model.load_state_dict, whose FSDP pre-hook
// (torch _fsdp_param_group.py::FSDPParamGroup._register_state_dict_hooks) reshards every group.
Raise PeftModel::load_state_dict_hooks() {
  if (p_.prepared) p_.fsdp.reshard_all();
  // Its post-hook on every managed module (torch _fsdp_param.py::FSDPParam.reset_sharded_param)
  // reads `_local_tensor` off the registered parameter: a group the pre-hook could not reshard
  // (its lazy init's dtype check raised before the hooks) still registers U, a plain Parameter.
  for (const FsdpParamGroup& g : p_.groups)
    if (g.unsharded() && !g.state_dict_hooks)
      return raise(Status::Exception, "AttributeError: 'Parameter' object has no attribute '_local_tensor'");
  return {};
}

// peft_model.py::PeftModel.load_adapter of a name already in peft_config: no add_adapter and no
// set_requires_grad (is_trainable only picks eval()); set_peft_model_state_dict copies the
// checkpoint into the adapter's existing tensors (the objects the optimizer holds), a managed one
// taking its chunk of the full tensor (save_and_load.py::_reshard_dtensor_values_for_load).
Raise PeftModel::load_into_existing(int adapter) {
  if (p_.prepared) p_.fsdp.reshard_all();  // the pre-hook runs before the copy
  for (const auto& li : p_.topo.layers) {
    if (li.A[adapter] < 0) continue;
    for (int p : li.tensors(adapter)) {
      FsdpParam& ps = p_.params[p];
      if (!ps.present) continue;
      // the checkpoint is the adapter's own fresh init, saved: an init=zero B is zero
      const bool zero_b = p_.topo.params[p].kind == ParamKind::LoraB && p_.topo.adapters[adapter].init == LoraInit::Zero;
      ps.ver_s = zero_b ? 0u : version::kLoaded;
      ps.drift = 0;  // every rank reads the same file
    }
  }
  return load_state_dict_hooks();
}

// add_adapter_rollback=on, docs/findings/half-added-adapter.patch's PeftModel.add_adapter rollback:
// BaseTunerLayer.delete_adapter on every layer the refused injection reached (a layer made for the
// new adapter alone, active on it, falls back to nothing and stays an empty LoRA layer), then the
// requires_grad taken before the injection, on the same registered objects (nothing resharded since).
void PeftModel::roll_back_injection(int adapter, const std::vector<std::pair<int, bool>>& before) {
  for (size_t l = 0; l < p_.topo.layers.size(); ++l) {
    const LayerInfo& li = p_.topo.layers[l];
    if (li.A[adapter] < 0 || !p_.params[li.A[adapter]].present) continue;
    for (int p : li.tensors(adapter)) p_.params[p].present = false;
    LoraLayer& lp = p_.layers[l];
    if (!lp.active.contains(adapter)) continue;
    AdapterSet next = lp.active.without(AdapterSet::of(adapter));
    for (int a = 0; a < p_.topo.n_adapters() && next.empty(); ++a)  // sorted(_all_available_adapter_names())[0]
      if (li.A[a] >= 0 && p_.params[li.A[a]].present) {
        int best = a;
        for (int b = a + 1; b < p_.topo.n_adapters(); ++b)
          if (li.A[b] >= 0 && p_.params[li.A[b]].present && p_.topo.adapters[b].name < p_.topo.adapters[best].name) best = b;
        next = AdapterSet::of(best);
      }
    lp.set_adapter(layer_port(static_cast<int>(l)), next, false);
  }
  for (const auto& [p, rg] : before) set_registered_rg(p_.topo, p_.params, p_.groups, p, rg);
}

// tuners_utils.py::BaseTuner.delete_adapter: refuses merged adapters; then
// module-level delete_adapter calls BaseTunerLayer.delete_adapter on every
// tuner layer: a layer whose active list held the deleted adapter keeps the
// rest of it, or falls back to the first of ITS OWN remaining adapters in sorted
// order (_all_available_adapter_names), made trainable by the layer's
// set_adapter. The tuner's active adapter becomes the first tuner layer's list
// (module order), so layers may end with different active adapters. FSDP's
// group keeps the parameters it manages: they are still all-gathered.
Raise PeftModel::delete_adapter(int adapter) {
  const std::string& name = p_.topo.adapters[adapter].name;
  if (!p_.config.present.contains(adapter)) return raise(Status::ValueError, fmt::format("Adapter {} does not exist", name));
  for (const auto& lp : p_.layers)
    if (lp.is_merged(adapter))
      return raise(Status::ValueError, fmt::format("Cannot delete adapter(s) ['{}'] while they are merged. Please unmerge them first.", name));
  if (tuner_flags_reshard()) reshard_groups_without_merged();  // the fallback's flags reach the shards
  p_.config.present.erase(adapter);
  p_.config.config_order.erase(adapter);
  for (const auto& li : p_.topo.layers)
    for (int p : li.tensors(adapter)) p_.params[p].present = false;
  bool first = true;
  AdapterSet tuner_active;
  const bool shared = p_.topo.profile.get(Switch::DeleteFallback) == sw::kShared;
  for (size_t l = 0; l < p_.topo.layers.size(); ++l) {
    LoraLayer& lp = p_.layers[l];
    if (!lp.tuner) continue;
    const bool was_active = lp.active.contains(adapter);
    if (was_active) {
      AdapterSet next = lp.active.without(AdapterSet::of(adapter));
      if (next.empty()) {
        const LayerInfo& li = p_.topo.layers[l];
        int best = -1;  // sorted(this layer's own adapters)[0]
        for (int a = 0; a < p_.topo.n_adapters(); ++a)
          if (li.A[a] >= 0 && p_.params[li.A[a]].present &&
              (best < 0 || p_.topo.adapters[a].name < p_.topo.adapters[best].name))
            best = a;
        next = best < 0 ? AdapterSet{} : AdapterSet::of(best);
        TrScope fallback(site(), Tr::DeleteFallback);
        p_.layers[l].set_adapter(layer_port(static_cast<int>(l)), next, false);
      } else {
        p_.layers[l].set_adapter(layer_port(static_cast<int>(l)), next, false);
      }
    }
    if (first) tuner_active = lp.active;  // module-level delete_adapter returns the first layer's active_adapters
    // delete_fallback=shared (docs/findings/delete-fallback-per-layer.patch): a later layer that lost its
    // active adapter takes the first layer's pick, as BaseTunerLayer.delete_adapter's docstring asks.
    else if (shared && was_active && !(lp.active == tuner_active)) {
      TrScope fallback(site(), Tr::DeleteFallback);
      lp.set_adapter(layer_port(static_cast<int>(l)), tuner_active, false);
    }
    first = false;
  }
  // ... and BaseTuner.delete_adapter freezes again an active adapter whose config has inference_mode
  // (BaseTuner.set_requires_grad over the LoRA layers): part of the fallback, blamed on it.
  if (shared) {
    TrScope refreeze(site(), Tr::DeleteFallback);
    for (size_t l = 0; l < p_.topo.layers.size(); ++l) {
      const LayerInfo& li = p_.topo.layers[l];
      for (int a : tuner_active & p_.config.inference_mode)
        if (li.A[a] >= 0 && p_.params[li.A[a]].present && !p_.layers[l].wrapper)
          for (int p : li.tensors(a)) set_registered_rg(p_.topo, p_.params, p_.groups, p, false);
    }
  }
  // tuners_utils.py::_delete_auxiliary_adapter on each wrapper holding a copy of it.
  for (size_t l = 0; l < p_.layers.size(); ++l)
    if (p_.layers[l].wrapper && p_.layers[l].copies.contains(adapter))
      if (Raise r = modules_to_save(static_cast<int>(l)).delete_adapter(adapter, tuner_active)) return r;
  p_.config.active = tuner_active;
  // peft_model.py::PeftModel.delete_adapter: its own active_adapter follows only when exactly one
  // adapter stays active; else it keeps naming the deleted one (the next forward's KeyError).
  if (tuner_active.count() == 1) p_.config.peft_active = static_cast<int8_t>(tuner_active.first());
  return {};
}

// The delta_weight op: get_delta_weight for each active adapter of the layer
// (lora/layer.py::Linear / ParamWrapper.get_delta_weight).
Raise PeftModel::delta_weight(int layer, AdapterOrder* deltas) {
  const LayerInfo& li = p_.topo.layers[layer];
  // tuners_utils.py::BaseTuner.active_adapters keeps set_adapter's list order (a delete drops its
  // name in place): those first, then any other active adapter in declaration order.
  AdapterOrder order = p_.config.active_order.only(p_.config.active);
  for (int a = 0; a < p_.topo.n_adapters(); ++a)
    if (p_.config.active.contains(a)) order.push_back(a);
  for (int i = 0; i < kMaxAdapters && order.at(i) >= 0; ++i) {
    const int a = order.at(i);
    // The tuner's active adapters (BaseTuner.active_adapters), not the layer's own list: after a
    // delete the two can differ, and the caller asks the model which adapters are active.
    if (!p_.config.active.contains(a) || li.A[a] < 0 || !p_.params[li.A[a]].present) continue;
    if (Raise r = p_.layers[layer].get_delta_weight(layer_port(layer), a, 0, &p_.corrupt_deltas)) return r;
    deltas->push_back(a);
    // Read off an unsharded copy the optimizer has stepped past (or rows no rank holds), B @ A
    // is not the adapter's delta: the adapter is what its shards hold. A copy gathered from
    // ranks whose shards differed, and unchanged since, is exactly those shards. ParamWrapper's
    // einsum reads the same registered lora_A / lora_B weights (lora/layer.py::ParamWrapper.
    // get_delta_weight; crosscheck seed 39500015, world 1).
    const FsdpParam& pa = p_.params[li.A[a]];
    const FsdpParam& pb = p_.params[li.B[a]];
    if (p_.dtensor.is_registered_u(li.A[a]) && !pa.detached && (pa.u_stale() || pb.u_stale()))
      p_.corrupt_deltas.insert(a);
  }
  return {};
}

// Rows of p's object on this rank: its local rows while a group manages it, else the whole tensor.
int64_t PeftModel::own_rows(int p) const {
  return p_.dtensor.group_of(p) >= 0 ? p_.topo.params[p].local_rows(p_.rank) : p_.topo.params[p].dim0;
}

int64_t saved_rows(const Topology& topo, const std::vector<FsdpParam>& params, int p, int rank) {
  const ParamInfo& pi = topo.params[p];
  bool local = topo.profile.get(Switch::AdapterSaveGather) == sw::kOff && managing_group(topo, params, p) >= 0 && topo.world > 1;
  return local ? pi.local_rows(rank) : pi.dim0;
}

// peft_model.py::PeftModel.save_pretrained -> get_peft_model_state_dict, which
// starts from model.state_dict(): its FSDP pre-hook reshards every group. With
// no names every adapter is saved (adapter_save_selection all), or only the
// active ones (accelerate's non-FSDP2 adapter_only path). Rank 0 writes.
Raise PeftModel::save_adapters(const Op& op) {
  const AdapterSet names = !op.names.empty() ? adapters_named(op.names)
                           : p_.topo.profile.get(Switch::AdapterSaveSelection) == sw::kActive ? p_.config.active
                                                                                              : p_.config.present;
  if (!p_.config.present.includes(names))
    return raise(Status::ValueError, fmt::format("selected adapters are not in the model: {}", names.without(p_.config.present).text(p_.topo.adapters)));
  p_.fsdp.reshard_all();
  ++p_.file.saves;
  p_.file.saved_adapters = names;
  // peft_model.py::PeftModel.save_pretrained walks selected_adapters as given, else
  // list(peft_config): the file holds the adapters in that order.
  p_.file.saved_order = !op.names.empty() ? AdapterOrder::named(p_.topo.adapters, op.names) : p_.config.config_order.only(names);
  const bool gather = p_.topo.profile.get(Switch::AdapterSaveGather) == sw::kOn;
  for (size_t p = 0; p < p_.topo.params.size(); ++p) {
    int a = p_.topo.params[p].adapter;
    // peft utils/save_and_load.py::get_peft_model_state_dict matches the state dict's keys
    // against module paths, which under checkpoint_wrapper hold `_checkpoint_wrapped_module.`
    // while the keys have it stripped: a checkpointed layer's tensors are silently left out.
    // (the full state dict is gathered before that filter: the dropped tensors are gathered too)
    // save_and_load.py::_filter_state_dict_for_adapter_name drops the keys of the OTHER adapters
    // in peft_config only: the tensors an add_adapter injected before it raised (its config
    // rolled back) pass, and go into each saved adapter's state dict.
    const bool orphan = a >= 0 && !p_.config.present.contains(a) && !names.empty();
    const bool selected = a >= 0 && (names.contains(a) || orphan) && p_.params[p].present;
    // save_key_prefixes=wrappers_stripped (docs/findings/save-skips-checkpointed-layers.patch): the
    // module names drop the wrapper's segment as the keys do, and the tensors are saved.
    const bool saved = selected && (!p_.topo.layers[p_.topo.params[p].layer].checkpoint ||
                                    p_.topo.profile.get(Switch::SaveKeyPrefixes) == sw::kWrappersStripped);
    p_.file.saved_ver[p] = p_.params[p].ver_s;
    p_.file.saved_drift[p] = p_.params[p].drift;
    p_.file.saved_rows[p] = saved ? saved_rows(p_.topo, p_.params, static_cast<int>(p), 0) : -1;
    p_.file.saved_own_rows[p] = own_rows(static_cast<int>(p));
  }
  // DCP's full state dict all-gathers each managed tensor (DTensor.full_tensor) in
  // model.state_dict() order: per layer lora_A then lora_B, each in injection order
  // (torch distributed/checkpoint/state_dict.py::_get_model_state_dict; crosscheck seed 460440).
  if (gather)
    for (int p : p_.topo.state_dict_order) {
      const int a = p_.topo.params[p].adapter;
      // DTensor.full_tensor gathers in the parameter's own dtype (a merge gathers fp32 copies)
      if (a >= 0 && names.contains(a) && p_.params[p].present && p_.dtensor.group_of(p) >= 0)
        p_.dtensor.all_gather(p, CollRecord::kNowhere, -1, a, 0, -1, p_.params[p].dtype);
    }
  return {};
}

// A managed parameter of a checkpointed layer: peft utils/save_and_load.py::
// _reshard_dtensor_values_for_load looks the key up in model.named_parameters(), whose names
// keep `_checkpoint_wrapped_module.` while the key has it stripped (save_key_prefixes=
// wrappers_stripped saved it), so the plain tensor reaches load_state_dict as it is: torch's
// _load_from_state_dict then records a size mismatch (rank 0's local rows) or DTensor's
// "got mixed torch.Tensor and DTensor" from copy_ (the full tensor), and copies nothing.
static bool dtensor_load_refused(const Topology& topo, int p, int group) {
  return group >= 0 && topo.layers[topo.params[p].layer].checkpoint;
}

// peft_model.py::PeftModel.load_adapter -> set_peft_model_state_dict ->
// load_state_dict (its FSDP pre-hook reshards), adapter by adapter, on rank 0's
// file. utils/save_and_load.py::_reshard_dtensor_values_for_load first turns a
// plain tensor meant for a DTensor parameter into one: the GLOBAL shape is
// sharded (this rank takes its chunk), this rank's LOCAL shard shape is wrapped
// as this rank's shard as is (DTensor.from_local, no check: rank r > 0 then
// holds rank 0's rows); any other shape meets torch's size-mismatch error,
// raised after the adapter's fitting tensors were copied (later adapters are
// not loaded). reload_diff: what differs from what this rank held at save time.
Raise PeftModel::load_adapters(bool rank0_file_missing, std::vector<int>* reload_diff) {
  // A save that selected no adapter still wrote a file (of none): only a rank that never saved has none.
  if (p_.file.saves == 0) return raise(Status::ValueError, "no adapters were saved (save_adapters first)");
  // A rank r > 0 reads the file rank 0's save of the same number wrote; rank 0 never wrote it.
  if (rank0_file_missing) return raise(Status::ValueError, "no adapters were saved (save_adapters first)");
  // peft utils/save_and_load.py::set_peft_model_state_dict, once per saved adapter in the file's
  // order, reads peft_config[adapter_name] first: an adapter deleted since the save raises
  // KeyError there, after the adapters before it loaded (each load_state_dict's FSDP pre-hook
  // reshards). A size mismatch raises after its adapter's fitting tensors were copied.
  const std::vector<int> file = p_.file.saved_order.list();
  size_t reach = 0;  // file[0, reach) are looked up
  int missing = -1;
  while (reach < file.size() && missing < 0) {
    if (!p_.config.present.contains(file[reach])) missing = file[reach];
    ++reach;
  }
  if (missing >= 0) --reach;  // its lookup raised: nothing of it loads
  if (reach > 0) p_.fsdp.reshard_all();
  std::vector<uint8_t> reached(p_.topo.params.size(), 0);  // this load wrote the parameter
  bool size_mismatch = false;
  for (size_t i = 0; i < reach && !size_mismatch; ++i) {
    for (size_t p = 0; p < p_.topo.params.size(); ++p) {
      const ParamInfo& pi = p_.topo.params[p];
      FsdpParam& ps = p_.params[p];
      // a half-added adapter's tensors were saved under each adapter's keys; set_peft_model_state_dict
      // maps them back to that adapter's own parameters: they reload with the first adapter loaded
      const bool orphan = pi.adapter >= 0 && !p_.file.saved_adapters.contains(pi.adapter) && i == 0;
      if ((pi.adapter != file[i] && !orphan) || p_.file.saved_rows[p] < 0 || !ps.present) continue;
      const int a = pi.adapter;
      const int64_t rows0 = p_.file.saved_rows[p];  // rows of rank 0's saved tensor
      if (dtensor_load_refused(p_.topo, static_cast<int>(p), p_.dtensor.group_of(static_cast<int>(p)))) {
        size_mismatch = true;  // collected like a size mismatch: the adapter's other tensors still load
      } else if (rows0 == pi.dim0) {
        ps.ver_s = p_.file.saved_ver[p];  // this rank's chunk of the full saved values
        // A whole replica takes rank 0's copy: every rank holds the same values again.
        if (p_.dtensor.group_of(static_cast<int>(p)) < 0) ps.drift = p_.file.saved_drift[p] ? kRank0Copy : 0;
        reached[p] = 1;
      } else if (p_.dtensor.group_of(static_cast<int>(p)) >= 0 && rows0 == pi.local_rows(p_.rank)) {
        // rank 0's rows wrapped as this rank's shard: rank 0 gets its own back, the others values no rank
        // held (except a B still exactly zero under init=zero: rank 0's rows are zeros too)
        const bool zero_b = pi.kind == ParamKind::LoraB && p_.file.saved_ver[p] == 0 && p_.topo.adapters[a].init == LoraInit::Zero;
        ps.ver_s = p_.rank == 0 || zero_b ? p_.file.saved_ver[p] : version::foreign_rows(p_.file.saved_ver[p], p_.rank);
        reached[p] = 1;
      } else {
        // torch nn/modules/module.py::Module.load_state_dict gathers every size mismatch and raises one
        // RuntimeError after the loop (raised below): the adapter's fitting tensors are still copied.
        size_mismatch = true;
      }
    }
  }
  // A rank holding only padding rows of a parameter holds nothing that could differ.
  // A whole replica per-rank gradients moved apart differs from rank 0's copy on every other rank
  // once the load wrote it: what that rank trained is thrown away. One the load never reached
  // keeps this rank's own values. An adapter deleted and added again since the save is a new
  // whole tensor where a group's shard was saved: another shape, so other values.
  for (size_t p = 0; p < p_.topo.params.size(); ++p) {
    const bool replaced_replica = reached[p] && p_.rank > 0 && p_.file.saved_drift[p] != 0 && p_.dtensor.group_of(static_cast<int>(p)) < 0;
    const bool reshaped = own_rows(static_cast<int>(p)) != p_.file.saved_own_rows[p];
    if (p_.file.saved_rows[p] >= 0 && p_.params[p].present &&
        (p_.params[p].ver_s != p_.file.saved_ver[p] || replaced_replica || reshaped) && p_.dtensor.holds_rows(static_cast<int>(p), p_.rank))
      reload_diff->push_back(static_cast<int>(p));
  }
  // The raise comes after reload_diff on purpose: the copies made before it are observable.
  // Its first line names the module (upstream: FSDPPeftModel).
  if (size_mismatch) return raise(Status::Exception, "RuntimeError: Error(s) in loading state_dict for FSDPPeftModel:");
  if (missing >= 0) return raise(Status::KeyError, fmt::format("KeyError: '{}'", p_.topo.adapters[missing].name));
  return {};
}

// peft mapping.py::get_peft_model, then PeftModel.add_adapter for each later declared adapter:
// tuners_utils.py::BaseTuner.inject_adapter per declared adapter. get_peft_model's sets the active
// one's requires_grad from its inference_mode; each later one restores every existing flag, so
// only the first adapter's config counts.
void PeftModel::get_peft_model() {
  p_.config.active = AdapterSet::of(0);  // the first adapter (get_peft_model's) is active
  p_.config.peft_active = 0;
  bool first = true;
  for (int a = 0; a < p_.topo.n_adapters(); ++a) {
    const AdapterDecl& d = p_.topo.adapters[a];
    if (d.deferred) continue;
    p_.config.present.insert(a);
    p_.config.config_order.push_back(a);
    if (d.inference_mode) p_.config.inference_mode.insert(a);
    static_cast<void>(inject_adapter(a, d.inference_mode, first));  // nothing is merged yet: nothing raises
    first = false;
  }
}

// A layer's own parameters on this rank (LayerParams).
LayerParams PeftModel::layer_params(int layer) const { return LayerParams{p_.topo, layer, p_.params, p_.groups, p_.prepared}; }

// What a layer's transitions reach on this rank (LayerPort).
LayerPort PeftModel::layer_port(int layer) const { return LayerPort{layer_params(layer), p_.dtensor, site()}; }

// The modules_to_save wrapper on `layer` (its state is the layer's).
ModulesToSaveWrapper PeftModel::modules_to_save(int layer) const { return ModulesToSaveWrapper(layer_params(layer), p_.prov, p_.layers[layer]); }

bool PeftModel::any_merged() const {
  return std::any_of(p_.layers.begin(), p_.layers.end(), [](const LoraLayer& l) { return l.any_merged(); });
}

Raise PeftModel::raise(Status s, std::string msg) const { return raise_at(p_.prov, s, std::move(msg)); }

}  // namespace fsdpsim
