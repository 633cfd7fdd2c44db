// FSDP2's state on the root module (torch/distributed/fsdp/_fully_shard/_fsdp_state.py::
// FSDPState and its FSDPCommContext): the groups, the root's lazy init, the
// state-level forward and backward hooks, the post-forward order the backward
// prefetches by, the final callback; and the memory the groups' all-gather
// outputs hold. Same file and class as model/machine/fsdp_state.
#pragma once
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "real_backend/fsdp_param_group.hpp"
#include "real_backend/rank_report.hpp"

namespace fsdpsim::real {

// "each adapter with a non-zero figure, in declaration order, then base": per owner bytes
// (by: one figure per adapter, then the base's).
std::vector<OwnerBytes> owners_of(const Layout& l, const std::vector<int64_t>& by);

class FsdpState {
 public:
  FsdpState(const Layout& layout, Parameters& params, ProcessGroup& pg);
  FsdpState(const FsdpState&) = delete;  // each group's callback holds this object
  FsdpState& operator=(const FsdpState&) = delete;
  // The state before fully_shard: fresh groups, nothing initialised.
  void reset();

  std::vector<FsdpParamGroup> groups;  // per FSDP group (layout.groups)
  bool prepared = false;               // fully_shard (and accelerate's prepare) ran
  bool root_lazy_inited = false;       // FSDPState._is_root set: the root's lazy init ran (or raised)
  // FSDPStateContext.post_backward_final_callback_queued: a backward that raised before its final
  // callback leaves it set, with each hooked group's state_pre_backward
  bool final_callback_queued = false;
  std::vector<int> post_forward_order;  // FSDPCommContext.post_forward_order (each group keeps its indices)
  // The largest bytes of live all-gather outputs since begin_op, per owner.
  int64_t peak_total = -1;
  std::vector<OwnerBytes> peak_owners;

  int root() const;  // the root's group (-1: none)
  // A state still in PRE_BACKWARD (a backward raised before its final callback): its pre-forward
  // only unshards, and its post-forward does nothing.
  bool stuck(int g) const { return groups[g].state_pre_backward; }
  void begin_op();  // the op's start: its memory peak starts from what is alive now

  // --- forward (_fsdp_state.py::FSDPState._pre_forward / _post_forward) ---
  // _fsdp_state.py::FSDPState._lazy_init from _root_pre_forward: once, every group, root first.
  void lazy_init();
  // The root's pre-forward after its lazy init: the graph flags cleared, the root group unsharded.
  void root_pre_forward();
  // A child group's pre-forward at its first module; `in`: the module's input.
  void pre_forward(int g, const at::Tensor& in);
  // A group's post-forward at its last module; `out`: the FSDP module's output.
  void post_forward(int g, const at::Tensor& out);
  // The post-forward a grouped fully_shard([...]) runs when its last member raises (always_call).
  void post_forward_on_raise(int g);
  // The root's post-forward, and the end of the forward's hook bookkeeping.
  void root_post_forward(const at::Tensor& out);

  // --- backward ---
  // Before autograd: each hooked group's pre_backward copies requires_grad S -> U first (its
  // to_unsharded), so a flag turned off since the forward stops AccumulateGrad. Returns the
  // (group, param) pairs whose U flag changed; the fired hooks start afresh.
  std::vector<std::pair<int, int>> copy_requires_grad_before_backward();
  // The hooks libtorch fired in the backward that just ran, in order: pre_backward (unshard,
  // prefetch), post_backward of a child whose input required grad. raised_layer >= 0: a
  // checkpointed layer's recompute raised there (its groups' hooks that never fired are undone).
  // Returns per group whether its post_backward ran.
  std::vector<uint8_t> run_backward_hooks(const std::vector<std::pair<int, int>>& copied, bool recompute_raised,
                                          int raised_layer, AdapterSet* grads);
  // _fsdp_state.py::FSDPState._root_post_backward_final_callback: the rest of post_backward,
  // every group IDLE. Runs only for the backward that queued it.
  // queued_here: this backward's pre_backward queued it (no earlier raised backward left it queued).
  void post_backward_final_callback(bool queued_here, const std::vector<uint8_t>& done, AdapterSet* grads);

  // --- outside forward and backward ---
  void reshard_all();         // the state-dict pre-hook: every group whose lazy_init registered it
  void module_reshard_all();  // FSDPModule.reshard() on every module
  void set_requires_gradient_sync(bool sync);
  // The unsharded copies alive now: every UNSHARDED group's all-gather output and every pending
  // prefetch, padded shard numel * world per parameter, in U's dtype; the op's peak is kept.
  void note_unsharded_peak();

 private:
  void record_post_forward(int g);
  void register_pre_backward_hook(int g, const at::Tensor& out);
  int backward_prefetch_target(int g);

  const Layout* layout_;
  Parameters* params_;
  ProcessGroup* pg_;
  // Pre-backward hooks as libtorch fired them in the last backward: the group and
  // an id of the output tensor the hook was registered on (same id: same tensor).
  std::vector<std::pair<int, int64_t>> fired_;
  at::Tensor last_hooked_;  // during forward: the last tensor a hook went on
  int64_t hooked_tensors_ = 0;
};

}  // namespace fsdpsim::real
