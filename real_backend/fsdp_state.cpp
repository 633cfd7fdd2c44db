// FSDPState on real tensors: the root's lazy init, the forward hooks each group
// runs, the backward hooks in the order libtorch fired them, the final callback
// (torch/distributed/fsdp/_fully_shard/_fsdp_state.py, _fsdp_param_group.py).
#include "real_backend/fsdp_state.hpp"

#include <ATen/core/grad_mode.h>

namespace fsdpsim::real {

std::vector<OwnerBytes> owners_of(const Layout& l, const std::vector<int64_t>& by) {
  std::vector<OwnerBytes> out;
  for (size_t a = 0; a < l.adapters.size(); ++a)
    if (by[a] > 0) out.push_back({l.adapters[a].name, by[a]});
  if (by.back() > 0) out.push_back({"base", by.back()});
  return out;
}

FsdpState::FsdpState(const Layout& layout, Parameters& params, ProcessGroup& pg)
    : layout_(&layout), params_(&params), pg_(&pg) {}

void FsdpState::reset() {
  groups.clear();
  for (size_t g = 0; g < layout_->groups.size(); ++g) {
    groups.emplace_back(*layout_, static_cast<int>(g), *params_, *pg_);
    groups.back().on_all_gather = [this]() { note_unsharded_peak(); };
  }
  post_forward_order.clear();
  prepared = false;
}

int FsdpState::root() const {
  int root = -1;
  for (size_t g = 0; g < layout_->groups.size(); ++g)
    if (layout_->groups[g].is_root) root = static_cast<int>(g);
  return root;
}

void FsdpState::begin_op() {
  peak_total = -1;
  peak_owners.clear();
  note_unsharded_peak();  // the op's start counts
}

// torch 2.13 _fsdp_state.py::FSDPState._lazy_init, from _root_pre_forward: once (the root is marked
// before the groups' lazy_init, so a raise is never retried), every group, root first; not while the
// root's state is still in PRE_BACKWARD.
void FsdpState::lazy_init() {
  const int r = root();
  if (!prepared || root_lazy_inited || (r >= 0 && stuck(r))) return;
  root_lazy_inited = true;
  for (FsdpParamGroup& g : groups) g.lazy_init();
}

// torch 2.13 _fsdp_state.py::FSDPState._pre_forward on the root.
void FsdpState::root_pre_forward() {
  for (FsdpParamGroup& gr : groups) gr.out_rg = gr.in_rg = false;
  const int r = root();
  if (r >= 0 && stuck(r)) {
    groups[r].unshard();
  } else if (r >= 0) {
    groups[r].in_forward = true;
    groups[r].pre_forward(root_lazy_inited);
  }
}

// torch 2.13 _fsdp_state.py::FSDPState._pre_forward on a child: a stuck state only unshards.
void FsdpState::pre_forward(int g, const at::Tensor& in) {
  if (stuck(g)) return groups[g].unshard();
  // FSDPParamGroup.pre_forward registers the post-backward node only when entering FORWARD.
  groups[g].in_rg = in.requires_grad() && !groups[g].in_forward;
  groups[g].in_forward = true;
  groups[g].pre_forward(root_lazy_inited);
}

// torch 2.13 _fsdp_state.py::FSDPState._post_forward: reshard, record, IDLE, and the
// pre-backward hook on the output; nothing for a stuck state.
void FsdpState::post_forward(int g, const at::Tensor& out) {
  if (stuck(g)) return;
  groups[g].out_rg = out.requires_grad();
  groups[g].reshard();
  record_post_forward(g);
  groups[g].in_forward = false;
  register_pre_backward_hook(g, out);
}

// torch 2.13 _fsdp_state.py::_register_group_forward_hooks (always_call=True): the member
// completing a grouped fully_shard([...]) runs the group's post-forward on a raise: reshard, IDLE.
void FsdpState::post_forward_on_raise(int g) {
  if (stuck(g)) return;
  groups[g].reshard();
  record_post_forward(g);
  groups[g].in_forward = false;
}

void FsdpState::root_post_forward(const at::Tensor& out) {
  const int r = root();
  if (r >= 0) post_forward(r, out);
  last_hooked_ = at::Tensor();
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._record_post_forward: every
// post_forward (under no_grad too) appends the group to the shared order.
void FsdpState::record_post_forward(int g) {
  groups[g].post_forward_indices.push_back(static_cast<int>(post_forward_order.size()));
  post_forward_order.push_back(g);
}

// torch 2.13 _fsdp_state.py::FSDPState._register_pre_backward_hook (from _post_forward): a
// tensor hook on the module's output; libtorch fires it when autograd reaches that
// tensor, hooks on one tensor in registration order. Recorded, then replayed after
// the backward in the order they fired.
void FsdpState::register_pre_backward_hook(int g, const at::Tensor& out) {
  if (!at::GradMode::is_enabled() || !out.requires_grad()) return;
  // One id per output tensor: the previous hooked tensor is held until the next
  // registration, so `is_same` cannot be fooled by a freed tensor's address.
  if (!last_hooked_.defined() || !last_hooked_.is_same(out)) ++hooked_tensors_;
  last_hooked_ = out;
  const int64_t id = hooked_tensors_;
  out.register_hook([this, g, id](const at::Tensor&) { fired_.emplace_back(g, id); });
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._backward_prefetch: pops g's
// last post-forward index i; the group to unshard is post_forward_order[i-1]
// (-1: none).
int FsdpState::backward_prefetch_target(int g) {
  std::vector<int>& idx = groups[g].post_forward_indices;
  if (idx.empty()) return -1;
  const int i = idx.back();
  idx.pop_back();
  return i - 1 < 0 ? -1 : post_forward_order[i - 1];
}

// Each group's own pre_backward (its wait_for_unshard) fires before autograd
// reaches its parameters: to_unsharded copies requires_grad S -> U first. Applied
// before the backward (per group, so in any order: a hooked group still sharded gets
// U's flag from S); the collectives are issued after it, in the order the hooks fired.
std::vector<std::pair<int, int>> FsdpState::copy_requires_grad_before_backward() {
  std::vector<std::pair<int, int>> copied;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!groups[g].out_rg || groups[g].unsharded()) continue;
    for (int p : layout_->groups[g].params) {
      FsdpParam& fp = (*params_)[p];
      if (!fp.detached && fp.leaf.u.defined() && fp.leaf.u.requires_grad() != fp.leaf.s.requires_grad()) {
        fp.leaf.u.requires_grad_(fp.leaf.s.requires_grad());
        copied.emplace_back(static_cast<int>(g), p);
      }
    }
  }
  fired_.clear();
  return copied;
}

// The hook sequence as libtorch fired it: every hook on one output tensor
// (pre_backward: unshard, then prefetch post_forward_order[i-1], torch 2.13
// FSDPParamGroup.pre_backward -> _backward_prefetch), then, once autograd is
// inside the module, post_backward of a child whose input required grad.
std::vector<uint8_t> FsdpState::run_backward_hooks(const std::vector<std::pair<int, int>>& copied, bool recompute_raised,
                                                   int raised_layer, AdapterSet* grads) {
  if (recompute_raised) {
    // A group whose hook never fired never ran pre_backward: its U keeps the flags it had.
    std::vector<uint8_t> fired(layout_->groups.size(), 0);
    for (const auto& f : fired_) fired[f.first] = 1;
    for (const auto& [g, p] : copied)
      if (!fired[g]) (*params_)[p].leaf.u.requires_grad_(!(*params_)[p].leaf.u.requires_grad());
  }
  struct Hook {
    enum Kind { kUnshard, kPrefetch, kPostBackward } kind;
    int g;
  };
  std::vector<Hook> hooks;
  for (size_t i = 0; i < fired_.size();) {
    size_t j = i;
    while (j < fired_.size() && fired_[j].second == fired_[i].second) ++j;
    for (size_t k = i; k < j; ++k) {
      const int g = fired_[k].first;
      hooks.push_back({Hook::kUnshard, g});
      int target = backward_prefetch_target(g);
      if (target >= 0) hooks.push_back({Hook::kPrefetch, target});
    }
    for (size_t k = i; k < j; ++k) {
      const GroupSpec& gs = layout_->groups[fired_[k].first];
      if (recompute_raised && gs.first_layer <= raised_layer) continue;  // autograd never left it
      if (!gs.is_root && groups[fired_[k].first].in_rg) hooks.push_back({Hook::kPostBackward, fired_[k].first});
    }
    i = j;
  }
  std::vector<uint8_t> done(layout_->groups.size(), 0);
  for (const Hook& h : hooks) {
    if (h.kind == Hook::kUnshard) {
      groups[h.g].state_pre_backward = true;  // FSDPState._pre_backward, which queues the final callback once
      final_callback_queued = true;
      groups[h.g].unshard();  // pre_backward
    } else if (h.kind == Hook::kPrefetch) {
      groups[h.g].prefetch_unshard();
    } else {
      groups[h.g].post_backward(grads);
      done[h.g] = 1;
    }
  }
  return done;
}

// Only a backward whose pre_backward queued the final callback runs it.
// A post_backward that raises ends it there: that group and the ones after it keep their state
// (PRE_BACKWARD) and the callback stays queued (_fsdp_state.py::FSDPState.
// _root_post_backward_final_callback resets its flag last), so no later backward runs it.
void FsdpState::post_backward_final_callback(bool queued_here, const std::vector<uint8_t>& done, AdapterSet* grads) {
  if (!queued_here || !final_callback_queued) return;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!done[g]) groups[g].post_backward(grads);
    groups[g].state_pre_backward = false;
    groups[g].in_forward = false;  // the final callback leaves every group IDLE
    groups[g].post_forward_indices.clear();  // torch 2.13 FSDPParamGroup.finalize_backward, which also
    groups[g].all_gather_result = at::Tensor();         // drops a mistargeted prefetch's all-gather output
  }
  post_forward_order.clear();  // torch 2.13 _fsdp_state.py::_root_post_backward_final_callback (is_last_backward)
  final_callback_queued = false;
}

// The state-dict pre-hook (torch 2.13 _fsdp_param_group.py::FSDPParamGroup._register_state_dict_hooks),
// on the groups whose lazy_init registered it.
void FsdpState::reshard_all() {
  for (FsdpParamGroup& g : groups)
    if (g.state_dict_hooks) g.to_sharded();
}

void FsdpState::module_reshard_all() {
  for (FsdpParamGroup& g : groups) g.module_reshard();
}

// _fully_shard.py::FSDPModule.set_requires_gradient_sync on the root, recurse=True: every group.
void FsdpState::set_requires_gradient_sync(bool sync) {
  for (FsdpParamGroup& g : groups) g.reduce_grads = sync;
}

void FsdpState::note_unsharded_peak() {
  std::vector<int64_t> by(layout_->adapters.size() + 1, 0);
  int64_t total = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!groups[g].unsharded() && !groups[g].all_gather_result.defined()) continue;  // a prefetched all-gather output is alive too
    for (int p : layout_->groups[g].params) {
      const ParamTensors& rp = (*params_)[p].fsdp_objects();  // the group's all-gather output holds the ghost's rows
      if (!rp.u.defined()) continue;
      int64_t b = rp.s.numel() * layout_->world * static_cast<int64_t>(rp.u.element_size());
      int a = layout_->params[p].adapter;
      by[a >= 0 ? static_cast<size_t>(a) : by.size() - 1] += b;
      total += b;
    }
  }
  if (total <= peak_total) return;
  peak_total = total;
  peak_owners = owners_of(*layout_, by);
}

}  // namespace fsdpsim::real
