// PeftModel's adapter checkpoints on one rank (peft/utils/save_and_load.py under
// peft_model.py::PeftModel.save_pretrained / load_adapter): what rank 0's file holds, what a load
// copies back into the adapters' tensors, and the FSDP state-dict hooks around it. The adapter
// lifecycle (set_adapter, merge, add, delete, disable) is peft_model.cpp's.
#include "model/machine/peft_model.hpp"

#include <fmt/format.h>

#include "model/machine/provenance.hpp"
#include "model/machine/version_token.hpp"

namespace fsdpsim {

// set_peft_model_state_dict -> model.load_state_dict, whose FSDP pre-hook
// (torch _fsdp_param_group.py::FSDPParamGroup._register_state_dict_hooks) reshards every group.
Raise PeftModel::load_state_dict_hooks() {
  if (p_.tree.prepared) p_.fsdp.reshard_all();
  // Its post-hook on every managed module (torch _fsdp_param.py::FSDPParam.reset_sharded_param)
  // reads `_local_tensor` off the registered parameter: a group the pre-hook could not reshard
  // (its lazy init's dtype check raised before the hooks) still registers U, a plain Parameter.
  for (const FsdpParamGroup& g : p_.fsdp.groups())
    if (g.unsharded() && !g.state_dict_hooks)
      return raise(Status::Exception, "AttributeError: 'Parameter' object has no attribute '_local_tensor'");
  return {};
}

// peft_model.py::PeftModel.load_adapter of a name already in peft_config: no add_adapter and no
// set_requires_grad (is_trainable only picks eval()); set_peft_model_state_dict copies the
// checkpoint into the adapter's existing tensors (the objects the optimizer holds), a managed one
// taking its chunk of the full tensor (save_and_load.py::_reshard_dtensor_values_for_load).
Raise PeftModel::load_into_existing(int adapter) {
  if (p_.tree.prepared) p_.fsdp.reshard_all();  // the pre-hook runs before the copy
  for (const auto& li : p_.tree.topo.layers) {
    if (li.A[adapter] < 0) continue;
    for (int p : li.tensors(adapter)) {
      FsdpParam& ps = p_.tree.params[p];
      if (!ps.present) continue;
      // the checkpoint is the adapter's own fresh init, saved: an init=zero B is zero
      const bool zero_b = p_.tree.topo.params[p].kind == ParamKind::LoraB && p_.tree.topo.adapters[adapter].init == LoraInit::Zero;
      ps.ver_s = zero_b ? 0u : version::kLoaded;
      ps.drift = 0;  // every rank reads the same file
      ps.nan_rows = false;
    }
  }
  return load_state_dict_hooks();
}

// Rows of p's object on this rank: its local rows while a group manages it, else the whole tensor.
int64_t PeftModel::own_rows(int p) const {
  return p_.dtensor.group_of(p) >= 0 ? p_.tree.topo.params[p].local_rows(p_.dtensor.rank()) : p_.tree.topo.params[p].dim0;
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
                           : p_.tree.topo.profile.get(Switch::AdapterSaveSelection) == sw::kActive ? p_.config.active
                                                                                              : p_.config.present;
  if (!p_.config.present.includes(names))
    return raise(Status::ValueError, fmt::format("selected adapters are not in the model: {}", names.without(p_.config.present).text(p_.tree.topo.adapters)));
  p_.fsdp.reshard_all();
  ++p_.file.saves;
  p_.file.saved_adapters = names;
  // peft_model.py::PeftModel.save_pretrained walks selected_adapters as given, else
  // list(peft_config): the file holds the adapters in that order.
  p_.file.saved_order = !op.names.empty() ? AdapterOrder::named(p_.tree.topo.adapters, op.names) : p_.config.config_order.only(names);
  const bool gather = p_.tree.topo.profile.get(Switch::AdapterSaveGather) == sw::kOn;
  for (size_t p = 0; p < p_.tree.topo.params.size(); ++p) {
    int a = p_.tree.topo.params[p].adapter;
    // peft utils/save_and_load.py::get_peft_model_state_dict matches the state dict's keys
    // against module paths, which under checkpoint_wrapper hold `_checkpoint_wrapped_module.`
    // while the keys have it stripped: a checkpointed layer's tensors are silently left out.
    // (the full state dict is gathered before that filter: the dropped tensors are gathered too)
    // save_and_load.py::_filter_state_dict_for_adapter_name drops the keys of the OTHER adapters
    // in peft_config only: the tensors an add_adapter injected before it raised (its config
    // rolled back) pass, and go into each saved adapter's state dict.
    const bool orphan = a >= 0 && !p_.config.present.contains(a) && !names.empty();
    const bool selected = a >= 0 && (names.contains(a) || orphan) && p_.tree.params[p].present;
    // save_key_prefixes=wrappers_stripped (docs/findings/save-skips-checkpointed-layers.patch): the
    // module names drop the wrapper's segment as the keys do, and the tensors are saved.
    const bool saved = selected && (!p_.tree.topo.layers[p_.tree.topo.params[p].layer].checkpoint ||
                                    p_.tree.topo.profile.get(Switch::SaveKeyPrefixes) == sw::kWrappersStripped);
    p_.file.saved_ver[p] = p_.tree.params[p].ver_s;
    p_.file.saved_drift[p] = p_.tree.params[p].drift;
    p_.file.saved_rows[p] = saved ? saved_rows(p_.tree.topo, p_.tree.params, static_cast<int>(p), 0) : -1;
    p_.file.saved_own_rows[p] = own_rows(static_cast<int>(p));
    p_.file.saved_nan[p] = p_.tree.params[p].nan_rows;
  }
  // DCP's full state dict all-gathers each managed tensor (DTensor.full_tensor) in
  // model.state_dict() order: per layer lora_A then lora_B, each in injection order
  // (torch distributed/checkpoint/state_dict.py::_get_model_state_dict; crosscheck seed 460440).
  if (gather)
    for (int p : p_.tree.topo.state_dict_order) {
      const int a = p_.tree.topo.params[p].adapter;
      // DTensor.full_tensor gathers in the parameter's own dtype (a merge gathers fp32 copies)
      if (a >= 0 && names.contains(a) && p_.tree.params[p].present && p_.dtensor.group_of(p) >= 0)
        p_.dtensor.all_gather(p, CollRecord::kNowhere, -1, a, 0, -1, p_.tree.params[p].dtype);
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
Raise PeftModel::load_adapters(bool rank0_file_missing, const AdapterFile* rank0_first, std::vector<int>* reload_diff) {
  // A save that selected no adapter still wrote a file (of none): only a rank that never saved has
  // no record of one. Rank 0 then has no file; a rank r > 0 reads rank 0's first (PEFT's
  // load_adapter reads whatever the path holds), knowing of it only what the file says.
  const bool recorded = p_.file.saves > 0;
  if (!recorded && (p_.dtensor.rank() == 0 || rank0_first == nullptr))
    return raise(Status::ValueError, "no adapters were saved (save_adapters first)");
  // A rank r > 0 reads the file rank 0's save of the same number wrote; rank 0 never wrote it.
  if (rank0_file_missing) return raise(Status::ValueError, "no adapters were saved (save_adapters first)");
  const AdapterFile& f = recorded ? p_.file : *rank0_first;
  // peft utils/save_and_load.py::set_peft_model_state_dict, once per saved adapter in the file's
  // order, reads peft_config[adapter_name] first: an adapter deleted since the save raises
  // KeyError there, after the adapters before it loaded (each load_state_dict's FSDP pre-hook
  // reshards). A size mismatch raises after its adapter's fitting tensors were copied.
  const std::vector<int> file = f.saved_order.list();
  size_t reach = 0;  // file[0, reach) are looked up
  int missing = -1;
  while (reach < file.size() && missing < 0) {
    if (!p_.config.present.contains(file[reach])) missing = file[reach];
    ++reach;
  }
  if (missing >= 0) --reach;  // its lookup raised: nothing of it loads
  if (reach > 0) p_.fsdp.reshard_all();
  std::vector<uint8_t> reached(p_.tree.topo.params.size(), 0);  // this load wrote the parameter
  bool size_mismatch = false;
  for (size_t i = 0; i < reach && !size_mismatch; ++i) {
    for (size_t p = 0; p < p_.tree.topo.params.size(); ++p) {
      const ParamInfo& pi = p_.tree.topo.params[p];
      FsdpParam& ps = p_.tree.params[p];
      // a half-added adapter's tensors were saved under each adapter's keys; set_peft_model_state_dict
      // maps them back to that adapter's own parameters: they reload with the first adapter loaded
      const bool orphan = pi.adapter >= 0 && !f.saved_adapters.contains(pi.adapter) && i == 0;
      if ((pi.adapter != file[i] && !orphan) || f.saved_rows[p] < 0 || !ps.present) continue;
      const int a = pi.adapter;
      const int64_t rows0 = f.saved_rows[p];  // rows of rank 0's saved tensor
      if (dtensor_load_refused(p_.tree.topo, static_cast<int>(p), p_.dtensor.group_of(static_cast<int>(p)))) {
        size_mismatch = true;  // collected like a size mismatch: the adapter's other tensors still load
      } else if (rows0 == pi.dim0) {
        ps.ver_s = f.saved_ver[p];  // this rank's chunk of the full saved values
        // its NaN rows too, where it held them; a whole replica takes rank 0's copy, which never does
        ps.nan_rows = f.saved_nan[p] && p_.dtensor.group_of(static_cast<int>(p)) >= 0;
        // A whole replica takes rank 0's copy: every rank holds the same values again.
        if (p_.dtensor.group_of(static_cast<int>(p)) < 0) ps.drift = f.saved_drift[p] ? kRank0Copy : 0;
        reached[p] = 1;
      } else if (p_.dtensor.group_of(static_cast<int>(p)) >= 0 && rows0 == pi.local_rows(p_.dtensor.rank())) {
        // rank 0's rows wrapped as this rank's shard: rank 0 gets its own back, the others values no rank
        // held (except a B still exactly zero under init=zero: rank 0's rows are zeros too)
        const bool zero_b = pi.kind == ParamKind::LoraB && f.saved_ver[p] == 0 && p_.tree.topo.adapters[a].init == LoraInit::Zero;
        ps.ver_s = p_.dtensor.rank() == 0 || zero_b ? f.saved_ver[p] : version::foreign_rows(f.saved_ver[p], p_.dtensor.rank());
        ps.nan_rows = false;  // rank 0, the load's root, never held a NaN tail
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
  // whole tensor where a group's shard was saved: another shape, so other values. NaN rows, held
  // at the save or now, equal nothing (crosscheck seed 40333, world 2).
  // A rank that kept no record of the save has nothing to compare with (the upstream pool's
  // reload_expect is empty there).
  for (size_t p = 0; p < p_.tree.topo.params.size() && recorded; ++p) {
    const bool replaced_replica = reached[p] && p_.dtensor.rank() > 0 && f.saved_drift[p] != 0 && p_.dtensor.group_of(static_cast<int>(p)) < 0;
    const bool reshaped = own_rows(static_cast<int>(p)) != f.saved_own_rows[p];
    const bool nan = f.saved_nan[p] || p_.tree.params[p].nan_rows;
    if (f.saved_rows[p] >= 0 && p_.tree.params[p].present &&
        (p_.tree.params[p].ver_s != f.saved_ver[p] || replaced_replica || reshaped || nan) && p_.dtensor.holds_rows(static_cast<int>(p), p_.dtensor.rank()))
      reload_diff->push_back(static_cast<int>(p));
  }
  // The raise comes after reload_diff on purpose: the copies made before it are observable.
  // Its first line names the module (upstream: FSDPPeftModel).
  if (size_mismatch) return raise(Status::Exception, "RuntimeError: Error(s) in loading state_dict for FSDPPeftModel:");
  if (missing >= 0) return raise(Status::KeyError, fmt::format("KeyError: '{}'", p_.tree.topo.adapters[missing].name));
  return {};
}

}  // namespace fsdpsim
