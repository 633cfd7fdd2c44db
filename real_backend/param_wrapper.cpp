// LoRA on a mixture-of-experts parameter (peft/tuners/lora/layer.py::ParamWrapper,
// `target_parameters`): the delta on real tensors, where get_delta_weight reads
// A and B from, and the forward through autograd.
#include "real_backend/param_wrapper.hpp"
#include "real_backend/activation_dtype.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "real_backend/lora_layer.hpp"
#include "real_backend/op_raised.hpp"
#include "real_backend/values.hpp"

namespace fsdpsim::real {

at::Tensor experts_einsum(const at::Tensor& a, const at::Tensor& b, int64_t experts) {
  at::Tensor a3 = a.reshape({experts, -1, a.size(-1)});
  at::Tensor b3 = b.reshape({b.size(0), -1, experts});
  return at::einsum("ore,eri->eio", {b3, a3});
}

at::Tensor experts_delta_per_expert(const at::Tensor& a, const at::Tensor& b, int64_t experts) {
  const int64_t r = a.size(0) / experts;
  std::vector<at::Tensor> per;
  for (int64_t e = 0; e < experts; ++e)
    per.push_back(at::matmul(b.slice(1, e, b.size(1), experts), a.narrow(0, e * r, r)).t());
  return at::stack(per);
}

std::string first_line(const std::string& what) { return what.substr(0, what.find('\n')); }

// lora/layer.py::ParamWrapper.get_delta_weight on whatever lora_A / lora_B the
// registry holds. It reads lora_A[a].weight without calling the module; under
// FSDP2 (torch 2.13) a sharded group hands it DTensors, so:
// - U registered, an adapter no group manages, or world 1: the full tensors;
// - delta_weight_gather on (the fix #3102 proposed): A, then B, all-gathered;
// - E == 1: Linear's path (see one_expert_delta);
// - a shard otherwise: A.reshape(E, -1, in) of a Shard(0) A raises when E does
//   not divide over the mesh (r > 1); else the einsum redistributes A (one
//   all-gather of A) and gives the delta's columns of this rank's rows of B,
//   exact; a merge's `param.data += delta` redistributes the delta into W's
//   Shard(0) (one all-gather named after W, the size of W's shard).
// Returns what merge adds to the registered weight: the whole delta, or this
// rank's padded chunk of experts when W's shard is registered. For the
// delta_weight op (!merge), the value get_delta_weight returns, and in *what
// which part of which shape it is: the observer judges it against the full
// B @ A * scaling of every rank's shards (observer.cpp), never the rank, whose
// gathered inputs may not be the adapter's (a copy the optimizer stepped past).
at::Tensor ParamWrapper::get_delta_weight(int adapter, bool merge, DeltaValue* what) {
  at::NoGradGuard ng;
  const LayerSpec& ls = layout_->layers[layer_];
  const int pa = ls.lora_a[adapter], pb = ls.lora_b[adapter], pw = ls.weight;
  const int world = layout_->world;
  const float scale = lora_scaling(*layout_, adapter);
  // ParamWrapper.get_delta_weight's einsum has no fp32 cast: each DTensor gather sends its
  // tensor's own dtype, the delta's is A's and B's promoted (peft 0.21.2 lora/layer.py).
  const auto own = [&](int p) { return dtype_of((*params_)[p].leaf.place); };
  const DType delta_dtype = own(pa) == DType::BF16 && own(pb) == DType::BF16 ? DType::BF16 : DType::F32;
  auto holds_shard = [&](int p) {
    return params_->group_of(p) >= 0 && params_->registered(p).unsafeGetTensorImpl() == (*params_)[p].leaf.s.unsafeGetTensorImpl();
  };
  // A 1-rank mesh still makes DTensors: the DTensor broadcast text at world 1 too (gather_full reads S there).
  if (ls.experts == 1) return one_expert_delta(adapter, merge, holds_shard(pa), what);
  if (what) what->shape = {ls.experts, ls.in, ls.out};
  auto chunk_of_w = [&](const at::Tensor& d) {
    if (!holds_shard(pw)) return d;
    const ParamSpec& ws = layout_->params[pw];
    at::Tensor padded = at::zeros(param_shape(*layout_, ws, world * ws.chunk_rows));
    padded.narrow(0, 0, ws.rows).copy_(d);
    return padded.narrow(0, pg_->rank() * ws.chunk_rows, ws.chunk_rows);
  };
  at::Tensor a, b;
  if (!holds_shard(pa) || world == 1) {
    a = params_->registered(pa);
    b = params_->registered(pb);
    if (!merge && what) {
      what->form = kDeltaFull;
      return experts_einsum(a, b, ls.experts) * scale;
    }
  } else if (layout_->profile.get(Switch::DeltaWeightGather) == sw::kOn) {
    a = dtensor_->full_tensor(pa, own(pa));
    b = dtensor_->full_tensor(pb, own(pb));
  } else {
    const int64_t E = ls.experts, r = layout_->adapters[adapter].r;
    // torch 2.13 distributed/tensor/_ops/_view_ops.py::_ViewShardingPropagator._analyze_split:
    // libtorch 1.13 has no DTensor, so this text is written by fsdpsim (torch 2.13's words).
    if (E % world != 0 && r > 1)
      throw OpError(Status::Exception, "RuntimeError: Cannot unflatten unevenly sharded tensor: output dimension 0 (size " +
                                           std::to_string(E) + ") is not evenly divisible by mesh dimension 0 (size " +
                                           std::to_string(world) + "). Please redistribute the tensor before this operation.");
    // DTensor's einsum (a bmm over the experts when r > 1, a broadcasting mul when r == 1; torch
    // 2.13 _ops/_matrix_ops.py, _ops/_pointwise_ops.py, cheapest by _collective_utils.py::
    // redistribute_cost, a bmm sharding fewer rows than ranks dropped by _ops/utils.py::
    // is_tensor_shardable), as measured on torch 2.13: B keeps its rows and A is gathered
    // when r == 1 and out > 1, or out >= world (below); else with E >= world both shard on the
    // experts, B's Shard(out) -> Shard(experts) being one all-gather of B on gloo
    // (shard_dim_alltoall); else B, then A, are gathered. r > 1 with one out row: the bmm's
    // view of B's sharded singleton raises first.
    const ParamSpec& bs = layout_->params[pb];
    const ParamSpec& ws = layout_->params[pw];
    if (r > 1 && bs.rows == 1)
      throw OpError(Status::ShapeError, "This operation would remove or reshape sharded dimension 3, which requires "
                                        "redistribution. Please redistribute the input first.");
    if (!(r == 1 && bs.rows > 1) && bs.rows < world) {
      if (E < world) {  // replicated: B, then A; a merge then raises (check_inplace_placement)
        b = dtensor_->full_tensor(pb, own(pb));
        a = dtensor_->full_tensor(pa, own(pa));
        at::Tensor d = experts_einsum(a, b, E) * scale;
        if (what) what->form = kDeltaFull;
        return d;
      }
      {  // B's Shard(out) -> Shard(experts): each rank's rows (ceil(out / w), r, E), padded on E to a
         // multiple of the world (torch 2.13 placement_types.py::Shard._to_new_shard_dim), all-gathered
        const int64_t rows_b = bs.local_rows(pg_->rank()), e_pad = (E + world - 1) / world * world;
        at::Tensor mine_b = at::zeros({bs.chunk_rows, r, e_pad}, (*params_)[pb].leaf.s.options());
        mine_b.narrow(0, 0, rows_b).narrow(2, 0, E).copy_((*params_)[pb].leaf.s.narrow(0, 0, rows_b).reshape({rows_b, r, E}));
        at::Tensor all = dtensor_->redistribute(mine_b.reshape({-1}), bs.group, pb, own(pb));
        b = all.view({world * bs.chunk_rows, r, e_pad}).narrow(0, 0, bs.rows).narrow(2, 0, E).reshape({bs.rows, r * E});
      }
      const ParamSpec& as = layout_->params[pa];
      const int64_t n = ws.local_rows(pg_->rank());  // this rank's experts: its rows of A and of W
      at::Tensor a_rows = (*params_)[pa].leaf.s.narrow(0, 0, as.local_rows(pg_->rank()));
      at::Tensor b_cols = b.reshape({b.size(0), -1, E}).narrow(2, pg_->rank() * ws.chunk_rows, n);
      at::Tensor mine = n == 0 ? at::zeros({0, ws.cols / bs.rows, bs.rows})
                               : at::einsum("ore,eri->eio", {b_cols, a_rows.reshape({n, -1, a_rows.size(-1)})}) * scale;
      if (!merge) {  // this rank's experts of the delta (none: an empty value, judged as well)
        if (what) what->form = kDeltaRows;
        return mine;
      }
      at::Tensor padded = at::zeros(param_shape(*layout_, ws, ws.chunk_rows));
      padded.narrow(0, 0, n).copy_(mine);
      return padded;
    }
    a = dtensor_->full_tensor(pa, own(pa));  // the einsum's redistribution of A
    const int64_t in = a.size(1), rows_b = bs.local_rows(pg_->rank());
    b = (*params_)[pb].leaf.s.narrow(0, 0, rows_b);
    // The delta's columns for this rank's rows of B (out): (E, in, rows_b).
    at::Tensor cols = rows_b == 0 ? at::zeros({E, in, 0}) : experts_einsum(a, b, E) * scale;
    if (!merge) {
      if (what) what->form = kDeltaColumns;
      return cols;
    }
    // `param.data += delta`: the delta's Shard(out) -> W's Shard(0), one all-gather named after W
    // of each rank's columns (E, in, ceil(out / world)), padded on dim 0 to a multiple of the world.
    // W's E < world rows keep no Shard(0): the in-place add raises first (check_inplace_placement).
    if (ws.rows < world) return cols;
    const int64_t e_pad = (E + world - 1) / world * world;  // padded on dim 0 to split into W's chunks
    at::Tensor mine = at::zeros({e_pad, in, bs.chunk_rows});
    mine.narrow(0, 0, E).narrow(2, 0, rows_b).copy_(cols);
    at::Tensor all = dtensor_->redistribute(mine.reshape({-1}), ws.group, pw, delta_dtype);
    std::vector<at::Tensor> parts;
    for (int j = 0; j < world; ++j)
      parts.push_back(all.narrow(0, j * mine.numel(), mine.numel())
                          .view({e_pad, in, bs.chunk_rows})
                          .narrow(0, 0, E)
                          .narrow(2, 0, bs.local_rows(j)));
    return chunk_of_w(at::cat(parts, 2));
  }
  at::Tensor d = experts_einsum(a, b, ls.experts) * scale;
  if (what) what->form = holds_shard(pw) ? kDeltaChunk : kDeltaFull;
  return chunk_of_w(d);
}

// peft 0.21.2 lora/layer.py::ParamWrapper.get_delta_weight with num_experts == 1
// takes Linear.get_delta_weight: B @ A, shape (out, in), for a weight stored
// (1, in, out) (is_transposed). On a shard the matmul redistributes A (one
// all-gather of A). The delta_weight op returns that delta, whose shape is not
// the layer's: the observer tells them apart.
// A merge adds it where the shapes broadcast (out == in, or a size-1 side): a
// delta of its own, taken back by unmerge; else torch's broadcast error.
at::Tensor ParamWrapper::one_expert_delta(int adapter, bool merge, bool dtensor, DeltaValue* what) {
  const LayerSpec& ls = layout_->layers[layer_];
  const int pa = ls.lora_a[adapter], pb = ls.lora_b[adapter], pw = ls.weight;
  const float scale = lora_scaling(*layout_, adapter);
  at::Tensor a, b;
  // delta_weight_gather=on (the #3102 fix): the full A and B, so the full delta; an adapter added
  // after prepare (plain A and B) has its delta laid out like W, so W meets a DTensor as well.
  const bool gather_fix = layout_->profile.get(Switch::DeltaWeightGather) == sw::kOn;
  const bool late_distributed = !dtensor && gather_fix && dtensor_->late_delta_on_shard(layer_, adapter);
  const bool full_b = (dtensor && layout_->world > 1 && gather_fix) || late_distributed;
  // B @ A with fewer out rows than ranks (Linear.get_delta_weight's matmul): B cannot stay Shard(0).
  const bool few_rows = dtensor && !full_b && layout_->world > 1 && layout_->params[pb].rows < layout_->world;
  at::Tensor d;
  DeltaForm form = kDeltaFull;
  if (few_rows) {
    d = dtensor_->matmul_few_rows(layer_, adapter, &form);
  } else if (dtensor) {
    form = full_b ? kDeltaFull : kDeltaRows;
    a = dtensor_->full_tensor(pa);
    b = full_b ? dtensor_->full_tensor(pb) : (*params_)[pb].leaf.s.narrow(0, 0, layout_->params[pb].local_rows(pg_->rank()));
  } else {
    a = params_->registered(pa);
    b = params_->registered(pb);
  }
  if (!few_rows) d = at::matmul(b, a) * scale;  // (rows of B, in)
  // single_expert_delta=param_layout (docs/findings/param-wrapper-single-expert.patch): the delta
  // transposed and unsqueezed to the weight's (1, in, out); B's rows become its last dimension.
  const bool param_layout = layout_->profile.get(Switch::SingleExpertDelta) == sw::kParamLayout;
  if (what && param_layout) *what = {form == kDeltaRows ? kDeltaColumns : form, {1, ls.in, ls.out}, {}};
  else if (what) *what = {form, {ls.out, ls.in}, {}};  // Linear's delta, not the layer's (E, in, out)
  if (!merge) return param_layout ? d.t().unsqueeze(0).contiguous() : d;
  const int64_t in = ls.in, out = ls.out;
  at::Tensor w = params_->registered(pw);
  const bool dtensor_add = dtensor || late_distributed;
  if (!param_layout && out != in && out != 1 && in != 1) {
    // torch 2.13 distributed/tensor/_ops/utils.py::infer_broadcast_dims_map: libtorch 1.13 has no
    // DTensor, so this text is written by fsdpsim (torch 2.13's words).
    if (dtensor_add)
      throw OpError(Status::ShapeError, "Attempting to broadcast a dimension of length " + std::to_string(in) +
                                            " at -1! Mismatching argument at index 1 had torch.Size([" + std::to_string(out) +
                                            ", " + std::to_string(in) + "]); but expected shape should be broadcastable to [1, " +
                                            std::to_string(in) + ", " + std::to_string(out) + "]");
    return d;  // W.data += delta: libtorch's own broadcast error (apply_delta)
  }
  // single_expert_delta=param_layout on a sharded group: the in-place add raises before any
  // redistribution (DTensor::check_inplace_placement, after this returns).
  if (param_layout && dtensor && !gather_fix && layout_->world > 1) return d;
  // The broadcasting add needs the delta whole: DTensor redistributes its Shard(0) rows to
  // Replicate (torch 2.13 _redistribute.py), one all-gather named after the weight. A delta in the
  // weight's own layout (param_layout, reached here only with delta_weight_gather=on, which reads
  // A and B whole) is distributed like W: nothing to redistribute.
  at::Tensor full = at::zeros({out, in});
  if (dtensor_add && !few_rows && layout_->world > 1 && !param_layout) {
    const ParamSpec& bs = layout_->params[pb];
    const int64_t start = pg_->rank() * bs.chunk_rows, rows = bs.local_rows(pg_->rank());
    at::Tensor mine = at::zeros({bs.chunk_rows, in});
    if (rows > 0) mine.narrow(0, 0, rows).copy_(full_b ? d.narrow(0, start, rows) : d.narrow(0, 0, rows));
    at::Tensor all = dtensor_->redistribute(mine.reshape({-1}), layout_->params[pw].group, pw);
    full.copy_(all.view({layout_->world * bs.chunk_rows, in}).narrow(0, 0, out));
  } else {
    full.copy_(d);
  }
  at::Tensor add = at::zeros(w.sizes());
  if (w.size(0) > 0 && (!dtensor_add || layout_->params[pw].local_rows(pg_->rank()) > 0)) {
    add.narrow(0, 0, 1).copy_(param_layout ? full.t().reshape({1, in, out}) : full.reshape({1, in, out}));
  }
  return add;
}

// ParamWrapper.forward -> _activate_lora: while the module runs, the parameter
// is the registered weight plus the active adapters' deltas (a parametrization,
// so gradients reach A and B); the MoE module then computes
// y[b, o] = sum_e sum_i x[b, i] * W[e, i, o]. Merged or disabled: the weight
// alone (a disabled layer unmerges first), as lora/layer.py::Linear.forward.
// peft lora/layer.py::ParamWrapper.forward -> _activate_lora, on a ParamWrapper created after
// fully_shard around the experts module: it parametrizes the registered weight before that
// module's pre-forward (torch nn/utils/parametrize.py::register_parametrization checks the
// result once), so with the group SHARDED it meets W's DTensor shard with plain LoRA factors:
// torch.baddbmm for one adapter on E > 1 fp32 experts (_LoraFactorsProxy), else W + delta.
void ParamWrapper::activate_lora(const LoraLayer& layer) {
  const LayerSpec& ls = layout_->layers[layer_];
  const int g = params_->group_of(ls.weight);
  if (!dtensor_->prepared() || !ls.wrapper_after_fsdp || !layer.tuner || layer.disabled || !layer.merged.empty() ||
      g < 0 || !dtensor_->group_sharded(g))
    return;
  int n = 0;
  for (size_t a = 0; a < layout_->adapters.size(); ++a)
    n += layer.active.contains(static_cast<int>(a)) && ls.lora_a[a] >= 0 && params_->registered(ls.lora_a[a]).defined();
  if (n == 0) return;
  const bool fold = n == 1 && ls.experts > 1 && (*params_)[ls.weight].leaf.place.scalar_type() != at::kBFloat16;
  throw OpError(Status::Exception, std::string("RuntimeError: aten.") + (fold ? "baddbmm.default" : "add.Tensor") +
                                       " got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor "
                                       "before calling distributed operators!");
}

at::Tensor ParamWrapper::forward(const LoraLayer& layer, const at::Tensor& h) {
  const LayerSpec& ls = layout_->layers[layer_];
  at::Tensor w = params_->registered(ls.weight);
  if (!layer.disabled && layer.merged.empty()) {
    for (size_t a = 0; a < layout_->adapters.size(); ++a) {
      if (!layer.active.contains(static_cast<int>(a)) || ls.lora_a[a] < 0 || !params_->registered(ls.lora_a[a]).defined()) continue;
      try {
        const float scale = lora_scaling(*layout_, static_cast<int>(a));
        if (ls.experts == 1) {
          // _activate_lora with E == 1: W (1, in, out) + Linear's (out, in) delta; broadcasts only
          // when out == in or a side is 1 (then the delta laid out as the weight), else torch's error.
          at::Tensor d = at::matmul(params_->registered(ls.lora_b[a]), params_->registered(ls.lora_a[a])) * scale;
          if (layout_->profile.get(Switch::SingleExpertDelta) == sw::kParamLayout)
            w = w + d.t().reshape(w.sizes());  // single_expert_delta=param_layout: the layer's delta
          else
            w = (ls.out == ls.in || ls.out == 1 || ls.in == 1) ? w + d.reshape(w.sizes()) : w + d;
          continue;
        }
        w = w + experts_einsum(params_->registered(ls.lora_a[a]), params_->registered(ls.lora_b[a]), ls.experts) * scale;
      } catch (const c10::Error& e) {
        throw OpError(Status::ShapeError, first_line(e.what_without_backtrace()));  // what() symbolizes a backtrace: slow
      }
    }
  }
  if (!layout_->mixed_precision) return at::matmul(h, w.sum(0));
  // Under a MixedPrecisionPolicy the experts module's own forward, einsum("bi,eio->bo", x, W) / E
  // (the harness's Experts.forward), on the weight in its real dtype (U's: the policy's cast; peft
  // lora/layer.py::_LoraParameterProxy.forward keeps W's dtype): libtorch's bmm / mm raise the
  // dtype error themselves.
  try {
    return at::einsum("bi,eio->bo", {h, w.to(params_->forward_dtype(ls.weight))}) / static_cast<double>(ls.experts);
  } catch (const c10::Error& e) {
    raise_op_error(e);
  }
}

}  // namespace fsdpsim::real
