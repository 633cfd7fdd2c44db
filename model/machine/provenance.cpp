// Provenance recording (provenance.hpp): the transition table and the transitions'
// scope, drop and raise notes. Only runs with a Provenance attached.
#include "model/machine/provenance.hpp"

#include <array>

#include "model/machine/rank_state.hpp"

namespace fsdpsim {

const TrInfo& tr_info(Tr t) {
  static const std::array<TrInfo, static_cast<size_t>(Tr::kCount)> table = {{
      {"none", ""},
      {"prepare", "torch distributed/fsdp/_fully_shard/_fully_shard.py::fully_shard (accelerate prepare)"},
      {"forward", "torch _fully_shard/_fsdp_state.py::FSDPState._pre_forward / _post_forward"},
      {"eval", "torch _fsdp_state.py::FSDPState._pre_forward / _post_forward under torch.no_grad"},
      {"backward", "torch autograd backward with _fsdp_state.py::FSDPState._pre_backward"},
      {"optimizer_step", "torch optim/adamw.py::AdamW.step"},
      {"zero_grad", "torch nn/modules/module.py::Module.zero_grad"},
      {"merge_adapter", "peft tuners/tuners_utils.py::BaseTuner.merge_adapter"},
      {"unmerge_adapter", "peft tuners/tuners_utils.py::BaseTuner.unmerge_adapter"},
      {"set_adapter", "peft peft_model.py::PeftModel.set_adapter"},
      {"base_model.set_adapter", "peft tuners/tuners_utils.py::BaseTuner.set_adapter"},
      {"disable_adapter-enter", "peft peft_model.py::PeftModel.disable_adapter (enter: disable_adapter_layers)"},
      {"disable_adapter-exit", "peft peft_model.py::PeftModel.disable_adapter (exit: enable_adapter_layers)"},
      {"add_adapter", "peft peft_model.py::PeftModel.add_adapter"},
      {"load_adapter", "peft peft_model.py::PeftModel.load_adapter"},
      {"delete_adapter", "peft peft_model.py::PeftModel.delete_adapter"},
      {"reshard", "torch _fully_shard/_fully_shard.py::FSDPModule.reshard"},
      {"unshard", "torch _fully_shard/_fully_shard.py::FSDPModule.unshard"},
      {"state_dict", "torch _fsdp_param_group.py::FSDPParamGroup._register_state_dict_hooks (pre-hook)"},
      {"save_optimizer", "torch distributed/checkpoint/state_dict.py::get_optimizer_state_dict"},
      {"load_optimizer", "torch distributed/checkpoint/state_dict.py::set_optimizer_state_dict"},
      {"save_adapters", "peft utils/save_and_load.py::get_peft_model_state_dict"},
      {"load_adapters", "peft utils/save_and_load.py::set_peft_model_state_dict"},
      {"delta_weight", "peft tuners/lora/layer.py::Linear.get_delta_weight"},
      {"gradient_sync", "torch _fully_shard/_fully_shard.py::FSDPModule.set_requires_gradient_sync"},
      {"new_optimizer", "torch optim/adamw.py::AdamW.__init__"},
      {"save_model", "torch distributed/checkpoint/state_dict.py::get_model_state_dict"},
      {"load_model", "torch distributed/checkpoint/state_dict.py::set_model_state_dict / nn/modules/module.py::Module.load_state_dict"},
      {"generate", "torch autograd/grad_mode.py::no_grad around nn/modules/module.py::Module.__call__, once per step"},
      {"merge_and_unload", "peft tuners/tuners_utils.py::BaseTuner._unload_and_optionally_merge"},
      {"inject_adapter", "peft tuners/tuners_utils.py::BaseTuner.inject_adapter"},
      {"delete_adapter-fallback", "peft tuners/tuners_utils.py::BaseTunerLayer.delete_adapter"},
      {"disabled-forward-unmerge", "peft tuners/lora/layer.py::Linear.forward"},
      {"enable_adapters", "peft tuners/tuners_utils.py::BaseTunerLayer.enable_adapters"},
      {"to_unsharded", "torch _fully_shard/_fsdp_param.py::FSDPParam.to_unsharded"},
      {"to_sharded", "torch _fully_shard/_fsdp_param.py::FSDPParam.to_sharded"},
      {"post_backward", "torch _fully_shard/_fsdp_param_group.py::FSDPParamGroup.post_backward"},
      {"post_backward-unsynced", "torch _fsdp_param_group.py::FSDPParamGroup.post_backward (reduce_grads False)"},
      {"init_mp_dtypes", "torch _fully_shard/_fsdp_param_group.py::FSDPParamGroup._init_mp_dtypes"},
      {"checkpoint-recompute", "torch utils/checkpoint.py::_checkpoint_hook (recompute metadata check)"},
      {"get_delta_weight", "peft tuners/lora/layer.py::Linear.get_delta_weight / ParamWrapper.get_delta_weight"},
      {"reduce-dtype-unset", "torch _fully_shard/_fsdp_param_group.py::FSDPParamGroup._init_mp_dtypes (nothing trainable: None)"},
      {"dora-data-assign", "peft tuners/lora/variants.py::DoraLinearVariant.merge_unsafe / lora/layer.py::Linear.unmerge (`.data =` on the DTensor shard)"},
  }};
  return table[static_cast<size_t>(t)];
}

bool is_mechanism(Tr t) {
  switch (t) {
    case Tr::InjectAdapter:
    case Tr::DeleteFallback:
    case Tr::DisabledForwardUnmerge:
    case Tr::EnableAdapters:
    case Tr::ToUnsharded:
    case Tr::PostBackwardReduce:
    case Tr::PostBackwardUnsynced:
    case Tr::CheckpointRecompute:
    case Tr::ReduceDtypeUnset:
    case Tr::DoraDataAssign:
      return true;
    default:
      return false;
  }
}

void Provenance::reset(size_t n_params, size_t n_layers, size_t n_groups) {
  params.assign(n_params, ParamTags{});
  layer_merged.assign(n_layers, Stamp{});
  layer_active.assign(n_layers, Stamp{});
  raised_steps.clear();
  group_unsharded.assign(n_groups, Stamp{});
  deferred.clear();
  raised = Raised{};
  graph_step = 0;
  graph_merged = false;
  wedged_step = 0;
  wedged_site = Tr::None;
  stack.clear();
  step_ = 0;
  seq_ = 0;
}

namespace {

uint32_t merged_word(const LoraLayer& l) {
  uint32_t bits = 0;
  for (int i = 0; i < l.n_merged; ++i) bits |= 1u << l.merged[i];
  return static_cast<uint32_t>(l.n_merged) | bits << 8;
}

// Stamps `t` with `s` unless an inner scope already did since the scope began.
void restamp(Stamp& t, const Stamp& s, uint32_t since) {
  if (t.seq <= since) t = s;
}

}  // namespace

void TrScope::enter(Tr t) {
  site_.prov->stack.push_back(t);
  snap_.params = *site_.params;
  snap_.merged_counts.clear();
  snap_.active.clear();
  for (const auto& l : *site_.layers) {
    snap_.merged_counts.push_back(static_cast<int>(merged_word(l)));
    snap_.active.push_back(static_cast<uint32_t>(l.active.bits()));
  }
  seq_ = site_.prov->seq();
}

void TrScope::leave() {
  Provenance& pv = *site_.prov;
  const std::vector<FsdpParam>& params = *site_.params;
  const std::vector<LoraLayer>& layers = *site_.layers;
  const Stamp s = pv.stamp();
  for (size_t p = 0; p < params.size() && p < snap_.params.size(); ++p) {
    const FsdpParam& a = snap_.params[p];
    const FsdpParam& b = params[p];
    ParamTags& t = pv.params[p];
    if (a.rg_s != b.rg_s) restamp(t.rg_s, s, seq_);
    if (a.rg_u != b.rg_u) restamp(t.rg_u, s, seq_);
    if (a.w_s != b.w_s) restamp(t.w_s, s, seq_);
    if (a.w_u != b.w_u) restamp(t.w_u, s, seq_);
    if (a.ver_s != b.ver_s) restamp(t.ver_s, s, seq_);
    if (a.present != b.present || a.recreated != b.recreated || a.detached != b.detached) restamp(t.present, s, seq_);
    if (a.grad_s != b.grad_s) restamp(t.grad_s, s, seq_);
    if (a.grad_u != b.grad_u) restamp(t.grad_u, s, seq_);
    if (a.device != b.device || a.dtype != b.dtype) restamp(t.meta, s, seq_);
  }
  for (size_t l = 0; l < layers.size() && l < snap_.merged_counts.size(); ++l)
    if (static_cast<int>(merged_word(layers[l])) != snap_.merged_counts[l]) restamp(pv.layer_merged[l], s, seq_);
  for (size_t l = 0; l < layers.size() && l < snap_.active.size(); ++l)
    if (static_cast<uint32_t>(layers[l].active.bits()) != snap_.active[l]) restamp(pv.layer_active[l], s, seq_);
  pv.stack.pop_back();
}

// FSDPParam.to_sharded registers S again: whatever was written on U since the
// all-gather and differs from S is gone. The dropper is the user's call running.
void Provenance::note_drops(const std::vector<FsdpParam>& fsdp_params, const std::vector<int>& group_params) {
  const Tr dropper = stack.empty() ? Tr::None : stack.front();
  for (int p : group_params) {
    const FsdpParam& ps = fsdp_params[p];
    if (ps.detached) continue;
    ParamTags& t = params[p];
    auto writer = [](const Stamp& s) { return s.mech != Tr::None ? s.mech : s.by; };
    if (ps.rg_u != ps.rg_s) t.rg_drop = Drop{t.rg_u.op, writer(t.rg_u), dropper, step(), next_seq()};
    if (ps.w_u != ps.w_s) t.w_drop = Drop{t.w_u.op, writer(t.w_u), dropper, step(), next_seq()};
  }
}

Raise raise_at(Provenance* prov, Status s, std::string msg) {
  if (prov) prov->note_raise();
  return Raise(s, std::move(msg));
}

void Provenance::note_raise() {
  raised.op = stack.empty() ? Tr::None : stack.front();
  raised.site = stack.empty() ? Tr::None : stack.back();
  raised.step = step();
  if (raised_steps.empty() || raised_steps.back() != step()) raised_steps.push_back(step());
  if ((raised.site == Tr::CheckpointRecompute || raised.site == Tr::PostBackwardReduce || raised.site == Tr::ReduceDtypeUnset) && !wedged_step) {
    wedged_step = step();
    wedged_site = raised.site;
  }
}

}  // namespace fsdpsim
