// FSDP2's state-level transitions over every group of the rank (_fsdp_state.py::FSDPState:
// the root's lazy init, the final backward callback, the state-dict hook) and the context
// the groups' own transitions run in (FsdpParamGroup, fsdp_param_group.cpp). Each names the
// upstream function it mirrors.
#include "model/machine/fsdp_state.hpp"

#include <algorithm>

#include "model/machine/optimizer.hpp"

namespace fsdpsim {

GroupContext FsdpState::context(int g) const { return GroupContext{topo_, rank_, g, params_, log_, st_, scope_}; }

// torch 2.13 _fsdp_state.py::FSDPState._lazy_init: once, at the root's first pre-forward (it marks
// itself root before the groups' lazy_init, so a raise there is never retried), every group in
// all_states order (root first).
Raise FsdpState::lazy_init() const {
  if (st_.root_lazy_inited || !st_.prepared) return {};  // before prepare no FSDP state exists
  st_.root_lazy_inited = true;
  for (size_t g = 0; g < topo_.groups.size(); ++g) {
    if (Raise r = validate_no_meta_params(static_cast<int>(g))) return r;
    if (Raise r = st_.groups[g].init_mp_dtypes(context(static_cast<int>(g)))) return r;
  }
  return {};
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._validate_no_meta_params, the first check of the
// group's lazy_init: a shard still on meta (a rank > 0 whose RAM-efficient load accelerate skipped for
// a 4-bit model) raises, naming the group's meta parameters.
Raise FsdpState::validate_no_meta_params(int g) const {
  std::string names;
  // torch's FSDPParam._param_fqn: a LoRA-wrapped layer's own weight and bias sit under its base_layer.
  auto fqn = [&](int p) {
    const ParamInfo& pi = topo_.params[p];
    const LayerInfo& li = topo_.layers[pi.layer];
    const bool wrapped = std::any_of(li.A.begin(), li.A.begin() + topo_.n_adapters(), [](int a) { return a >= 0; });
    if (is_lora(pi.kind) || !wrapped || (pi.kind != ParamKind::Weight && pi.kind != ParamKind::Bias)) return fqn_of(pi);
    return "base_model.model." + li.name.str() + (pi.kind == ParamKind::Weight ? ".base_layer.weight" : ".base_layer.bias");
  };
  // FSDPParam._param_fqn is None until the root's lazy init ran _init_fqns (before its groups' checks,
  // so a raised lazy init still named them): an FSDPModule.unshard before any forward prints None.
  auto note = [&](int p) {
    if (!params_[p].present || params_[p].device != Device::Meta) return;
    names += (names.empty() ? "" : ", ") + (st_.root_lazy_inited ? "'" + fqn(p) + "'" : std::string("None"));
  };
  for (int p : topo_.groups[g].params) {
    // A 4-bit layer built on meta was never quantized: its weight is a float Params4bit, which
    // accelerate does not leave out (only non-floating ones are ignored_params), registered before the bias.
    const LayerInfo& li = topo_.layers[topo_.params[p].layer];
    if (p == li.bias && li.quant && topo_.params[li.weight].group < 0) note(li.weight);
    note(p);
  }
  if (names.empty()) return {};
  return context(g).raise(Status::Exception, "RuntimeError: FSDP parameters should be materialized from meta device before training, "
                                             "but the following were still on meta device: [" + names + "]");
}

// _fsdp_state.py::FSDPState._root_post_backward_final_callback: post_backward
// for every group (all_states order: Topology::states_order) whose inputs did not require grad, then IDLE.
// A post_backward that raises ends it there: the groups after it keep their state (their FSDP
// states stay PRE_BACKWARD) and the callback stays marked queued, so no later backward queues
// it again (_fsdp_state.py::FSDPState._root_post_backward_final_callback resets the flag last).
Raise FsdpState::post_backward_final_callback(const std::vector<uint8_t>& done, AdapterSet& grads) const {
  for (int g : topo_.states_order) {
    const GroupContext c = context(g);
    if (!done[g])
      if (Raise r = st_.groups[g].post_backward(c, grads)) return r;
    st_.groups[g].finalize_backward(c);
  }
  st_.post_forward_order.clear();  // torch 2.13 _fsdp_state.py::_root_post_backward_final_callback (is_last_backward)
  st_.final_callback_queued = false;
  return {};
}

// The state-dict pre-hook on every group (torch 2.13 _fsdp_param_group.py::
// FSDPParamGroup._register_state_dict_hooks -> _to_sharded): whatever the training state, on a
// group whose lazy_init got that far (a dtype check that raised left it without hooks, and the
// root's lazy init does not run again: crosscheck --draw all seed 7159).
void FsdpState::reshard_all() const {
  for (size_t g = 0; g < topo_.groups.size(); ++g)
    if (st_.groups[g].state_dict_hooks) st_.groups[g].to_sharded(context(static_cast<int>(g)));
}

// FSDPModule.reshard() on every FSDP module (what the patched helpers call):
// FSDPParamGroup.reshard, a no-op for a reshard_after_forward=False group left in
// FORWARD by a forward that raised (torch 2.13 _fsdp_param_group.py::reshard).
void FsdpState::module_reshard_all() const {
  for (size_t g = 0; g < topo_.groups.size(); ++g) st_.groups[g].reshard(context(static_cast<int>(g)));
}

// _fully_shard.py::FSDPModule.unshard: the group's lazy_init on every call, its meta check (torch 2.13
// _fsdp_param_group.py::FSDPParamGroup.lazy_init -> _validate_no_meta_params) before its dtype check.
Raise FsdpState::module_unshard(int g) const {
  FsdpParamGroup& gs = st_.groups[g];
  gs.lazy_init();
  if (Raise r = validate_no_meta_params(g)) return r;
  if (Raise r = gs.init_mp_dtypes(context(g))) return r;
  gs.unshard(context(g));
  return {};
}

}  // namespace fsdpsim
