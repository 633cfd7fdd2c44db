// One FSDPParamGroup of the real module: the fields of the model's
// FsdpParamGroup (model/machine/fsdp_param_group.hpp) under the same names
// where the two hold the same thing, so the two can be read side by side.
#pragma once
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "model/vocab/observation.hpp"

namespace fsdpsim::real {

struct RealGroup {
  // FSDPParamGroup's sharded state, as the registry shows it (real_fsdp.cpp's unshard and to_sharded set it).
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
  bool reduce_grads = true;  // FSDPParamGroup.reduce_grads (set_requires_gradient_sync)
  std::vector<int> post_forward_indices;  // FSDPParamGroup._post_forward_indices
  at::Tensor all_gather_result;  // FSDPParamGroup._all_gather_result: a backward prefetch not yet waited for
  // The last forward's graph: the group's output, and its input, required grad.
  bool out_rg = false, in_rg = false;

  bool unsharded() const { return sharded == ShardedState::Unsharded; }
};

}  // namespace fsdpsim::real
