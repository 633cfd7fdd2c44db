// One FSDPParamGroup of the real module
// (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py::FSDPParamGroup): its
// state under the model's names (model/machine/fsdp_param_group.hpp) and its
// transitions, reaching only its own parameters (Parameters) and the
// collectives (ProcessGroup).
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "model/vocab/adapter_set.hpp"
#include "model/vocab/observation.hpp"
#include "real_backend/fsdp_param.hpp"
#include "real_backend/process_group.hpp"

namespace fsdpsim::real {

class FsdpParamGroup {
 public:
  FsdpParamGroup(const Layout& layout, int index, Parameters& params, ProcessGroup& pg)
      : layout_(&layout), index_(index), params_(&params), pg_(&pg) {}

  // FSDPParamGroup's sharded state, as the registry shows it (unshard and to_sharded set it).
  ShardedState sharded = ShardedState::Sharded;
  bool in_forward = false;  // TrainingState.FORWARD: pre_forward ran, post_forward not yet
  // FSDPState._training_state PRE_BACKWARD: its pre-backward hook ran, the final callback not yet
  // (a backward that raised before its final callback leaves it set; torch 2.13
  // _fsdp_state.py::FSDPState._pre_backward).
  bool state_pre_backward = false;
  // FSDPParam.init_dtype_attrs ran (param_dtype exists); the root's lazy init stops at the first
  // group whose dtype check raises.
  bool dtype_attrs = false;
  // _register_state_dict_hooks ran (lazy_init's last step, after the dtype check): only then does a
  // state_dict / load_state_dict reshard the group.
  bool state_dict_hooks = false;
  // FSDPParamGroup._orig_dtype from its last dtype check that passed (none: nothing trainable
  // then): foreach_reduce casts the reduced gradient to it.
  std::optional<at::ScalarType> orig_dtype;
  // _fsdp_param_group.py::FSDPParamGroup._reduce_dtype: the trainable params' reduce_dtype at that
  // check (unset: None, so foreach_reduce reduces in the gradients' dtype).
  std::optional<at::ScalarType> reduce_dtype;
  bool reduce_grads = true;  // FSDPParamGroup.reduce_grads (set_requires_gradient_sync)
  std::vector<int> post_forward_indices;  // FSDPParamGroup._post_forward_indices
  at::Tensor all_gather_result;  // FSDPParamGroup._all_gather_result: a backward prefetch not yet waited for
  // The last forward's graph: the group's output, and its input, required grad.
  bool out_rg = false, in_rg = false;
  // Called whenever an all-gather output comes alive (the owner's memory figure).
  std::function<void()> on_all_gather;

  bool unsharded() const { return sharded == ShardedState::Unsharded; }
  const GroupSpec& spec() const { return layout_->groups[index_]; }
  // A group with mixed-dtype shards gathers uint8 (_fsdp_collectives.py::foreach_all_gather).
  bool gathers_bytes() const;
  // _fsdp_param_group.py::FSDPParamGroup._init_mp_dtypes (from lazy_init): throws
  // AssertionError where the group's trainable shards differ in dtype.
  void lazy_init();
  // FSDPParamGroup.unshard's packed all-gather of every managed parameter.
  at::Tensor all_gather();
  // FSDPParamGroup.unshard + wait_for_unshard + FSDPParam.to_unsharded.
  void unshard();
  // FSDPParamGroup._prefetch_unshard: the all-gather issued and kept.
  void prefetch_unshard();
  // FSDPParamGroup.pre_forward's unshard: raises where the group has no param_dtype.
  void pre_forward(bool root_lazy_inited);
  // FSDPParam.to_sharded on every parameter of the group.
  void to_sharded();
  // FSDPParamGroup.reshard in FORWARD: a no-op without reshard_after_forward.
  void reshard();
  // FSDPModule.reshard(): a no-op in FORWARD without reshard_after_forward.
  void module_reshard();
  // FSDPParamGroup.post_backward; `grads`: the adapters whose shard received a gradient.
  void post_backward(AdapterSet* grads);

 private:
  const Layout* layout_;
  int index_;
  Parameters* params_;
  ProcessGroup* pg_;
};

}  // namespace fsdpsim::real
