// FSDPParamGroup's transitions on one rank. Each method mirrors one upstream function in
// torch/distributed/fsdp/_fully_shard/ (_fsdp_param_group.py, _fsdp_param.py, _fsdp_state.py);
// the comment on each names it. The group reaches its parameters, the collectives and the
// memory only through the GroupContext its caller hands in.
#include "model/machine/fsdp_param_group.hpp"

#include "model/machine/collective_log.hpp"
#include "model/machine/provenance.hpp"
#include "model/machine/rank_state.hpp"
#include "model/machine/topology.hpp"

namespace fsdpsim {

// Only the total and which groups were unsharded are kept at a new peak; the
// per-owner split is computed when an observation asks for it.
void GroupContext::note_unsharded(bool unsharded) const { state.memory.note(g, topo.groups[g].numel * topo.world * 4, unsharded); }

uint64_t param_digest(const Topology& topo, const std::vector<FsdpParam>& params, int param, int rank) {
  const FsdpParam& ps = params[param];
  // a rank of a managed parameter past its last row contributes padding only, nothing to the gathered value
  if (managing_group(topo, params, param) >= 0 && !topo.params[param].rows_on(rank)) return 0;
  uint64_t h = (static_cast<uint64_t>(param) << 20) + ps.packed_version() + 1;  // which tensor, and its values
  if (topo.params[param].kind != ParamKind::Weight) return h * 2;  // only base weights carry merged deltas
  for (int a = 0; a < topo.n_adapters(); ++a) h = h * 131 + static_cast<uint64_t>(ps.w_s.coeff[a] + 2) * 7919 + ps.w_s.ver[a];
  return h * 2 + ps.w_s.corrupt;
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._init_mp_dtypes (run by its lazy_init): the
// original dtypes of the group's parameters whose sharded parameter requires grad must be one;
// frozen parameters are not looked at. Python prints the set of torch dtypes.
Raise FsdpParamGroup::init_mp_dtypes(const GroupContext& c) {
  TrScope scope(c.scope, Tr::LazyInitDtypes);
  dtype_attrs = true;  // each FSDPParam.init_dtype_attrs, before the check
  const GroupInfo& gi = c.topo.groups[c.g];
  // torch 2.13 _fsdp_param.py::FSDPParam.init_dtype_attrs: reduce_dtype equal to param_dtype is
  // None; param_dtype equal to the shard's own dtype is None.
  const std::optional<DType> reduce = gi.mp_reduce == gi.mp_param ? std::nullopt : gi.mp_reduce;
  bool f32 = false, bf16 = false;
  for (int p : gi.params) {  // a re-added adapter's ghost is checked by its own shard
    FsdpParam& ps = c.params[p];
    // ... and None for a non-floating parameter (a 4-bit layer's packed uint8 weight).
    ps.param_dtype = gi.mp_param == ps.packed_dtype() || ps.packed_dtype() == DType::U8 ? std::nullopt : gi.mp_param;
    if (!ps.managed_rg()) continue;
    (ps.packed_dtype() == DType::BF16 ? bf16 : f32) = true;
  }
  if (f32 && bf16)
    return c.raise(Status::AssertionError, "FSDP expects uniform original parameter dtype but got {torch.bfloat16, torch.float32}");
  has_orig_dtype = f32 || bf16;
  orig_dtype = bf16 ? DType::BF16 : DType::F32;
  // pytorch#187376: a group with nothing trainable here keeps None, whatever is unfrozen later.
  reduce_dtype = has_orig_dtype ? reduce : std::nullopt;
  state_dict_hooks = true;  // FSDPParamGroup.lazy_init registers them right after the check
  return {};
}

// _fsdp_param_group.py::FSDPParamGroup.unshard: all-gathers every managed
// parameter (frozen ones too) into the group's all-gather output.
void FsdpParamGroup::all_gather(const GroupContext& c) {
  const GroupInfo& gi = c.topo.groups[c.g];
  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.unshard / wait_for_unshard: at world_size == 1 U is
  // initialised from the shards directly, no all-gather.
  if (c.topo.world > 1) {
    // torch 2.13 _fsdp_collectives.py::_get_all_gather_input_metadatas: the wire dtype is the
    // shards' own (bf16 for a bf16-only group); a group whose shards differ in dtype (bf16 base,
    // fp32 adapters) is packed and gathered as uint8 bytes (foreach_all_gather). A re-added
    // adapter's ghost packs the deleted module's shard in that shard's dtype.
    // Under a MixedPrecisionPolicy each input is first cast to its param_dtype.
    int64_t count = gi.numel, bytes = 0;
    DType wire = c.params[gi.params[0]].gathered_dtype();
    for (int p : gi.params) {
      if (c.params[p].gathered_dtype() != c.params[gi.params[0]].gathered_dtype()) wire = DType::U8;
      bytes += c.topo.params[p].shard_numel * dtype_bytes(c.params[p].gathered_dtype());
    }
    if (wire == DType::U8) count = bytes;
    CollRecord rec{CollOp::AllGather, c.g, count, CollRecord::kIntoU, c.g, c.log.next_contribution()};
    rec.dtype = wire;
    rec.member_begin = c.log.next_member();
    rec.member_count = static_cast<int>(gi.params.size());
    c.log.issue(rec);
    for (int p : gi.params) {
      const bool rows = c.topo.params[p].rows_on(c.rank);
      c.log.contribute(param_digest(c.topo, c.params, p, c.rank), rows ? c.params[p].packed_version() : kNoRows);
      c.log.pack(p);
    }
  }
  c.note_unsharded(true);  // the all-gather output is alive from here
}

// _fsdp_param_group.py::FSDPParamGroup.unshard + wait_for_unshard: returns at once
// when already UNSHARDED, so nothing is re-synced; otherwise all-gathers (unless
// a backward prefetch already did: torch 2.13 unshard returns when
// _all_gather_result is pending) and runs FSDPParam.to_unsharded.
void FsdpParamGroup::unshard(const GroupContext& c) {
  if (unsharded()) return;
  TrScope scope(c.scope, Tr::ToUnsharded);
  if (c.scope.prov) c.scope.prov->group_unsharded[c.g] = c.scope.prov->stamp();
  if (!gather_pending) all_gather(c);
  gather_pending = false;
  has_u = true;  // _fsdp_param.py::FSDPParam.init_unsharded_param: created once, then reused
  for (int p : c.topo.groups[c.g].params)
    if (!c.params[p].detached) c.params[p].to_unsharded();  // the ghost's U is registered nowhere (the new module holds the name)
  sharded = ShardedState::Unsharded;
}

// _fsdp_param.py::FSDPParam.to_sharded: registers S again and frees U's storage.
// Nothing is written back: a requires_grad flip or a data edit made on U since
// the all-gather is simply dropped.
void FsdpParamGroup::to_sharded(const GroupContext& c) {
  if (c.scope.prov && unsharded()) c.scope.prov->note_drops(c.params, c.topo.groups[c.g].params);
  if (unsharded()) c.note_unsharded(false);
  sharded = ShardedState::Sharded;
}

// _fsdp_param_group.py::FSDPParamGroup.reshard: SHARDED, unless reshard_after_forward
// False keeps a group in FORWARD as it is.
void FsdpParamGroup::reshard(const GroupContext& c) {
  if (reshard_returns_early(c.topo.groups[c.g].raf)) return;
  to_sharded(c);
}

// _fsdp_state.py::FSDPState._pre_forward with the state in PRE_BACKWARD (a backward that
// raised before its final callback): unshard a group that is not unsharded, nothing else.
void FsdpParamGroup::pre_forward_in_pre_backward(const GroupContext& c) {
  if (!unsharded()) unshard(c);
}

// _fsdp_param_group.py::FSDPParamGroup.pre_forward: FORWARD, unshard.
// A group the root's lazy init never reached (an earlier group's dtype check raised, and the
// root is not retried) has no FSDPParam.param_dtype: its all-gather inputs read it first
// (torch 2.13 _fsdp_collectives.py::_get_param_all_gather_inputs), so it raises before gathering.
Raise FsdpParamGroup::pre_forward(const GroupContext& c) {
  lazy_init();
  training = TrainingState::Forward;
  if (c.state.root_lazy_inited && !dtype_attrs)
    return c.raise(Status::Exception, "AttributeError: 'FSDPParam' object has no attribute 'param_dtype'");
  unshard(c);
  return {};
}

// _fsdp_param_group.py::FSDPParamGroup.post_forward: reshard(), then
// _record_post_forward (under no_grad too), then IDLE.
void FsdpParamGroup::post_forward(const GroupContext& c) {
  reshard(c);
  record_post_forward(c.state.post_forward_order, c.g);
  training = TrainingState::Idle;
}

// _fsdp_param_group.py::FSDPParamGroup.pre_backward: once per backward; unshard
// (a no-op when the group stayed UNSHARDED after forward or was prefetched, so no
// requires_grad re-sync), then _backward_prefetch.
void FsdpParamGroup::pre_backward(const GroupContext& c) {
  // _fsdp_state.py::FSDPState._pre_backward: the state's PRE_BACKWARD and the final callback
  // (queued once, _register_root_post_backward_final_callback) come before the group's own.
  state_pre_backward = true;
  c.state.final_callback_queued = true;
  if (training == TrainingState::PreBackward) return;
  training = TrainingState::PreBackward;
  unshard(c);
  backward_prefetch(c);  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.pre_backward(default_prefetch)
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
void FsdpParamGroup::backward_prefetch(const GroupContext& c) {
  const int i = pop_post_forward_index();
  if (i - 1 < 0) return;  // none left (-1), or the first post_forward (0)
  GroupContext on_target = c;
  on_target.g = c.state.post_forward_order[i - 1];
  FsdpParamGroup& target = c.state.groups[on_target.g];
  if (!target.takes_prefetch()) return;
  target.all_gather(on_target);
  target.gather_pending = true;
}

// _fsdp_param_group.py::FSDPParamGroup.post_backward: take the parameters whose
// U has a gradient, clear U.grad, reshard (reshard_after_backward), then
// reduce-scatter only those into S.grad (_fsdp_collectives.py::foreach_reduce).
// Without gradient sync (reduce_grads False) it only reshards: U keeps its grad,
// which the next synced post_backward reduces with that backward's, whichever
// adapter is active by then (fp32: no unsharded_accumulated_grad, U.grad itself).
Raise FsdpParamGroup::post_backward(const GroupContext& c, AdapterSet& grads) {
  TrScope scope(c.scope, reduce_grads ? Tr::PostBackwardReduce : Tr::PostBackwardUnsynced);
  training = TrainingState::PostBackward;
  if (!reduce_grads) {
    reshard(c);
    return {};
  }
  const GroupInfo& gi = c.topo.groups[c.g];
  int64_t count = 0;
  thread_local std::vector<int> with_grad;
  with_grad.clear();
  bool f32 = false, bf16 = false;
  for (int p : gi.params) {
    FsdpParam& ps = c.params[p];
    if (has_u && ps.grad_u && !ps.detached) {
      with_grad.push_back(p);
      count += c.topo.params[p].shard_numel;
      ps.grad_u = false;
      // U's gradient is in U's dtype: the policy's param_dtype where it casts.
      (ps.param_dtype.value_or(ps.dtype) == DType::BF16 ? bf16 : f32) = true;
    }
  }
  to_sharded(c);
  if (with_grad.empty()) return {};  // a group with no gradient issues no collective
  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.post_backward passes self._orig_dtype to
  // foreach_reduce: a group whose dtype check raised (or that the root's lazy init never reached)
  // has no such attribute, which raises before foreach_reduce reads the gradients. It is set
  // exactly where the state-dict hooks are registered.
  if (!state_dict_hooks) return c.raise(Status::Exception, kNoOrigDtype);
  // torch 2.13 _fsdp_collectives.py::foreach_reduce checks the gradients' dtypes first: the
  // gradients already taken off U are lost with the raise.
  if (f32 && bf16)
    return c.raise(Status::AssertionError, "FSDP reduce-scatter expects uniform gradient dtype but got {torch.bfloat16, torch.float32}");
  // torch 2.13 _fsdp_collectives.py::foreach_reduce: at world_size == 1 the gradient is the shard's
  // own, no reduce-scatter is issued.
  if (c.topo.world > 1) {
    CollRecord rec{CollOp::ReduceScatter, c.g, count};
    // torch 2.13 _fsdp_collectives.py::foreach_reduce: the group's _reduce_dtype, else the
    // gradients' dtype.
    rec.dtype = reduce_dtype.value_or(bf16 ? DType::BF16 : DType::F32);
    rec.member_begin = c.log.next_member();
    rec.member_count = static_cast<int>(with_grad.size());
    c.log.issue(rec);
    for (int p : with_grad) c.log.pack(p);
  }
  for (int p : with_grad) {
    // foreach_reduce casts the reduced gradient to the group's _orig_dtype and assigns it to a
    // shard without a gradient (one with a gradient adds it in place): autograd's grad setter
    // refuses another dtype (a trainable set of the other dtype than at lazy init).
    // Without _orig_dtype the gradient stays in the reduce dtype (pytorch#187376: a group frozen at
    // its lazy init reduces an unfrozen adapter's gradient in the compute dtype).
    const DType lands = has_orig_dtype ? orig_dtype : reduce_dtype.value_or(bf16 ? DType::BF16 : DType::F32);
    if (lands != c.params[p].dtype && !c.params[p].grad_s) {
      TrScope unset(c.scope, has_orig_dtype ? Tr::PostBackwardReduce : Tr::ReduceDtypeUnset);
      return c.raise(Status::Exception, grad_dtype_refused_message(lands));
    }
    c.params[p].grad_s = true;
    if (c.topo.params[p].adapter >= 0) grads.insert(c.topo.params[p].adapter);
  }
  return {};
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup.finalize_backward (with the state's IDLE,
// _fsdp_state.py::FSDPState._root_post_backward_final_callback): a mistargeted prefetch's
// output is dropped.
void FsdpParamGroup::finalize_backward(const GroupContext& c) {
  training = TrainingState::Idle;
  state_pre_backward = false;
  if (gather_pending) c.note_unsharded(false);
  gather_pending = false;
  post_forward_indices.clear();
}

}  // namespace fsdpsim
