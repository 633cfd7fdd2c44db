// FSDP2 param-group transitions. Each method mirrors one upstream function in
// torch/distributed/fsdp/_fully_shard/ (_fsdp_param_group.py, _fsdp_param.py,
// _fsdp_state.py); the comment on each names it.
#include "model/machine/rank_model.hpp"

namespace fsdpsim {

void RankModel::lazy_init(int g) { st_.groups[g].lazy_init(); }

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._init_mp_dtypes (run by its lazy_init): the
// original dtypes of the group's parameters whose sharded parameter requires grad must be one;
// frozen parameters are not looked at. Python prints the set of torch dtypes.
Raise RankModel::init_mp_dtypes(int g) {
  TrScope scope(*this, Tr::LazyInitDtypes);
  st_.groups[g].dtype_attrs = true;  // each FSDPParam.init_dtype_attrs, before the check
  bool f32 = false, bf16 = false;
  for (int p : topo_->groups[g].params) {
    if (!st_.params[p].rg_s) continue;
    (st_.params[p].dtype == DType::BF16 ? bf16 : f32) = true;
  }
  if (f32 && bf16)
    return raise(Status::AssertionError, "FSDP expects uniform original parameter dtype but got {torch.bfloat16, torch.float32}");
  st_.groups[g].has_orig_dtype = f32 || bf16;
  st_.groups[g].orig_dtype = bf16 ? DType::BF16 : DType::F32;
  return {};
}

// torch 2.13 _fsdp_state.py::FSDPState._lazy_init: once, at the root's first pre-forward (it marks
// itself root before the groups' lazy_init, so a raise there is never retried), every group in
// all_states order (root first).
Raise RankModel::root_lazy_init() {
  if (st_.root_lazy_inited || !st_.prepared) return {};  // before prepare no FSDP state exists
  st_.root_lazy_inited = true;
  for (size_t g = 0; g < topo_->groups.size(); ++g)
    if (Raise r = init_mp_dtypes(static_cast<int>(g))) return r;
  return {};
}

// _fsdp_param_group.py::FSDPParamGroup.unshard: all-gathers every managed
// parameter (frozen ones too) into the group's all-gather output.
void RankModel::issue_all_gather(int g) {
  const GroupInfo& gi = topo_->groups[g];
  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.unshard / wait_for_unshard: at world_size == 1 U is
  // initialised from the shards directly, no all-gather.
  if (topo_->world > 1) {
    // torch 2.13 _fsdp_collectives.py::foreach_all_gather: a group whose shards differ in dtype
    // (bf16 base, fp32 adapters) is packed and gathered as uint8 bytes.
    int64_t count = gi.numel, bytes = 0;
    bool mixed = false;
    for (int p : gi.params) {
      mixed |= st_.params[p].dtype != st_.params[gi.params[0]].dtype;
      bytes += topo_->params[p].shard_numel * dtype_bytes(st_.params[p].dtype);
    }
    if (mixed) count = bytes;
    CollRecord c{CollOp::AllGather, g, count, CollRecord::kIntoU, g, log_.next_contribution()};
    c.member_begin = log_.next_member();
    c.member_count = static_cast<int>(gi.params.size());
    log_.issue(c);
    for (int p : gi.params) {
      const bool rows = topo_->params[p].rows_on(rank_);
      log_.contribute(digest_of(p), rows ? st_.params[p].packed_version() : kNoRows);
      log_.pack(p);
    }
  }
  note_unsharded(g, true);  // the all-gather output is alive from here
}

// _fsdp_param_group.py::FSDPParamGroup.unshard + wait_for_unshard: returns at once
// when already UNSHARDED, so nothing is re-synced; otherwise all-gathers (unless
// a backward prefetch already did: torch 2.13 unshard returns when
// _all_gather_result is pending) and runs FSDPParam.to_unsharded.
void RankModel::unshard(int g) {
  FsdpParamGroup& gs = st_.groups[g];
  if (gs.unsharded()) return;
  TrScope scope(*this, Tr::ToUnsharded);
  if (prov_) prov_->group_unsharded[g] = prov_->stamp();
  const GroupInfo& gi = topo_->groups[g];
  if (!gs.gather_pending) issue_all_gather(g);
  gs.gather_pending = false;
  gs.has_u = true;  // _fsdp_param.py::FSDPParam.init_unsharded_param: created once, then reused
  for (int p : gi.params)
    if (!st_.params[p].detached) st_.params[p].to_unsharded();  // the ghost's U is registered nowhere (the new module holds the name)
  gs.sharded = ShardedState::Unsharded;
}

// _fsdp_param.py::FSDPParam.to_sharded: registers S again and frees U's storage.
// Nothing is written back: a requires_grad flip or a data edit made on U since
// the all-gather is simply dropped.
void RankModel::to_sharded(int g) {
  note_drops(g);
  if (st_.groups[g].unsharded()) note_unsharded(g, false);
  st_.groups[g].sharded = ShardedState::Sharded;
}

// _fsdp_param_group.py::FSDPParamGroup.reshard: SHARDED, unless reshard_after_forward
// False keeps a group in FORWARD as it is.
void RankModel::reshard(int g) {
  if (st_.groups[g].reshard_returns_early(topo_->groups[g].raf)) return;
  to_sharded(g);
}

// _fsdp_state.py::FSDPState._pre_forward with the state in PRE_BACKWARD (a backward that
// raised before its final callback): unshard a group that is not unsharded, nothing else.
void RankModel::pre_backward_state_pre_forward(int g) {
  if (!st_.groups[g].unsharded()) unshard(g);
}

// _fsdp_param_group.py::FSDPParamGroup.pre_forward: FORWARD, unshard.
// A group the root's lazy init never reached (an earlier group's dtype check raised, and the
// root is not retried) has no FSDPParam.param_dtype: its all-gather inputs read it first
// (torch 2.13 _fsdp_collectives.py::_get_param_all_gather_inputs), so it raises before gathering.
Raise RankModel::pre_forward(int g) {
  lazy_init(g);
  st_.groups[g].training = TrainingState::Forward;
  if (st_.root_lazy_inited && !st_.groups[g].dtype_attrs)
    return raise(Status::Exception, "AttributeError: 'FSDPParam' object has no attribute 'param_dtype'");
  unshard(g);
  return {};
}

// _fsdp_param_group.py::FSDPParamGroup.post_forward: reshard(), then
// _record_post_forward (under no_grad too), then IDLE.
void RankModel::post_forward(int g) {
  reshard(g);
  st_.groups[g].record_post_forward(st_.post_forward_order, g);
  st_.groups[g].training = TrainingState::Idle;
}

// _fsdp_param_group.py::FSDPParamGroup.pre_backward: once per backward; unshard
// (a no-op when the group stayed UNSHARDED after forward or was prefetched, so no
// requires_grad re-sync), then _backward_prefetch.
void RankModel::pre_backward(int g) {
  // _fsdp_state.py::FSDPState._pre_backward: the state's PRE_BACKWARD and the final callback
  // (queued once, _register_root_post_backward_final_callback) come before the group's own.
  st_.groups[g].state_pre_backward = true;
  st_.final_callback_queued = true;
  if (st_.groups[g].training == TrainingState::PreBackward) return;
  st_.groups[g].training = TrainingState::PreBackward;
  unshard(g);
  backward_prefetch(g);  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.pre_backward(default_prefetch)
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._backward_prefetch /
// _prefetch_unshard: pop this group's last post-forward index i and call
// unshard() (the all-gather only; no wait) on the group whose post_forward ran
// just before it (post_forward_order[i-1], maybe from an earlier eval forward),
// unless that group is unsharded or already has a gather pending. Its own
// pre_backward's wait_for_unshard then registers U and copies requires_grad
// S -> U (before autograd reaches it); a group that never waits (no
// pre_backward of its own in this backward) stays SHARDED and
// finalize_backward drops the gathered output.
void RankModel::backward_prefetch(int g) {
  const int i = st_.groups[g].pop_post_forward_index();
  if (i - 1 < 0) return;  // none left (-1), or the first post_forward (0)
  FsdpParamGroup& target = st_.groups[st_.post_forward_order[i - 1]];
  if (!target.takes_prefetch()) return;
  issue_all_gather(st_.post_forward_order[i - 1]);
  target.gather_pending = true;
}

// _fsdp_param_group.py::FSDPParamGroup.post_backward: take the parameters whose
// U has a gradient, clear U.grad, reshard (reshard_after_backward), then
// reduce-scatter only those into S.grad (_fsdp_collectives.py::foreach_reduce).
// Without gradient sync (reduce_grads False) it only reshards: U keeps its grad,
// which the next synced post_backward reduces with that backward's, whichever
// adapter is active by then (fp32: no unsharded_accumulated_grad, U.grad itself).
Raise RankModel::post_backward(int g) {
  FsdpParamGroup& gs = st_.groups[g];
  TrScope scope(*this, gs.reduce_grads ? Tr::PostBackwardReduce : Tr::PostBackwardUnsynced);
  gs.training = TrainingState::PostBackward;
  if (!gs.reduce_grads) {
    reshard(g);
    return {};
  }
  const GroupInfo& gi = topo_->groups[g];
  int64_t count = 0;
  thread_local std::vector<int> with_grad;
  with_grad.clear();
  bool f32 = false, bf16 = false;
  for (int p : gi.params) {
    FsdpParam& ps = st_.params[p];
    if (gs.has_u && ps.grad_u && !ps.detached) {
      with_grad.push_back(p);
      count += topo_->params[p].shard_numel;
      ps.grad_u = false;
      (ps.dtype == DType::BF16 ? bf16 : f32) = true;
    }
  }
  to_sharded(g);
  if (with_grad.empty()) return {};  // a group with no gradient issues no collective
  // torch 2.13 _fsdp_collectives.py::foreach_reduce checks the gradients' dtypes first: the
  // gradients already taken off U are lost with the raise.
  if (f32 && bf16)
    return raise(Status::AssertionError, "FSDP reduce-scatter expects uniform gradient dtype but got {torch.bfloat16, torch.float32}");
  // torch 2.13 _fsdp_collectives.py::foreach_reduce: at world_size == 1 the gradient is the shard's
  // own, no reduce-scatter is issued.
  if (topo_->world > 1) {
    CollRecord c{CollOp::ReduceScatter, g, count};
    c.member_begin = log_.next_member();
    c.member_count = static_cast<int>(with_grad.size());
    log_.issue(c);
    for (int p : with_grad) log_.pack(p);
  }
  for (int p : with_grad) {
    // foreach_reduce casts the reduced gradient to the group's _orig_dtype and assigns it to a
    // shard without a gradient (one with a gradient adds it in place): autograd's grad setter
    // refuses another dtype (a trainable set of the other dtype than at lazy init).
    if (gs.has_orig_dtype && gs.orig_dtype != st_.params[p].dtype && !st_.params[p].grad_s)
      return raise(Status::Exception, grad_dtype_refused_message(gs.orig_dtype));
    st_.params[p].grad_s = true;
    if (topo_->params[p].adapter >= 0) res_.grads.insert(topo_->params[p].adapter);
  }
  return {};
}

// _fsdp_state.py::FSDPState._root_post_backward_final_callback: post_backward
// for every group (all_states order) whose inputs did not require grad, then IDLE.
// A post_backward that raises ends it there: the groups after it keep their state (their FSDP
// states stay PRE_BACKWARD) and the callback stays marked queued, so no later backward queues
// it again (_fsdp_state.py::FSDPState._root_post_backward_final_callback resets the flag last).
Raise RankModel::root_post_backward_final_callback(std::vector<uint8_t>& done) {
  for (size_t g = 0; g < topo_->groups.size(); ++g) {
    if (!done[g])
      if (Raise r = post_backward(static_cast<int>(g))) return r;
    st_.groups[g].training = TrainingState::Idle;
    st_.groups[g].state_pre_backward = false;
    // torch 2.13 FSDPParamGroup.finalize_backward: a mistargeted prefetch's output is dropped.
    if (st_.groups[g].gather_pending) note_unsharded(static_cast<int>(g), false);
    st_.groups[g].gather_pending = false;
    st_.groups[g].post_forward_indices.clear();
  }
  st_.post_forward_order.clear();  // torch 2.13 _fsdp_state.py::_root_post_backward_final_callback (is_last_backward)
  st_.final_callback_queued = false;
  return {};
}

// The state-dict pre-hook on every group (torch 2.13 _fsdp_param_group.py::
// FSDPParamGroup._register_state_dict_hooks -> _to_sharded): whatever the training state.
void RankModel::reshard_all() {
  for (size_t g = 0; g < topo_->groups.size(); ++g) to_sharded(static_cast<int>(g));
}

// FSDPModule.reshard() on every FSDP module (what the patched helpers call):
// FSDPParamGroup.reshard, a no-op for a reshard_after_forward=False group left in
// FORWARD by a forward that raised (torch 2.13 _fsdp_param_group.py::reshard).
void RankModel::module_reshard_all() {
  for (size_t g = 0; g < topo_->groups.size(); ++g) reshard(static_cast<int>(g));
}

bool RankModel::registered_rg(int param) const { return st_.params[param].registered_rg(is_registered_u(param)); }

// A flip reaches whichever object is registered now: S, or the temporary U (FsdpParam::set_registered_rg).
void RankModel::set_registered_rg(int param, bool value) { st_.params[param].set_registered_rg(is_registered_u(param), value); }

}  // namespace fsdpsim
