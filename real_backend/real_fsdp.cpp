// FSDP2 on real tensors: all-gather into U and register it, register S again
// at reshard, forward with the group hooks, autograd backward, then
// post-backward reduce-scatters into S.grad. Mirrors
// torch/distributed/fsdp/_fully_shard/ (_fsdp_param.py, _fsdp_param_group.py,
// _fsdp_state.py) function by function.
#include <ATen/core/grad_mode.h>

#include <optional>
#include <set>
#include <tuple>

#include "real_backend/real_rank.hpp"
#include "real_backend/values.hpp"

namespace fsdpsim::real {

// _fsdp_param_group.py::FSDPParamGroup.unshard: one packed all-gather of every
// managed parameter (frozen ones and deleted ones too), world chunks in rank order.
at::Tensor RealRank::all_gather_group(int g) {
  const GroupSpec& gs = layout_->groups[g];
  const bool bytes = group_gathers_bytes(g);
  std::vector<at::Tensor> flat;
  for (int p : gs.params) {
    at::Tensor f = fsdp_param(p).s.reshape({-1});  // a ghost packs the deleted module's shard
    // torch 2.13 _fsdp_collectives.py::foreach_all_gather: shards of different dtypes travel as uint8.
    flat.push_back(bytes ? f.to(param_dtype(p)).contiguous().view(at::kByte) : f);
  }
  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.unshard / wait_for_unshard: world_size == 1
  // initialises U from the shards directly, no all-gather.
  if (layout_->world == 1) return at::cat(flat);
  // torch 2.13 _fsdp_collectives.py::_get_all_gather_input_metadatas: gloo pairs the group's
  // bytes, counted in its wire dtype: the shards' own, uint8 when they differ.
  const DType wire = bytes ? DType::U8 : dtype_of(param_dtype(gs.params[0]));
  at::Tensor got = comm_->all_gather(at::cat(flat), g, step_, gs.params, -1, false, wire);
  return bytes ? got.to(at::kByte) : got;  // what travels comes back as floats
}

// The parameter's own dtype (compute stays fp32 in S; `place` carries the dtype).
at::ScalarType RealRank::param_dtype(int p) {
  const RealParam& rp = fsdp_param(p);
  return rp.place.defined() ? rp.place.scalar_type() : rp.s.scalar_type();
}

bool RealRank::group_gathers_bytes(int g) {
  const GroupSpec& gs = layout_->groups[g];
  for (int p : gs.params)
    if (param_dtype(p) != param_dtype(gs.params[0])) return true;
  return false;
}

// _fsdp_param_group.py::FSDPParamGroup.unshard + wait_for_unshard +
// FSDPParam.to_unsharded: the all-gather (unless a backward prefetch's is
// pending), U created once then refilled, requires_grad copied S -> U only when
// it differs, U registered. Returns at once when already unsharded.
void RealRank::unshard(int g) {
  if (groups_[g].unsharded()) return;
  const GroupSpec& gs = layout_->groups[g];
  const int world = layout_->world;
  at::Tensor gathered = groups_[g].all_gather_result.defined() ? groups_[g].all_gather_result : all_gather_group(g);
  groups_[g].all_gather_result = at::Tensor();
  const bool bytes = group_gathers_bytes(g);
  auto unit = [&](int p) {
    return layout_->params[p].chunk_numel() * (bytes ? static_cast<int64_t>(c10::elementSize(param_dtype(p))) : 1);
  };
  int64_t stride = 0;
  for (int p : gs.params) stride += unit(p);
  int64_t offset = 0;
  for (int p : gs.params) {
    const ParamSpec& ps = layout_->params[p];
    std::vector<at::Tensor> chunks;
    for (int r = 0; r < world; ++r) chunks.push_back(gathered.narrow(0, r * stride + offset, unit(p)));
    offset += unit(p);
    at::Tensor full = at::cat(chunks);
    if (bytes) full = full.view(param_dtype(p)).to(at::kFloat);
    full = full.narrow(0, 0, ps.rows * ps.cols);
    RealParam& rp = fsdp_param(p);
    if (!rp.u.defined()) {
      // _fsdp_param.py::FSDPParam.init_unsharded_param: created with S's requires_grad.
      rp.u = at::empty(param_shape(*layout_, ps, ps.rows)).requires_grad_(rp.s.requires_grad());
    } else if (rp.u.requires_grad() != rp.s.requires_grad()) {
      rp.u.requires_grad_(rp.s.requires_grad());  // set_requires_grad_if_needed
    }
    // Like FSDP2's copy-out, refill U without bumping its autograd version.
    rp.u.variable_data().copy_(full.view(rp.u.sizes()));
    if (registered(p).defined() && !params_[p].detached) params_[p].registered = rp.u;
  }
  groups_[g].sharded = ShardedState::Unsharded;
  note_unsharded_peak();
}

// _fsdp_param.py::FSDPParam.to_sharded: S registered again, no write-back.
// (U keeps its values here rather than being resized to 0: a backward that FSDP2
// would serve by re-gathering reads them instead; see docs/design/cpp-backend.md, "What is emulated".)
void RealRank::to_sharded(int g) {
  if (!groups_[g].unsharded()) return;
  for (int p : layout_->groups[g].params)
    if (registered(p).defined() && !params_[p].detached) params_[p].registered = params_[p].leaf.s;
  groups_[g].sharded = ShardedState::Sharded;
}

// _fsdp_param_group.py::FSDPParamGroup.reshard in FORWARD: returns at once when
// reshard_after_forward is false.
void RealRank::reshard_in_forward(int g) {
  if (!layout_->groups[g].reshard_after_forward) return;
  to_sharded(g);
}

// The state-dict pre-hook (torch 2.13 _fsdp_param_group.py::FSDPParamGroup._register_state_dict_hooks),
// on the groups whose lazy_init registered it.
void RealRank::reshard_all() {
  for (size_t g = 0; g < layout_->groups.size(); ++g)
    if (groups_[g].state_dict_hooks) to_sharded(static_cast<int>(g));
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup.reshard: a group still in FORWARD (its
// forward raised before post_forward) without reshard_after_forward stays unsharded.
void RealRank::module_reshard(int g) {
  if (groups_[g].in_forward && !layout_->groups[g].reshard_after_forward) return;
  to_sharded(g);
}

void RealRank::module_reshard_all() {
  for (size_t g = 0; g < layout_->groups.size(); ++g) module_reshard(static_cast<int>(g));
}

// utils/other.py::_set_layer_requires_grad: the flag lands on the registered leaf.
void RealRank::set_registered_rg(int p, bool v) {
  if (registered(p).defined()) params_[p].registered.requires_grad_(v);
}

// _fsdp_param_group.py::FSDPParamGroup.post_backward: the parameters whose U
// has a grad, U.grad cleared, reshard, then one reduce-scatter (AVG) of their
// padded grads into S.grad (_fsdp_collectives.py::foreach_reduce). Without
// gradient sync (reduce_grads False) only the reshard: U's grad stays, and
// autograd adds the next micro-batch's to it, until a synced post_backward.
void RealRank::post_backward(int g) {
  if (!groups_[g].reduce_grads) {
    to_sharded(g);
    return;
  }
  const GroupSpec& gs = layout_->groups[g];
  const int world = layout_->world;
  std::vector<int> with_grad;
  std::vector<at::Tensor> grads;
  for (int p : gs.params) {
    RealParam& rp = fsdp_param(p);
    if (!rp.u.defined() || !rp.u.grad().defined()) continue;
    with_grad.push_back(p);
    grads.push_back(rp.u.grad().detach().clone());
    rp.u.mutable_grad().reset();
  }
  to_sharded(g);
  if (with_grad.empty()) return;
  // torch 2.13 _fsdp_collectives.py::foreach_reduce checks the gradients' dtypes (U's, the
  // params' own) first; the gradients taken off U above are lost with the raise.
  std::set<at::ScalarType> grad_dtypes;
  for (int p : with_grad) grad_dtypes.insert(param_dtype(p));
  if (grad_dtypes.size() > 1)
    throw OpError(Status::AssertionError, "FSDP reduce-scatter expects uniform gradient dtype but got {torch.bfloat16, torch.float32}");
  // chunk_cat: each grad padded on dim 0 to world * chunk rows, rank r's rows of
  // every parameter side by side in segment r.
  std::vector<at::Tensor> per_param;
  for (size_t i = 0; i < with_grad.size(); ++i) {
    const ParamSpec& ps = layout_->params[with_grad[i]];
    at::Tensor padded = at::zeros({world * ps.chunk_rows * ps.cols});
    padded.narrow(0, 0, ps.rows * ps.cols).copy_(grads[i].reshape({-1}));
    per_param.push_back(padded.view({world, ps.chunk_numel()}));
  }
  at::Tensor flat = at::cat(per_param, 1).reshape({-1});
  // torch 2.13 _fsdp_collectives.py::foreach_reduce: no reduce-scatter at world_size == 1.
  // torch 2.13 _fsdp_collectives.py::foreach_reduce: the reduce dtype (no policy sets one) is the
  // gradients' own, which gloo's pairing counts bytes in.
  const DType wire = dtype_of(*grad_dtypes.begin());
  at::Tensor mine = world == 1 ? flat : comm_->reduce_scatter_avg(flat, g, step_, with_grad, wire);
  int64_t offset = 0;
  for (int p : with_grad) {
    const ParamSpec& ps = layout_->params[p];
    at::Tensor part = mine.narrow(0, offset, ps.chunk_numel()).view(fsdp_param(p).s.sizes()).clone();
    offset += ps.chunk_numel();
    at::Tensor& sg = fsdp_param(p).s.mutable_grad();
    // foreach_reduce casts the reduced gradient to the group's _orig_dtype; a shard with a gradient
    // adds it in place, one without takes it through the grad setter, which refuses another dtype
    const std::optional<at::ScalarType>& orig = groups_[g].orig_dtype;
    if (!sg.defined() && orig && *orig != param_dtype(p))
      throw OpError(Status::Exception, grad_dtype_refused_message(*orig == at::kFloat ? DType::F32 : DType::BF16));
    if (sg.defined()) sg.add_(part);
    else sg = part;
    if (ps.adapter >= 0) res_.grads.insert(ps.adapter);
  }
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._record_post_forward: every
// post_forward (under no_grad too) appends the group to the shared order.
void RealRank::record_post_forward(int g) {
  groups_[g].post_forward_indices.push_back(static_cast<int>(post_forward_order_.size()));
  post_forward_order_.push_back(g);
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._backward_prefetch: pops g's
// last post-forward index i; the group to unshard is post_forward_order[i-1]
// (-1: none).
int RealRank::backward_prefetch_target(int g) {
  std::vector<int>& idx = groups_[g].post_forward_indices;
  if (idx.empty()) return -1;
  const int i = idx.back();
  idx.pop_back();
  return i - 1 < 0 ? -1 : post_forward_order_[i - 1];
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._prefetch_unshard: unshard()
// without the wait: the all-gather is issued and kept; the group's own
// pre_backward (wait_for_unshard) registers U. A no-op when the group is
// unsharded or has one pending.
void RealRank::prefetch_unshard(int g) {
  if (groups_[g].unsharded() || groups_[g].all_gather_result.defined()) return;
  groups_[g].all_gather_result = all_gather_group(g);
  note_unsharded_peak();
}

// torch 2.13 _fsdp_state.py::FSDPState._register_pre_backward_hook (from _post_forward): a
// tensor hook on the module's output; libtorch fires it when autograd reaches that
// tensor, hooks on one tensor in registration order. Recorded, then replayed after
// the backward in the order they fired.
void RealRank::register_pre_backward_hook(int g, const at::Tensor& out) {
  if (!at::GradMode::is_enabled() || !out.requires_grad()) return;
  // One id per output tensor: the previous hooked tensor is held until the next
  // registration, so `is_same` cannot be fooled by a freed tensor's address.
  if (!last_hooked_.defined() || !last_hooked_.is_same(out)) ++hooked_tensors_;
  last_hooked_ = out;
  const int64_t id = hooked_tensors_;
  out.register_hook([this, g, id](const at::Tensor&) { fired_.emplace_back(g, id); });
}

// PeftModel.forward under the FSDP2 hooks: the root's pre-forward first, each
// child group unshards at its first module and reshards after its last, the
// root's post-forward last (_fsdp_state.py::FSDPState._pre_forward/_post_forward).
// `loss = model(x)` that raises never assigns: a later backward runs on the previous output,
// whose graph each group's out_rg and in_rg describe (the FSDP state the raised forward changed stays).
void RealRank::op_forward(bool grad_enabled) {
  std::vector<std::pair<bool, bool>> prev;  // per group: out_rg, in_rg
  for (const RealGroup& gr : groups_) prev.emplace_back(gr.out_rg, gr.in_rg);
  try {
    forward_hooks(grad_enabled);
  } catch (...) {
    for (size_t g = 0; g < groups_.size(); ++g) std::tie(groups_[g].out_rg, groups_[g].in_rg) = prev[g];
    throw;
  }
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._init_mp_dtypes: the dtypes of the group's shards
// that require grad, read off the tensors, must be one (frozen shards are not looked at).
void RealRank::init_mp_dtypes(int g) {
  groups_[g].dtype_attrs = true;  // _fsdp_param.py::FSDPParam.init_dtype_attrs on each param, before the check
  std::set<at::ScalarType> dtypes;
  for (int p : layout_->groups[g].params)  // a re-added adapter's ghost: the FSDPParam's own shard
    if (fsdp_param(p).s.defined() && fsdp_param(p).s.requires_grad()) dtypes.insert(param_dtype(p));
  if (dtypes.size() > 1) {
    // Python's set of the two dtypes prints bf16 first (as measured on torch 2.13).
    std::string got;
    for (at::ScalarType t : {at::kBFloat16, at::kFloat})
      if (dtypes.count(t)) got += std::string(got.empty() ? "" : ", ") + (t == at::kBFloat16 ? "torch.bfloat16" : "torch.float32");
    throw OpError(Status::AssertionError, "FSDP expects uniform original parameter dtype but got {" + got + "}");
  }
  groups_[g].orig_dtype = dtypes.empty() ? std::nullopt : std::optional<at::ScalarType>(*dtypes.begin());
  groups_[g].state_dict_hooks = true;  // FSDPParamGroup.lazy_init registers them right after the check
}

// FSDPParamGroup.pre_forward's unshard. A group the root's lazy init never reached (an earlier
// group's dtype check raised; the root is not retried) has no FSDPParam.param_dtype, which its
// all-gather inputs read first (torch 2.13 _fsdp_collectives.py::_get_param_all_gather_inputs).
void RealRank::forward_unshard(int g) {
  if (root_lazy_inited_ && !groups_[g].dtype_attrs)
    throw OpError(Status::Exception, "AttributeError: 'FSDPParam' object has no attribute 'param_dtype'");
  unshard(g);
}

void RealRank::forward_hooks(bool grad_enabled) {
  at::AutoGradMode mode(grad_enabled);
  // torch 2.13 _fsdp_state.py::FSDPState._lazy_init, from _root_pre_forward: once (the root is marked
  // before the groups' lazy_init, so a raise is never retried), every group, root first.
  int root = -1;
  for (size_t g = 0; g < layout_->groups.size(); ++g)
    if (layout_->groups[g].is_root) root = static_cast<int>(g);
  // torch 2.13 _fsdp_state.py::FSDPState._pre_forward / _post_forward: a state still in
  // PRE_BACKWARD (a backward raised before its final callback) only unshards, and its
  // post-forward does nothing (no reshard, no hook).
  auto stuck = [&](int g) { return groups_[g].state_pre_backward; };
  if (prepared_ && !root_lazy_inited_ && !(root >= 0 && stuck(root))) {
    root_lazy_inited_ = true;
    for (size_t g = 0; g < layout_->groups.size(); ++g) init_mp_dtypes(static_cast<int>(g));
  }
  forward_order_.clear();
  ckpt_outputs_.clear();
  for (RealLayer& ly : layers_) ly.ckpt_saved.clear();
  for (RealGroup& gr : groups_) gr.out_rg = gr.in_rg = false;
  if (root >= 0 && stuck(root)) {
    unshard(root);
  } else if (root >= 0) {
    groups_[root].in_forward = true;
    forward_unshard(root);
    forward_order_.push_back(root);
  }
  // PeftModel.has_active_enabled_adapter: peft_config[active_adapter] inside the root's forward.
  if (!present_.contains(peft_active_))
    throw OpError(Status::KeyError, "KeyError: '" + layout_->adapters[peft_active_].name + "'");
  // `data same`: every rank reads rank 0's batch; `per_rank`: its own (a DistributedSampler's shard).
  std::vector<float> x = rank_input(*layout_, seed_, layout_->data == Data::PerRank ? comm_->rank() : 0);
  at::Tensor h = at::from_blob(x.data(), {3, layout_->layers.front().in}, at::kFloat).clone();
  for (size_t l = 0; l < layout_->layers.size(); ++l) {
    int g = layout_->layers[l].group;
    const GroupSpec& gs = layout_->groups[g];
    bool child = g != root;
    if (child && gs.first_layer == static_cast<int>(l) && stuck(g)) {
      wrapper_forward(static_cast<int>(l));
      unshard(g);
    } else if (child && gs.first_layer == static_cast<int>(l)) {
      wrapper_forward(static_cast<int>(l));
      // FSDPParamGroup.pre_forward registers the post-backward node only when entering FORWARD.
      groups_[g].in_rg = h.requires_grad() && !groups_[g].in_forward;
      groups_[g].in_forward = true;
      forward_unshard(g);
      forward_order_.push_back(g);
    }
    at::Tensor base_out;
    const at::Tensor in = h;
    const bool ckpt = layout_->layers[l].checkpoint;
    if (ckpt) saving_ = &layers_[l].ckpt_saved;
    try {
      h = layer_forward(static_cast<int>(l), h, &base_out);
    } catch (...) {
      saving_ = nullptr;
      // the member completing a grouped fully_shard([...]) runs the group's post-forward on a raise
      // (always_call=True, torch 2.13 _fsdp_state.py::_register_group_forward_hooks): reshard, IDLE
      if (child && gs.layers.size() > 1 && gs.last_layer == static_cast<int>(l) && !stuck(g)) {
        reshard_in_forward(g);
        record_post_forward(g);
        groups_[g].in_forward = false;
      }
      throw;
    }
    saving_ = nullptr;
    if (ckpt) checkpoint_forward(static_cast<int>(l), in, h);
    if (child && gs.last_layer == static_cast<int>(l) && !stuck(g)) {
      // A layer wrapped after fully_shard: the FSDP module is its base layer.
      const at::Tensor& out = layout_->layers[l].lora_after_fsdp ? base_out : h;
      groups_[g].out_rg = out.requires_grad();
      reshard_in_forward(g);
      record_post_forward(g);
      groups_[g].in_forward = false;
      register_pre_backward_hook(g, out);
    }
    if (l + 1 < layout_->layers.size()) h = at::relu(h);
  }
  if (root >= 0 && !stuck(root)) {
    groups_[root].out_rg = h.requires_grad();
    reshard_in_forward(root);
    record_post_forward(root);
    groups_[root].in_forward = false;
    register_pre_backward_hook(root, h);
  }
  register_checkpoint_hooks();
  last_hooked_ = at::Tensor();
  loss_ = h.sum();
  have_output_ = true;
}

// loss.backward() by libtorch autograd (its own error when nothing requires
// grad), then the FSDP2 hook sequence in the order the hooks fire: the root's
// pre-backward, the children's in reverse forward order (a child whose input
// required grad runs post_backward there), the root's final callback for the rest.
void RealRank::op_backward() {
  if (!have_output_) throw OpError(Status::ValueError, "backward without a forward output");
  have_output_ = false;
  // Unmanaged leaves (adapters added after fully_shard) get their grad from autograd directly.
  std::vector<std::pair<at::TensorImpl*, int64_t>> before(params_.size(), {nullptr, -1});
  for (size_t p = 0; p < params_.size(); ++p) {
    if (group_of(static_cast<int>(p)) >= 0 || !params_[p].leaf.s.defined()) continue;
    const at::Tensor& gr = params_[p].leaf.s.grad();
    if (gr.defined()) before[p] = {gr.unsafeGetTensorImpl(), gr._version()};
  }
  // Each group's own pre_backward (its wait_for_unshard) fires before autograd
  // reaches its parameters: to_unsharded copies requires_grad S -> U first, so
  // a flag turned off on S since the forward stops AccumulateGrad. Apply those
  // flags now (per group, so in any order: a hooked group still sharded gets
  // U's flag from S); the collectives are issued below, in the order the hooks fired.
  std::vector<std::pair<int, int>> copied;  // (group, param) whose U flag changed here
  for (size_t g = 0; g < layout_->groups.size(); ++g) {
    if (!groups_[g].out_rg || groups_[g].unsharded()) continue;
    for (int p : layout_->groups[g].params)
      if (!params_[p].detached && params_[p].leaf.u.defined() && params_[p].leaf.u.requires_grad() != params_[p].leaf.s.requires_grad()) {
        params_[p].leaf.u.requires_grad_(params_[p].leaf.s.requires_grad());
        copied.emplace_back(static_cast<int>(g), p);
      }
  }
  fired_.clear();
  // A checkpointed layer's recompute that raises stops autograd there: the hooks that fired
  // ran, the groups above that layer finished their post_backward, the final callback never runs.
  std::exception_ptr recompute_raised;
  ckpt_raised_ = -1;
  const bool queued_here = !final_callback_queued_;
  try {
    loss_.backward();
  } catch (const OpError&) {
    recompute_raised = std::current_exception();
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    loss_ = at::Tensor();
    throw OpError(msg.find("does not require grad") != std::string::npos ? Status::NoGradFn : Status::ValueError, msg);
  }
  loss_ = at::Tensor();
  if (recompute_raised) {
    // A group whose hook never fired never ran pre_backward: its U keeps the flags it had.
    std::vector<uint8_t> fired(layout_->groups.size(), 0);
    for (const auto& f : fired_) fired[f.first] = 1;
    for (const auto& [g, p] : copied)
      if (!fired[g]) params_[p].leaf.u.requires_grad_(!params_[p].leaf.u.requires_grad());
  }
  // The hook sequence as libtorch fired it: every hook on one output tensor
  // (pre_backward: unshard, then prefetch post_forward_order[i-1], torch 2.13
  // FSDPParamGroup.pre_backward -> _backward_prefetch), then, once autograd is
  // inside the module, post_backward of a child whose input required grad.
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
      if (recompute_raised && gs.first_layer <= ckpt_raised_) continue;  // autograd never left it
      if (!gs.is_root && groups_[fired_[k].first].in_rg) hooks.push_back({Hook::kPostBackward, fired_[k].first});
    }
    i = j;
  }
  std::vector<uint8_t> done(layout_->groups.size(), 0);
  for (const Hook& h : hooks) {
    if (h.kind == Hook::kUnshard) {
      groups_[h.g].state_pre_backward = true;  // FSDPState._pre_backward, which queues the final callback once
      final_callback_queued_ = true;
      unshard(h.g);  // pre_backward
    } else if (h.kind == Hook::kPrefetch) {
      prefetch_unshard(h.g);
    } else {
      post_backward(h.g);
      done[h.g] = 1;
    }
  }
  for (size_t p = 0; p < params_.size(); ++p) {
    if (group_of(static_cast<int>(p)) >= 0 || !params_[p].leaf.s.defined()) continue;
    const at::Tensor& gr = params_[p].leaf.s.grad();
    if (!gr.defined()) continue;
    bool fresh = before[p].first != gr.unsafeGetTensorImpl() || before[p].second != gr._version();
    if (fresh && layout_->params[p].adapter >= 0) res_.grads.insert(layout_->params[p].adapter);
  }
  if (recompute_raised) std::rethrow_exception(recompute_raised);
  // Only a backward whose pre_backward queued the final callback runs it.
  // A post_backward that raises ends it there: that group and the ones after it keep their state
  // (PRE_BACKWARD) and the callback stays queued (_fsdp_state.py::FSDPState.
  // _root_post_backward_final_callback resets its flag last), so no later backward runs it.
  if (!queued_here || !final_callback_queued_) return;
  for (size_t g = 0; g < layout_->groups.size(); ++g) {
    if (!done[g]) post_backward(static_cast<int>(g));
    groups_[g].state_pre_backward = false;
    groups_[g].in_forward = false;  // the final callback leaves every group IDLE
    groups_[g].post_forward_indices.clear();  // torch 2.13 FSDPParamGroup.finalize_backward, which also
    groups_[g].all_gather_result = at::Tensor();         // drops a mistargeted prefetch's all-gather output
  }
  post_forward_order_.clear();  // torch 2.13 _fsdp_state.py::_root_post_backward_final_callback (is_last_backward)
  final_callback_queued_ = false;
}

}  // namespace fsdpsim::real
