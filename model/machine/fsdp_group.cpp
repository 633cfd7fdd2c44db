// FSDP2's state-level transitions over every group of the rank (_fsdp_state.py::FSDPState:
// the root's lazy init, the final backward callback, the state-dict hook) and the context
// the groups' own transitions run in (FsdpParamGroup, fsdp_param_group.cpp). Each names the
// upstream function it mirrors.
#include "model/machine/rank_model.hpp"

namespace fsdpsim {

GroupContext RankModel::group_context(int g) {
  return GroupContext{*topo_,         rank_,     g,        st_.params, st_.groups, st_.post_forward_order,
                      log_,           st_.memory, st_.root_lazy_inited, st_.final_callback_queued, res_.grads,
                      prov_,          st_.layers};
}

// torch 2.13 _fsdp_state.py::FSDPState._lazy_init: once, at the root's first pre-forward (it marks
// itself root before the groups' lazy_init, so a raise there is never retried), every group in
// all_states order (root first).
Raise RankModel::root_lazy_init() {
  if (st_.root_lazy_inited || !st_.prepared) return {};  // before prepare no FSDP state exists
  st_.root_lazy_inited = true;
  for (size_t g = 0; g < topo_->groups.size(); ++g)
    if (Raise r = st_.groups[g].init_mp_dtypes(group_context(static_cast<int>(g)))) return r;
  return {};
}

// _fsdp_state.py::FSDPState._root_post_backward_final_callback: post_backward
// for every group (all_states order) whose inputs did not require grad, then IDLE.
// A post_backward that raises ends it there: the groups after it keep their state (their FSDP
// states stay PRE_BACKWARD) and the callback stays marked queued, so no later backward queues
// it again (_fsdp_state.py::FSDPState._root_post_backward_final_callback resets the flag last).
Raise RankModel::root_post_backward_final_callback(std::vector<uint8_t>& done) {
  for (size_t g = 0; g < topo_->groups.size(); ++g) {
    const GroupContext c = group_context(static_cast<int>(g));
    if (!done[g])
      if (Raise r = st_.groups[g].post_backward(c)) return r;
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
void RankModel::reshard_all() {
  for (size_t g = 0; g < topo_->groups.size(); ++g)
    if (st_.groups[g].state_dict_hooks) st_.groups[g].to_sharded(group_context(static_cast<int>(g)));
}

// FSDPModule.reshard() on every FSDP module (what the patched helpers call):
// FSDPParamGroup.reshard, a no-op for a reshard_after_forward=False group left in
// FORWARD by a forward that raised (torch 2.13 _fsdp_param_group.py::reshard).
void RankModel::module_reshard_all() {
  for (size_t g = 0; g < topo_->groups.size(); ++g) st_.groups[g].reshard(group_context(static_cast<int>(g)));
}

bool RankModel::registered_rg(int param) const { return st_.params[param].registered_rg(is_registered_u(param)); }

// A flip reaches whichever object is registered now: S, or the temporary U (FsdpParam::set_registered_rg).
void RankModel::set_registered_rg(int param, bool value) { fsdpsim::set_registered_rg(*topo_, st_.params, st_.groups, param, value); }

}  // namespace fsdpsim
