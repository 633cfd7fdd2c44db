// PeftModel / BaseTuner level ops (peft/peft_model.py, peft/tuners/tuners_utils.py): the adapter
// lifecycle (set_adapter, merge, disable, add, delete, delta_weight); the adapter checkpoints are
// save_and_load.cpp's. The order of reshards, unmerges and flips is what the profile switches choose.
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
  for (size_t l = 0; l < p_.tree.layers.size(); ++l)
    if (p_.tree.layers[l].wrapper)
      if (Raise r = modules_to_save(static_cast<int>(l)).set_adapter_named(names, list_form, inference_mode))
        return r;
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l) {
    if (p_.tree.layers[l].any_merged())
      if (Raise r = p_.tree.layers[l].unmerge(layer_port(static_cast<int>(l)))) return r;
    p_.tree.layers[l].set_adapter(layer_port(static_cast<int>(l)), names, inference_mode);
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
    switch (p_.tree.topo.profile.get(Switch::SetAdapterReshard)) {
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
    for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l)
      if (p_.tree.layers[l].any_merged())
        if (Raise r = p_.tree.layers[l].unmerge(layer_port(static_cast<int>(l)))) return r;
    reshard_groups_without_merged();
  }
  if (Raise r = set_adapter_module_level(names, op.list_form, false)) return r;
  p_.config.active_order = AdapterOrder::named(p_.tree.topo.adapters, op.names);
  return {};
}

// tuners_utils.py::BaseTuner.merge_adapter -> each layer's merge(adapter_names);
// by default a layer merges its own active adapters, in the order set_adapter listed them
// (tuners_utils.py::check_adapters_to_merge returns the layer's active_adapters list).
Raise PeftModel::merge(const Op& op) {
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l) {
    if (op.names.empty()) {
      const AdapterSet active = p_.tree.layers[l].active;
      std::vector<int> order = p_.config.active_order.only(active).list();
      for (int a : active.without(p_.config.active_order.set())) order.push_back(a);
      for (int a : order)
        if (Raise r = p_.tree.layers[l].merge(layer_port(static_cast<int>(l)), a)) return r;
    } else {
      for (const auto& n : op.names)
        if (Raise r = p_.tree.layers[l].merge(layer_port(static_cast<int>(l)), adapters_named({n}).first())) return r;
    }
  }
  return {};
}

// tuners_utils.py::BaseTuner._unload_and_optionally_merge (merge_and_unload): layer by layer in
// module order, Linear.merge of the layer's active adapters (as merge_adapter's), then
// _replace_module puts its base layer in its place. The LoRA parameters leave the module tree
// (not present), but FSDP's groups keep their FSDPParams and gather them as a deleted adapter's;
// the base weight keeps the merged deltas and nothing lists them as merged any more. A merge that
// raises leaves that layer and those after it as they were. peft_config stays on the tuner
// (`del self.model.peft_config` removes the base model's copy), so the active adapter names do too.
Raise PeftModel::merge_and_unload() {
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l) {
    LoraLayer& lp = p_.tree.layers[l];
    if (!lp.tuner) continue;
    std::vector<int> order = p_.config.active_order.only(lp.active).list();
    for (int a : lp.active.without(p_.config.active_order.set())) order.push_back(a);
    for (int a : order)
      if (Raise r = lp.merge(layer_port(static_cast<int>(l)), a)) return r;
    for (int a = 0; a < p_.tree.topo.n_adapters(); ++a)
      for (int p : p_.tree.topo.layers[l].tensors(a)) p_.tree.params[p].present = false;
    lp = LoraLayer{};  // a plain Linear: no adapters, nothing merged, not a tuner layer
  }
  return {};
}

// FSDPModule.reshard on every FSDP module that holds no merged layer (resharding would drop the
// merged weight): peft#3872's _reshard_fsdp_modules, and flag-on-copy.patch's _reshard_fsdp2_modules.
void PeftModel::reshard_groups_without_merged() {
  for (size_t g = 0; g < p_.tree.topo.groups.size(); ++g) {
    bool merged = false;
    for (int l : p_.tree.topo.groups[g].layers) merged = merged || p_.tree.layers[l].any_merged();
    if (!merged) p_.fsdp.group(static_cast<int>(g)).reshard(p_.fsdp.context(static_cast<int>(g)));  // FSDPModule.reshard
  }
}

// tuner_flags_reshard=on: the tuner reshards before it writes adapter flags (flag-on-copy.patch:
// tuners_utils.py's module-level set_adapter, BaseTuner._enable_adapter_layers and delete_adapter).
bool PeftModel::tuner_flags_reshard() const { return p_.tree.topo.profile.get(Switch::TunerFlagsReshard) == sw::kOn; }

// tuners_utils.py::BaseTuner.unmerge_adapter: every layer unmerges.
Raise PeftModel::unmerge_adapter() {
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l)
    if (Raise r = p_.tree.layers[l].unmerge(layer_port(static_cast<int>(l)))) return r;
  return {};
}

// peft_model.py::PeftModel.disable_adapter (enter): peft_config[active_adapter], then
// disable_adapter_layers, no unmerge.
Raise PeftModel::disable_enter() {
  if (p_.config.disabled) return raise(Status::ValueError, "disable_enter inside disable_adapter(): the context is already entered");
  // Its first read is peft_config[self.active_adapter]: a name a delete left behind raises.
  if (p_.config.peft_active >= 0 && !p_.config.present.contains(p_.config.peft_active))
    return raise(Status::KeyError, fmt::format("KeyError: '{}'", p_.tree.topo.adapters[p_.config.peft_active].name));
  // tuners_utils.py::BaseTuner.disable_adapter_layers, before any layer
  if (Raise r = active_without_config()) return r;
  if (tuner_flags_reshard()) reshard_groups_without_merged();  // _enable_adapter_layers(False)
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l) p_.tree.layers[l].enable_adapters(layer_port(static_cast<int>(l)), false, p_.config.inference_mode);
  p_.config.disabled = true;
  return {};
}

// tuners_utils.py::BaseTuner.disable_adapter_layers and _mark_only_adapters_as_trainable read
// peft_config[name] (its bias) for each of the tuner's active adapters: a name a list-form
// set_adapter gave it without a config raises (crosscheck --world 3 --against upstream, seed 900098).
// In declaration order: the list's own order differs only with two such names.
Raise PeftModel::active_without_config() const {
  for (int a : p_.config.active)
    if (!p_.config.present.contains(a)) return raise(Status::KeyError, fmt::format("KeyError: '{}'", p_.tree.topo.adapters[a].name));
  return {};
}

// peft_model.py::PeftModel.disable_adapter (exit): enable_adapter_layers. With
// disable_exit_reshard on (#3800), unmerge and reshard every module first, so
// the flips reach the shards.
Raise PeftModel::disable_exit() {
  if (!p_.config.disabled) return raise(Status::ValueError, "disable_exit outside disable_adapter(): no matching disable_enter");
  if (p_.tree.topo.profile.get(Switch::DisableExitReshard) == sw::kOn) {
    if (any_merged())
      if (Raise r = unmerge_adapter()) return r;
    p_.fsdp.module_reshard_all();
  }
  if (tuner_flags_reshard()) reshard_groups_without_merged();  // _enable_adapter_layers(True)
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l) p_.tree.layers[l].enable_adapters(layer_port(static_cast<int>(l)), true, p_.config.inference_mode);
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
    for (size_t p = 0; p < p_.tree.topo.params.size(); ++p) {
      int a = p_.tree.topo.params[p].adapter;
      if (a >= 0 && a != adapter && p_.tree.params[p].present) kept.push_back({static_cast<int>(p), registered_rg(static_cast<int>(p))});
    }
  // Each target's lora/layer.py::LoraLayer.update_layer (LoraLayer::update_layer): what it leaves
  // stays where the housekeeping's set_adapter below raises (an unmerge) before reaching that
  // layer or at it (crosscheck --world 4 seed 41400026).
  for (size_t l = 0; l < p_.tree.topo.layers.size() && !first; ++l)
    if (p_.tree.topo.layers[l].A[adapter] >= 0) p_.tree.layers[l].update_layer(layer_port(static_cast<int>(l)), adapter, inference_mode);
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l)
    if (p_.tree.topo.layers[l].A[adapter] >= 0) p_.tree.layers[l].tuner = true;
  p_.accelerator.place_new_adapter(adapter);
  // It passes its active_adapters, a list.
  if (Raise r = set_adapter_module_level(p_.config.active, true, inference_mode)) return r;  // an unmerge raised: no restore
  // tuners_utils.py::BaseTuner._mark_only_adapters_as_trainable comes next: no restore either.
  if (Raise r = active_without_config()) return r;
  // other.py::set_additional_trainable_modules -> _set_trainable on each layer the adapter lists.
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l)
    if (p_.tree.topo.layers[l].SW[adapter] >= 0)
      modules_to_save(static_cast<int>(l)).add(adapter, inference_mode, p_.config.active.contains(adapter));
  for (const auto& [p, rg] : kept) set_registered_rg(p, rg);
  return {};
}

// peft_model.py::PeftModel.add_adapter / load_adapter -> BaseTuner.inject_adapter.
// After fully_shard the new A, B are plain tensors no FSDP group manages. The
// new adapter is inactive, so frozen; load_adapter(is_trainable=True) then calls
// PeftModel.set_requires_grad(adapter_name), which makes it trainable.
Raise PeftModel::add_adapter(int adapter, bool inference_mode, bool load, bool trainable, std::vector<uint8_t>& graph_grad) {
  if (load && p_.config.present.contains(adapter)) return load_into_existing(adapter);
  if (p_.config.present.contains(adapter))
    return raise(Status::ValueError, fmt::format("Adapter with name {} already exists.", p_.tree.topo.adapters[adapter].name));
  // peft lora/model.py::LoraModel._check_new_adapter_config, first thing inject_adapter does.
  const std::string conflict = target_parameters_conflict(p_.tree.topo.target_parameters, p_.tree.topo.adapters, adapter, p_.config.present.bits());
  if (!conflict.empty()) return raise(Status::ValueError, conflict);
  // peft tuners/lora/layer.py::LoraLayer.update_layer: new nn.Linear modules; torch
  // _fsdp_init.py::_get_managed_states ran at fully_shard, so no group manages them and the
  // group keeps the deleted module's FSDPParam.
  auto create_in = [&](const LayerInfo& li) {
    for (int p : li.tensors(adapter)) {
      FsdpParam& ps = p_.tree.params[p];
      if (p_.tree.prepared && p_.tree.topo.params[p].group >= 0 && !ps.detached) ps.keep_ghost();
      // Loaded weights differ from a fresh init, except an init=zero B: the checkpoint is that
      // adapter's own fresh init, saved (peft lora/layer.py::LoraLayer.reset_lora_parameters), so B is zero.
      const bool zero_b = p_.tree.topo.params[p].kind == ParamKind::LoraB && p_.tree.topo.adapters[adapter].init == LoraInit::Zero;
      ps.recreate(load && !zero_b ? version::kLoaded : 0u);
      // A graph recorded before a delete_adapter holds the deleted Parameter: the next backward
      // writes its grad there, not into this new object (crosscheck seed 880700).
      graph_grad[p] = 0;
    }
  };
  // A refused injection is not atomic: inject_adapter has already injected the targets before
  // the refused one; each LoRA layer's update_layer ran its set_adapter with the new config's
  // inference_mode, and the housekeeping that follows (set_adapter on the model, the
  // requires_grad restore) never runs. PeftModel.add_adapter then drops only the config: the
  // adapter is in those layers but not in the model.
  auto partial = [&](int l) {
    create_in(p_.tree.topo.layers[l]);
    p_.tree.layers[l].update_layer(layer_port(l), adapter, inference_mode);
  };
  // add_adapter_rollback=on (docs/findings/half-added-adapter.patch): the requires_grad of every
  // registered parameter before the injection, for the rollback to restore (roll_back_injection).
  const bool rollback = p_.tree.topo.profile.get(Switch::AddAdapterRollback) == sw::kOn;
  std::vector<std::pair<int, bool>> before;
  for (size_t p = 0; p < p_.tree.topo.params.size() && rollback; ++p)
    if (p_.tree.topo.params[p].adapter >= 0 && p_.tree.params[p].present) before.push_back({static_cast<int>(p), registered_rg(static_cast<int>(p))});
  auto refused_by = [&](Raise r) {
    if (rollback) roll_back_injection(adapter, before);
    return r;
  };
  // peft tuners_utils.py::BaseTuner.inject_adapter matches target_modules against module paths:
  // after prepare a checkpointed layer's path holds the checkpoint_wrapper, which
  // lora/model.py::LoraModel._create_new_module refuses (not a supported module type).
  for (size_t w = 0; w < p_.tree.topo.layers.size() && p_.tree.prepared; ++w) {
    const LayerInfo& lw = p_.tree.topo.layers[w];
    if (!lw.checkpoint || lw.A[adapter] < 0) continue;
    for (size_t l = 0; l < w; ++l)
      if (p_.tree.topo.layers[l].experts == 0 && p_.tree.topo.layers[l].A[adapter] >= 0) partial(static_cast<int>(l));
    p_.accelerator.place_new_adapter(adapter, false);  // _cast_adapter_dtype comes after the injection: never reached
    // The module's repr spans lines; its first line is the message. fully_shard renamed the wrapper's class.
    return refused_by(raise(Status::ValueError,
                            fmt::format("Target module {}(", p_.tree.topo.groups[lw.group].is_root ? "CheckpointWrapper" : "FSDPCheckpointWrapper")));
  }
  // peft tuners_utils.py::BaseTuner._inject_parameters reuses a ParamWrapper only by its class
  // name, which fully_shard changed (FSDPParamWrapper) on a module it was given: it raises. A
  // ParamWrapper made after fully_shard (around the FSDP module) keeps its name.
  int refused = -1;
  for (size_t l = 0; l < p_.tree.topo.layers.size() && p_.tree.prepared && refused < 0; ++l) {
    const LayerInfo& li = p_.tree.topo.layers[l];
    if (li.experts > 0 && li.A[adapter] >= 0 && p_.tree.layers[l].tuner && !p_.tree.topo.groups[li.group].is_root && !li.wrapper_after_fsdp)
      refused = static_cast<int>(l);
  }
  if (refused >= 0) {
    // Linear targets come first (target_modules), then the experts targets before this one.
    for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l)
      if (p_.tree.topo.layers[l].experts == 0 && p_.tree.topo.layers[l].A[adapter] >= 0) partial(static_cast<int>(l));
    for (int l = 0; l < refused; ++l)
      if (p_.tree.topo.layers[l].experts > 0 && p_.tree.topo.layers[l].A[adapter] >= 0) partial(l);
    p_.accelerator.place_new_adapter(adapter, false);  // _cast_adapter_dtype comes after the injection: never reached
    return refused_by(raise(Status::ValueError, fmt::format("Trying to wrap an `nn.Parameter` of layer '{}' of type Experts, which is not a "
                                                 "valid target. Make sure that this layer is not also targeted with "
                                                 "`target_modules`. For some models, PEFT will do this automatically, try setting "
                                                 "`target_modules=[]` to prevent it.",
                                                 p_.tree.topo.layers[refused].name.str())));
  }
  // peft_model.py::PeftModel.add_adapter: peft_config[name] = config, a dict key at the end
  p_.config.present.insert(adapter);
  p_.config.config_order.push_back(adapter);
  p_.config.inference_mode.set(adapter, inference_mode);
  for (const auto& li : p_.tree.topo.layers)
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
    for (const auto& li : p_.tree.topo.layers) {
      if (li.A[adapter] < 0) continue;
      for (int p : li.tensors(adapter)) set_registered_rg(p, true);
    }
  }
  return load_state_dict_hooks();
}

// add_adapter_rollback=on, docs/findings/half-added-adapter.patch's PeftModel.add_adapter rollback:
// BaseTunerLayer.delete_adapter on every layer the refused injection reached (a layer made for the
// new adapter alone, active on it, falls back to nothing and stays an empty LoRA layer), then the
// requires_grad taken before the injection, on the same registered objects (nothing resharded since).
void PeftModel::roll_back_injection(int adapter, const std::vector<std::pair<int, bool>>& before) {
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l) {
    const LayerInfo& li = p_.tree.topo.layers[l];
    if (li.A[adapter] < 0 || !p_.tree.params[li.A[adapter]].present) continue;
    for (int p : li.tensors(adapter)) p_.tree.params[p].present = false;
    LoraLayer& lp = p_.tree.layers[l];
    if (!lp.active.contains(adapter)) continue;
    AdapterSet next = lp.active.without(AdapterSet::of(adapter));
    for (int a = 0; a < p_.tree.topo.n_adapters() && next.empty(); ++a)  // sorted(_all_available_adapter_names())[0]
      if (li.A[a] >= 0 && p_.tree.params[li.A[a]].present) {
        int best = a;
        for (int b = a + 1; b < p_.tree.topo.n_adapters(); ++b)
          if (li.A[b] >= 0 && p_.tree.params[li.A[b]].present && p_.tree.topo.adapters[b].name < p_.tree.topo.adapters[best].name) best = b;
        next = AdapterSet::of(best);
      }
    lp.set_adapter(layer_port(static_cast<int>(l)), next, false);
  }
  for (const auto& [p, rg] : before) set_registered_rg(p, rg);
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
  const std::string& name = p_.tree.topo.adapters[adapter].name;
  if (!p_.config.present.contains(adapter)) return raise(Status::ValueError, fmt::format("Adapter {} does not exist", name));
  for (const auto& lp : p_.tree.layers)
    if (lp.is_merged(adapter))
      return raise(Status::ValueError, fmt::format("Cannot delete adapter(s) ['{}'] while they are merged. Please unmerge them first.", name));
  if (tuner_flags_reshard()) reshard_groups_without_merged();  // the fallback's flags reach the shards
  p_.config.present.erase(adapter);
  p_.config.config_order.erase(adapter);
  for (const auto& li : p_.tree.topo.layers)
    for (int p : li.tensors(adapter)) p_.tree.params[p].present = false;
  bool first = true;
  AdapterSet tuner_active;
  const bool shared = p_.tree.topo.profile.get(Switch::DeleteFallback) == sw::kShared;
  for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l) {
    LoraLayer& lp = p_.tree.layers[l];
    if (!lp.tuner) continue;
    const bool was_active = lp.active.contains(adapter);
    if (was_active) {
      AdapterSet next = lp.active.without(AdapterSet::of(adapter));
      if (next.empty()) {
        const LayerInfo& li = p_.tree.topo.layers[l];
        int best = -1;  // sorted(this layer's own adapters)[0]
        for (int a = 0; a < p_.tree.topo.n_adapters(); ++a)
          if (li.A[a] >= 0 && p_.tree.params[li.A[a]].present &&
              (best < 0 || p_.tree.topo.adapters[a].name < p_.tree.topo.adapters[best].name))
            best = a;
        next = best < 0 ? AdapterSet{} : AdapterSet::of(best);
        TrScope fallback(site(), Tr::DeleteFallback);
        p_.tree.layers[l].set_adapter(layer_port(static_cast<int>(l)), next, false);
      } else {
        p_.tree.layers[l].set_adapter(layer_port(static_cast<int>(l)), next, false);
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
    for (size_t l = 0; l < p_.tree.topo.layers.size(); ++l) {
      const LayerInfo& li = p_.tree.topo.layers[l];
      for (int a : tuner_active & p_.config.inference_mode)
        if (li.A[a] >= 0 && p_.tree.params[li.A[a]].present && !p_.tree.layers[l].wrapper)
          for (int p : li.tensors(a)) set_registered_rg(p, false);
    }
  }
  // tuners_utils.py::_delete_auxiliary_adapter on each wrapper holding a copy of it.
  for (size_t l = 0; l < p_.tree.layers.size(); ++l)
    if (p_.tree.layers[l].wrapper && p_.tree.layers[l].copies.contains(adapter))
      if (Raise r = modules_to_save(static_cast<int>(l)).delete_adapter(adapter, tuner_active)) return r;
  p_.config.active = tuner_active;
  // peft_model.py::PeftModel.delete_adapter: its own active_adapter follows only when exactly one
  // adapter stays active; else it keeps naming the deleted one (the next forward's KeyError).
  if (tuner_active.count() == 1) p_.config.peft_active = static_cast<int8_t>(tuner_active.first());
  return {};
}

// The delta_weight op: get_delta_weight for each active adapter of the layer
// (lora/layer.py::Linear / ParamWrapper.get_delta_weight).
Raise PeftModel::delta_weight(int layer, AdapterOrder* deltas, AdapterSet* corrupt_deltas) {
  const LayerInfo& li = p_.tree.topo.layers[layer];
  // tuners_utils.py::BaseTuner.active_adapters keeps set_adapter's list order (a delete drops its
  // name in place): those first, then any other active adapter in declaration order.
  AdapterOrder order = p_.config.active_order.only(p_.config.active);
  for (int a = 0; a < p_.tree.topo.n_adapters(); ++a)
    if (p_.config.active.contains(a)) order.push_back(a);
  for (int i = 0; i < kMaxAdapters && order.at(i) >= 0; ++i) {
    const int a = order.at(i);
    // The tuner's active adapters (BaseTuner.active_adapters), not the layer's own list: after a
    // delete the two can differ, and the caller asks the model which adapters are active.
    if (!p_.config.active.contains(a) || li.A[a] < 0 || !p_.tree.params[li.A[a]].present) continue;
    if (Raise r = p_.tree.layers[layer].get_delta_weight(layer_port(layer), a, 0, corrupt_deltas)) return r;
    deltas->push_back(a);
    // Read off an unsharded copy the optimizer has stepped past (or rows no rank holds), B @ A
    // is not the adapter's delta: the adapter is what its shards hold. A copy gathered from
    // ranks whose shards differed, and unchanged since, is exactly those shards. ParamWrapper's
    // einsum reads the same registered lora_A / lora_B weights (lora/layer.py::ParamWrapper.
    // get_delta_weight; crosscheck seed 39500015, world 1).
    const FsdpParam& pa = p_.tree.params[li.A[a]];
    const FsdpParam& pb = p_.tree.params[li.B[a]];
    if (p_.dtensor.is_registered_u(li.A[a]) && !pa.detached && (pa.u_stale() || pb.u_stale()))
      corrupt_deltas->insert(a);
  }
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
  for (int a = 0; a < p_.tree.topo.n_adapters(); ++a) {
    const AdapterDecl& d = p_.tree.topo.adapters[a];
    if (d.deferred) continue;
    p_.config.present.insert(a);
    p_.config.config_order.push_back(a);
    if (d.inference_mode) p_.config.inference_mode.insert(a);
    static_cast<void>(inject_adapter(a, d.inference_mode, first));  // nothing is merged yet: nothing raises
    first = false;
  }
}

// A layer's own parameters on this rank (LayerParams).
LayerParams PeftModel::layer_params(int layer) const { return LayerParams{p_.tree.topo, layer, p_.tree.params, p_.fsdp.groups(), p_.tree.prepared}; }

// What a layer's transitions reach on this rank (LayerPort).
LayerPort PeftModel::layer_port(int layer) const { return LayerPort{layer_params(layer), p_.dtensor, site()}; }

// The modules_to_save wrapper on `layer` (its state is the layer's).
ModulesToSaveWrapper PeftModel::modules_to_save(int layer) const { return ModulesToSaveWrapper(layer_params(layer), p_.prov, p_.tree.layers[layer]); }

bool PeftModel::any_merged() const {
  return std::any_of(p_.tree.layers.begin(), p_.tree.layers.end(), [](const LoraLayer& l) { return l.any_merged(); });
}

Raise PeftModel::raise(Status s, std::string msg) const { return raise_at(p_.prov, s, std::move(msg)); }

}  // namespace fsdpsim
