// One FSDPParamGroup's state on one rank (torch/distributed/fsdp/_fully_shard/
// _fsdp_param_group.py::FSDPParamGroup). The transitions that also reach its
// FSDPParams, the collectives or the other groups are RankModel's (fsdp_group.cpp,
// named after the upstream methods, as real_backend/real_fsdp.cpp names them);
// the ones on this state alone are here.
#pragma once
#include <cstdint>
#include <vector>

#include "model/vocab/observation.hpp"
#include "model/vocab/placement.hpp"

namespace fsdpsim {

enum class TrainingState : uint8_t { Idle, Forward, PreBackward, PostBackward };

struct FsdpParamGroup {
  ShardedState sharded = ShardedState::Sharded;
  TrainingState training = TrainingState::Idle;
  bool has_u = false;
  bool lazy_inited = false;
  // _fsdp_param.py::FSDPParam.init_dtype_attrs ran for its params (their param_dtype exists):
  // _init_mp_dtypes does it first, so a group whose own dtype check raised has it and the
  // groups after it in the root's lazy init never get it.
  bool dtype_attrs = false;
  // _fsdp_param_group.py::FSDPParamGroup._orig_dtype, set by a dtype check that passed: the
  // trainable params' dtype then (none: nothing was trainable). foreach_reduce casts the
  // reduced gradient to it.
  bool has_orig_dtype = false;
  DType orig_dtype = DType::F32;
  bool gather_pending = false;  // FSDPParamGroup._all_gather_result: a backward prefetch not yet waited for
  // _fsdp_param_group.py::FSDPParamGroup.reduce_grads, set by FSDPModule.set_requires_gradient_sync:
  // false keeps each backward's gradients on U (no reduce-scatter) until a synced backward.
  bool reduce_grads = true;
  // FSDPState._training_state is PRE_BACKWARD (its _pre_backward ran; only the final callback
  // sets IDLE): its pre_forward then only unshards and its post_forward does nothing
  // (_fsdp_state.py::FSDPState._pre_forward / _post_forward, the activation-checkpoint branch).
  bool state_pre_backward = false;
  // _fsdp_param_group.py::FSDPParamGroup._post_forward_indices: this group's
  // positions in RankState::post_forward_order, one per post_forward since the last backward.
  std::vector<int> post_forward_indices;

  bool unsharded() const { return sharded == ShardedState::Unsharded; }
  // _fsdp_param_group.py::FSDPParamGroup.lazy_init: idempotent; the root's
  // reshard_after_forward is resolved at compile time (Topology::groups[g].raf).
  void lazy_init() { lazy_inited = true; }
  // _fsdp_param_group.py::FSDPParamGroup.reshard: in FORWARD with reshard_after_forward
  // False it returns at once (that early return *is* reshard_after_forward=False).
  bool reshard_returns_early(bool raf) const { return training == TrainingState::Forward && !raf; }
  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup._record_post_forward: append to the shared order.
  void record_post_forward(std::vector<int>& post_forward_order, int self) {
    post_forward_indices.push_back(static_cast<int>(post_forward_order.size()));
    post_forward_order.push_back(self);
  }
  // _backward_prefetch's index: this group's last post-forward position (-1: none left).
  int pop_post_forward_index() {
    if (post_forward_indices.empty()) return -1;
    const int i = post_forward_indices.back();
    post_forward_indices.pop_back();
    return i;
  }
  // A prefetch may target this group: it is not unsharded and has no gather pending.
  bool takes_prefetch() const { return !unsharded() && !gather_pending; }
};

}  // namespace fsdpsim
