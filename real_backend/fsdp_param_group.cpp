// FSDPParamGroup's transitions on real tensors: all-gather into U and register
// it, register S again at reshard, post-backward reduce-scatters into S.grad.
// Mirrors torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py function by function.
#include "real_backend/fsdp_param_group.hpp"

#include "real_backend/op_raised.hpp"

#include <set>
#include <string>

namespace fsdpsim::real {

bool FsdpParamGroup::gathers_bytes() const {
  const GroupSpec& gs = spec();
  for (int p : gs.params)
    if (params_->gathered_dtype(p) != params_->gathered_dtype(gs.params[0])) return true;
  return false;
}

// _fsdp_param_group.py::FSDPParamGroup.unshard: one packed all-gather of every
// managed parameter (frozen ones and deleted ones too), world chunks in rank order.
at::Tensor FsdpParamGroup::all_gather() {
  const GroupSpec& gs = spec();
  const bool bytes = gathers_bytes();
  std::vector<at::Tensor> flat;
  for (int p : gs.params) {
    at::Tensor f = (*params_)[p].fsdp_objects().s.reshape({-1});  // a ghost packs the deleted module's shard
    // torch 2.13 _fsdp_collectives.py::_get_param_all_gather_inputs: under a MixedPrecisionPolicy
    // the shard is first cast to its param_dtype (the values U gets are that cast's).
    const bool cast = (*params_)[p].mp_param_dtype.has_value();
    if (cast && !bytes) f = f.to(params_->gathered_dtype(p)).to(at::kFloat);
    // torch 2.13 _fsdp_collectives.py::foreach_all_gather: inputs of different dtypes travel as uint8.
    flat.push_back(bytes ? f.to(params_->gathered_dtype(p)).contiguous().view(at::kByte) : f);
  }
  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.unshard / wait_for_unshard: world_size == 1
  // initialises U from the shards directly, no all-gather.
  if (layout_->world == 1) return at::cat(flat);
  // torch 2.13 _fsdp_collectives.py::_get_all_gather_input_metadatas: gloo pairs the group's
  // bytes, counted in its wire dtype: the shards' own, uint8 when they differ.
  const DType wire = bytes ? DType::U8 : dtype_of(params_->gathered_dtype(gs.params[0]));
  at::Tensor got = pg_->comm->all_gather(at::cat(flat), index_, pg_->step, gs.params, -1, false, wire);
  return bytes ? got.to(at::kByte) : got;  // what travels comes back as floats
}

// _fsdp_param_group.py::FSDPParamGroup.unshard + wait_for_unshard +
// FSDPParam.to_unsharded: the all-gather (unless a backward prefetch's is
// pending), U created once then refilled, requires_grad copied S -> U only when
// it differs, U registered. Returns at once when already unsharded.
void FsdpParamGroup::unshard() {
  if (unsharded()) return;
  const GroupSpec& gs = spec();
  const int world = layout_->world;
  at::Tensor gathered = all_gather_result.defined() ? all_gather_result : all_gather();
  all_gather_result = at::Tensor();
  const bool bytes = gathers_bytes();
  auto unit = [&](int p) {
    return layout_->params[p].chunk_numel() * (bytes ? static_cast<int64_t>(c10::elementSize(params_->gathered_dtype(p))) : 1);
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
    if (bytes) full = full.view(params_->gathered_dtype(p)).to(at::kFloat);
    full = full.narrow(0, 0, ps.rows * ps.cols);
    (*params_)[p].to_unsharded(full, param_shape(*layout_, ps, ps.rows));
  }
  sharded = ShardedState::Unsharded;
  if (on_all_gather) on_all_gather();
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._prefetch_unshard: unshard()
// without the wait: the all-gather is issued and kept; the group's own
// pre_backward (wait_for_unshard) registers U. A no-op when the group is
// unsharded or has one pending.
void FsdpParamGroup::prefetch_unshard() {
  if (unsharded() || all_gather_result.defined()) return;
  all_gather_result = all_gather();
  if (on_all_gather) on_all_gather();
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup._init_mp_dtypes: the dtypes of the group's shards
// that require grad, read off the tensors, must be one (frozen shards are not looked at).
void FsdpParamGroup::lazy_init() {
  dtype_attrs = true;  // _fsdp_param.py::FSDPParam.init_dtype_attrs on each param, before the check
  const GroupSpec& gs = spec();
  const auto scalar = [](std::optional<DType> d) {
    return d ? std::optional<at::ScalarType>(*d == DType::BF16 ? at::kBFloat16 : at::kFloat) : std::nullopt;
  };
  // torch 2.13 _fsdp_param.py::FSDPParam.init_dtype_attrs: a param_dtype equal to the shard's own
  // dtype is None; a reduce_dtype equal to param_dtype is None.
  const std::optional<at::ScalarType> policy_param = scalar(gs.mp_param);
  const std::optional<at::ScalarType> reduce = gs.mp_reduce == gs.mp_param ? std::nullopt : scalar(gs.mp_reduce);
  std::set<at::ScalarType> dtypes;
  for (int p : gs.params) {  // a re-added adapter's ghost: the FSDPParam's own shard
    FsdpParam& fp = (*params_)[p];
    fp.mp_param_dtype = policy_param == fp.param_dtype() ? std::nullopt : policy_param;
    if (fp.fsdp_objects().s.defined() && fp.fsdp_objects().s.requires_grad()) dtypes.insert(fp.param_dtype());
  }
  if (dtypes.size() > 1) {
    // Python's set of the two dtypes prints bf16 first (as measured on torch 2.13).
    std::string got;
    for (at::ScalarType t : {at::kBFloat16, at::kFloat})
      if (dtypes.count(t)) got += std::string(got.empty() ? "" : ", ") + (t == at::kBFloat16 ? "torch.bfloat16" : "torch.float32");
    throw OpError(Status::AssertionError, "FSDP expects uniform original parameter dtype but got {" + got + "}");
  }
  orig_dtype = dtypes.empty() ? std::nullopt : std::optional<at::ScalarType>(*dtypes.begin());
  // _fsdp_param_group.py::FSDPParamGroup._init_mp_dtypes: with nothing trainable here the group
  // keeps no reduce dtype either, whatever is unfrozen later (pytorch#187376).
  reduce_dtype = dtypes.empty() ? std::nullopt : reduce;
  state_dict_hooks = true;  // FSDPParamGroup.lazy_init registers them right after the check
}

// FSDPParamGroup.pre_forward's unshard. A group the root's lazy init never reached (an earlier
// group's dtype check raised; the root is not retried) has no FSDPParam.param_dtype, which its
// all-gather inputs read first (torch 2.13 _fsdp_collectives.py::_get_param_all_gather_inputs).
void FsdpParamGroup::pre_forward(bool root_lazy_inited) {
  if (root_lazy_inited && !dtype_attrs)
    throw OpError(Status::Exception, "AttributeError: 'FSDPParam' object has no attribute 'param_dtype'");
  unshard();
}

// _fsdp_param.py::FSDPParam.to_sharded on each parameter.
// (U keeps its values here rather than being resized to 0: a backward that FSDP2
// would serve by re-gathering reads them instead; see docs/design/cpp-backend.md, "What is emulated".)
void FsdpParamGroup::to_sharded() {
  if (!unsharded()) return;
  for (int p : spec().params) (*params_)[p].to_sharded();
  sharded = ShardedState::Sharded;
}

// _fsdp_param_group.py::FSDPParamGroup.reshard in FORWARD: returns at once when
// reshard_after_forward is false.
void FsdpParamGroup::reshard() {
  if (!spec().reshard_after_forward) return;
  to_sharded();
}

// torch 2.13 _fsdp_param_group.py::FSDPParamGroup.reshard: a group still in FORWARD (its
// forward raised before post_forward) without reshard_after_forward stays unsharded.
void FsdpParamGroup::module_reshard() {
  if (in_forward && !spec().reshard_after_forward) return;
  to_sharded();
}

// _fsdp_param_group.py::FSDPParamGroup.post_backward: the parameters whose U
// has a grad, U.grad cleared, reshard, then one reduce-scatter (AVG) of their
// padded grads into S.grad (_fsdp_collectives.py::foreach_reduce). Without
// gradient sync (reduce_grads False) only the reshard: U's grad stays, and
// autograd adds the next micro-batch's to it, until a synced post_backward.
void FsdpParamGroup::post_backward(AdapterSet* grads_to) {
  if (!reduce_grads) {
    to_sharded();
    return;
  }
  const GroupSpec& gs = spec();
  const int world = layout_->world;
  std::vector<int> with_grad;
  std::vector<at::Tensor> grads;
  for (int p : gs.params) {
    ParamTensors& rp = (*params_)[p].fsdp_objects();
    if (!rp.u.defined() || !rp.u.grad().defined()) continue;
    with_grad.push_back(p);
    // U's gradient is in U's dtype (the policy's cast: U's storage is fp32, its values that dtype's)
    at::Tensor g = rp.u.grad().detach().clone();
    grads.push_back(layout_->mixed_precision ? g.to(params_->gathered_dtype(p)).to(at::kFloat) : g);
    rp.u.mutable_grad().reset();
  }
  to_sharded();
  if (with_grad.empty()) return;
  // torch 2.13 _fsdp_param_group.py::FSDPParamGroup.post_backward passes self._orig_dtype to
  // foreach_reduce: a group whose dtype check raised (or that the root's lazy init never reached)
  // has no such attribute. It is set exactly where the state-dict hooks are registered.
  if (!state_dict_hooks) throw OpError(Status::Exception, kNoOrigDtype);
  // torch 2.13 _fsdp_collectives.py::foreach_reduce checks the gradients' dtypes (U's, the
  // params' own) first; the gradients taken off U above are lost with the raise.
  // U's gradient is in U's dtype: the policy's param_dtype where it casts.
  std::set<at::ScalarType> grad_dtypes;
  for (int p : with_grad) grad_dtypes.insert(params_->gathered_dtype(p));
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
  // torch 2.13 _fsdp_collectives.py::foreach_reduce: the gradients are cast to the group's
  // _reduce_dtype, else reduced in their own dtype, which gloo's pairing counts bytes in; no
  // reduce-scatter at world_size == 1. The reduced gradient is cast to _orig_dtype, else it stays
  // in the reduce dtype. What travels is fp32 with the reduce dtype's values, rounded again after.
  const at::ScalarType reduce_in = reduce_dtype.value_or(*grad_dtypes.begin());
  const bool policy = layout_->mixed_precision;
  if (policy) flat = flat.to(reduce_in).to(at::kFloat);
  const DType wire = dtype_of(reduce_in);
  at::Tensor mine = world == 1 ? flat : pg_->comm->reduce_scatter_avg(flat, index_, pg_->step, with_grad, wire);
  const at::ScalarType lands = orig_dtype.value_or(reduce_in);
  if (policy) mine = mine.to(reduce_in).to(lands).to(at::kFloat);
  int64_t offset = 0;
  for (int p : with_grad) {
    const ParamSpec& ps = layout_->params[p];
    ParamTensors& rp = (*params_)[p].fsdp_objects();
    at::Tensor part = mine.narrow(0, offset, ps.chunk_numel()).view(rp.s.sizes()).clone();
    offset += ps.chunk_numel();
    at::Tensor& sg = rp.s.mutable_grad();
    // foreach_reduce casts the reduced gradient to the group's _orig_dtype; a shard with a gradient
    // adds it in place, one without takes it through the grad setter, which refuses another dtype
    // (pytorch#187376: a group frozen at its lazy init hands an unfrozen adapter's fp32 shard a
    // gradient in the compute dtype).
    if (!sg.defined() && lands != params_->param_dtype(p)) throw OpError(Status::Exception, grad_dtype_refused_message(dtype_of(lands)));
    if (sg.defined()) sg.add_(part);
    else sg = part;
    if (ps.adapter >= 0) grads_to->insert(ps.adapter);
  }
}

}  // namespace fsdpsim::real
