// The whole model's state dict on one rank: save_model (torch distributed/checkpoint/
// state_dict.py::get_model_state_dict, full or sharded) and load_model (set_model_state_dict, or
// nn.Module.load_state_dict of the full tensors as the threads of issue 51 did). Each rank keeps
// its own saved dict, as a script holding get_model_state_dict's result does; the keys are
// PEFT's module paths (`base_model.model.lin0.base_layer.weight`, `...lora_A.default.weight`),
// one per present parameter. The adapter checkpoints are save_and_load.cpp's.
#include <fmt/format.h>

#include "model/machine/peft_model.hpp"

namespace fsdpsim {

// get_model_state_dict -> model.state_dict(): its FSDP pre-hook reshards every group (torch
// _fsdp_param_group.py::FSDPParamGroup._register_state_dict_hooks). A full one then gathers each
// DTensor in state-dict order (state_dict.py::_get_model_state_dict -> _state_dict_utils.py::
// _gather_state_dict, a Shard -> Replicate redistribute per tensor, in the tensor's own dtype);
// a sharded one keeps the DTensors (each rank its own shard).
Raise PeftModel::save_model(const Op& op) {
  const bool full = op.names[0] == "full";
  if (p_.tree.prepared) p_.fsdp.reshard_all();
  std::vector<ModelStateEntry>& file = full ? p_.file.model_sd.full : p_.file.model_sd.sharded;
  file.assign(p_.tree.topo.params.size(), ModelStateEntry{});
  for (size_t p = 0; p < file.size(); ++p) {
    const FsdpParam& ps = p_.tree.params[p];
    const bool managed = p_.dtensor.group_of(static_cast<int>(p)) >= 0;
    file[p] = ModelStateEntry{ps.present, managed && !full, ps.nan_rows, ps.ver_s, ps.drift, ps.w_s};
  }
  if (!full) return {};
  // A tied output head's key holds the embedding's Parameter again (Module._save_to_state_dict
  // per module), and _gather_state_dict gathers per key, with no memo of a tensor already
  // gathered: the tied weight is all-gathered twice, the second time last. Both keys then hold
  // equal full tensors, so a reload writes the same values twice; the file keeps one entry.
  auto gather = [&](int p) {
    if (p_.tree.params[p].present && p_.dtensor.group_of(p) >= 0)
      p_.dtensor.all_gather(p, CollRecord::kNowhere, -1, p_.tree.topo.params[p].adapter, 0, -1, p_.tree.params[p].dtype);
  };
  for (int p : p_.tree.topo.state_dict_order) gather(p);
  if (p_.tree.topo.tied_head_param >= 0) gather(p_.tree.topo.tied_head_param);
  return {};
}

// load_model: the last save of its form. `full`: set_model_state_dict(full_state_dict=True)
// turns each saved full tensor into one like the model's parameter (state_dict.py::
// _load_model_state_dict -> _state_dict_utils.py::_distribute_state_dict) and fills a key the
// file lacks with the parameter's own value, so only a key of a parameter gone since the save
// raises (strict load_state_dict: unexpected key). `sharded`: the saved DTensors go to
// load_state_dict as they are; `plain`: the full tensors do. There torch nn/modules/module.py::
// Module._load_from_state_dict copies each value with param.copy_, which DTensor refuses for a
// plain tensor meeting a DTensor (distributed/tensor/_dispatch.py: "got mixed torch.Tensor and
// DTensor") and the other way round; each refusal, missing or unexpected key is collected and
// raised as one RuntimeError after every other tensor was copied. The FSDP pre-hook reshards first,
// but only inside load_state_dict: `full` shaped each value before, like the object the module
// registered then (state_dict.py::_iterate_valid_model_state), and a group left unsharded (a
// forward under reshard_after_forward=False) registers its plain unsharded tensor
// (_fsdp_param.py::FSDPParam.to_unsharded), so that value stays plain and meets the DTensor
// the pre-hook registers again: refused as a `sharded` one would be.
Raise PeftModel::load_model(const Op& op) {
  const std::string& form = op.names[0];
  const std::vector<ModelStateEntry>& file = form == "sharded" ? p_.file.model_sd.sharded : p_.file.model_sd.full;
  if (file.empty())
    return raise(Status::ValueError, fmt::format("no {} model state dict was saved (save_model {} first)",
                                                 form == "sharded" ? "sharded" : "full", form == "sharded" ? "sharded" : "full"));
  std::vector<uint8_t> plain_value(file.size(), 0);  // full: distributed like an unsharded copy U
  for (size_t p = 0; p < file.size() && form == "full" && p_.tree.prepared; ++p)
    plain_value[p] = p_.fsdp.is_registered_u(static_cast<int>(p));
  if (p_.tree.prepared) p_.fsdp.reshard_all();
  bool refused = false;
  for (size_t p = 0; p < file.size(); ++p) {
    FsdpParam& ps = p_.tree.params[p];
    const ModelStateEntry& e = file[p];
    const bool managed = p_.dtensor.group_of(static_cast<int>(p)) >= 0;
    if (e.present != ps.present) {
      // a key of a parameter gone since the save is unexpected; a missing one is refused unless
      // set_model_state_dict filled it from the model (full)
      refused = refused || e.present || form != "full";
      continue;
    }
    if (!ps.present) continue;
    const bool value_dtensor = form == "sharded" && e.managed;
    if ((form != "full" && value_dtensor != managed) || (plain_value[p] && managed)) {
      refused = true;  // copy_ of a plain tensor into a DTensor, or of a DTensor into a plain tensor
      continue;
    }
    ps.ver_s = e.ver;
    ps.w_s = e.w;
    // every rank saved the same full values; a replica keeps its own lineage
    ps.drift = managed ? 0 : e.drift;
    ps.nan_rows = e.nan_rows;
  }
  if (Raise r = load_state_dict_hooks()) return r;
  if (refused)
    return raise(Status::Exception, fmt::format("RuntimeError: Error(s) in loading state_dict for {}:",
                                                p_.tree.prepared ? "FSDPPeftModel" : "PeftModel"));
  return {};
}

}  // namespace fsdpsim
