// One FSDPParamGroup on one rank (torch/distributed/fsdp/_fully_shard/
// _fsdp_param_group.py::FSDPParamGroup): its state and its transitions (unshard,
// reshard, pre/post forward and backward, _init_mp_dtypes), each named after the
// upstream method it mirrors (fsdp_param_group.cpp). What they reach besides the
// group's own state comes in a GroupContext, as FSDPParamGroup holds its
// fsdp_params, its mesh and its comm context. The FSDPState-level transitions over
// every group (the root's lazy init, the final callback) are FsdpState's (fsdp_state.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/machine/fsdp_param.hpp"
#include "model/machine/op_raised.hpp"
#include "model/machine/scope_site.hpp"
#include "model/machine/topology.hpp"
#include "model/vocab/adapter_set.hpp"
#include "model/vocab/observation.hpp"
#include "model/vocab/placement.hpp"

namespace fsdpsim {

struct FsdpParamGroup;
struct FsdpRootState;
class CollectiveLog;

// What one group's transitions reach: its parameters (topo.groups[g].params index the rank's),
// the op's collectives, the FSDP state it belongs to (FsdpRootState: the other groups, which a
// backward prefetch unshards, the post-forward order, the memory its all-gather output holds,
// the root's flags) and where a transition or a raise is noted. FsdpState::context builds it;
// post_backward takes the op's gradients as its argument.
struct GroupContext {
  const Topology& topo;
  int rank;
  int g;  // the group's index
  std::vector<FsdpParam>& params;
  CollectiveLog& log;
  FsdpRootState& state;
  ScopeSite scope;

  // What upstream raises here; with provenance the raise site is noted.
  Raise raise(Status s, std::string msg) const { return raise_at(scope.prov, s, std::move(msg)); }
  // Group g's all-gather output (world padded shards, fp32) comes or goes.
  void note_unsharded(bool unsharded) const;
};

// A digest of the values `param` contributes to an all-gather on `rank` (0: padding only).
uint64_t param_digest(const Topology& topo, const std::vector<FsdpParam>& params, int param, int rank);

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
  // _register_state_dict_hooks ran (lazy_init's last step, after the dtype check): only then does a
  // state_dict / load_state_dict reshard the group.
  bool state_dict_hooks = false;
  // _fsdp_param_group.py::FSDPParamGroup._orig_dtype, set by a dtype check that passed: the
  // trainable params' dtype then (none: nothing was trainable). foreach_reduce casts the
  // reduced gradient to it.
  bool has_orig_dtype = false;
  DType orig_dtype = DType::F32;
  // _fsdp_param_group.py::FSDPParamGroup._reduce_dtype: the trainable params' reduce_dtype at that
  // check (unset: None, so foreach_reduce reduces in the gradients' dtype).
  std::optional<DType> reduce_dtype;
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

  // The transitions (fsdp_param_group.cpp), each on group c.g.
  [[nodiscard]] Raise init_mp_dtypes(const GroupContext& c);
  void unshard(const GroupContext& c);
  void reshard(const GroupContext& c);
  void to_sharded(const GroupContext& c);
  [[nodiscard]] Raise pre_forward(const GroupContext& c);
  void pre_forward_in_pre_backward(const GroupContext& c);
  void post_forward(const GroupContext& c);
  void pre_backward(const GroupContext& c);
  // grads: the adapters whose shard received a gradient this op (OpResult::grads).
  [[nodiscard]] Raise post_backward(const GroupContext& c, AdapterSet& grads);
  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.finalize_backward, from the root's final callback.
  void finalize_backward(const GroupContext& c);

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

 private:
  void all_gather(const GroupContext& c);
  void backward_prefetch(const GroupContext& c);
};

// The FSDP group managing param's registered object (-1: none; a re-added adapter's new module).
inline int managing_group(const Topology& topo, const std::vector<FsdpParam>& params, int p) {
  return params[p].detached ? -1 : topo.params[p].group;
}
// The module holds param's unsharded copy U: its group is unsharded.
inline bool u_registered(const Topology& topo, const std::vector<FsdpParam>& params, const std::vector<FsdpParamGroup>& groups,
                         int p) {
  const int g = managing_group(topo, params, p);
  return g >= 0 && groups[g].unsharded();
}
// A requires_grad flip reaches whichever object is registered now: S, or the temporary U.
inline void set_registered_rg(const Topology& topo, std::vector<FsdpParam>& params, const std::vector<FsdpParamGroup>& groups,
                              int p, bool value) {
  params[p].set_registered_rg(u_registered(topo, params, groups, p), value);
}

}  // namespace fsdpsim
