// LoRA on a mixture-of-experts parameter (peft/tuners/lora/layer.py::ParamWrapper,
// `target_parameters`): the delta on real tensors, where get_delta_weight reads
// A and B from, and the forward through autograd.
#include "real_backend/real_experts.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "real_backend/real_rank.hpp"
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

// The full value of a managed parameter: one all-gather of its padded shard,
// padding dropped (what FSDP.summon_full_params gives, the fix #3102 proposed).
at::Tensor RealRank::gather_full(int p) {
  const ParamSpec& ps = layout_->params[p];
  // torch 2.13 distributed/tensor/_redistribute.py::redistribute_local_tensor: a 1-rank mesh's
  // Shard -> Replicate is the local tensor, no all-gather.
  at::Tensor all = layout_->world == 1 ? params_[p].s.reshape({-1}) : comm_->all_gather(params_[p].s.reshape({-1}), ps.group, step_, {p});
  return all
      .narrow(0, 0, ps.rows * ps.cols)
      .view({ps.rows, ps.cols});
}

// lora/layer.py::ParamWrapper.get_delta_weight on whatever lora_A / lora_B the
// registry holds. It reads lora_A[a].weight without calling the module, so no
// FSDP hook gathers it (#3080):
// - U registered, an adapter no group manages, or world 1: the full tensors;
// - a shard with E == 1 or delta_weight_gather on: A, then B, all-gathered;
// - a shard otherwise: libtorch's reshape / einsum on this rank's unpadded
//   rows, which raises (shape_error with its text) unless a size-1 dimension
//   broadcasts, and then gives a delta of the wrong shape and values.
// Returns what merge adds to the registered weight: the whole delta, or this
// rank's padded chunk of experts when W's shard is registered. *value: the
// delta against the per-expert computation on the same full A and B.
at::Tensor RealRank::experts_delta(int layer, int adapter, WeightClass* value) {
  at::NoGradGuard ng;
  const LayerSpec& ls = layout_->layers[layer];
  const int pa = ls.lora_a[adapter], pb = ls.lora_b[adapter], pw = ls.weight;
  const int world = layout_->world;
  const float scale = lora_scaling(*layout_, adapter);
  auto holds_shard = [&](int p) {
    return layout_->params[p].group >= 0 && registered(p).unsafeGetTensorImpl() == params_[p].s.unsafeGetTensorImpl();
  };
  at::Tensor a, b;
  if (!holds_shard(pa) || world == 1) {
    a = registered(pa);
    b = registered(pb);
  } else if (ls.experts == 1 || layout_->profile.get(Switch::DeltaWeightGather) == sw::kOn) {
    a = gather_full(pa);
    b = gather_full(pb);
  } else {
    auto local = [&](int p) {
      return params_[p].s.narrow(0, 0, layout_->params[p].local_rows(comm_->rank()));
    };
    at::Tensor d;
    try {
      d = experts_einsum(local(pa), local(pb), ls.experts) * scale;
    } catch (const std::exception& e) {
      throw OpError(Status::ShapeError, first_line(e.what()));
    }
    // Computed from this rank's rows of A only: never the layer's delta.
    if (value) *value = WeightClass::Corrupt;
    return d;
  }
  at::Tensor d = experts_einsum(a, b, ls.experts) * scale;
  if (value) {
    at::Tensor check = experts_delta_per_expert(a, b, ls.experts) * scale;
    bool same = d.sizes() == check.sizes() && at::allclose(d, check, 1e-4, 1e-6);
    *value = same ? WeightClass::Exact : WeightClass::Corrupt;
  }
  if (!holds_shard(pw)) return d;
  const ParamSpec& ws = layout_->params[pw];
  at::Tensor padded = at::zeros(param_shape(*layout_, ws, world * ws.chunk_rows));
  padded.narrow(0, 0, ws.rows).copy_(d);
  return padded.narrow(0, comm_->rank() * ws.chunk_rows, ws.chunk_rows);
}

// ParamWrapper.forward -> _activate_lora: while the module runs, the parameter
// is the registered weight plus the active adapters' deltas (a parametrization,
// so gradients reach A and B); the MoE module then computes
// y[b, o] = sum_e sum_i x[b, i] * W[e, i, o]. Merged or disabled: the weight
// alone (a disabled layer unmerges first), as lora/layer.py::Linear.forward.
at::Tensor RealRank::experts_forward(int layer, const at::Tensor& h) {
  const LayerSpec& ls = layout_->layers[layer];
  if (layer_disabled_[layer] && !merged_[layer].empty()) layer_unmerge(layer);
  at::Tensor w = registered(ls.weight);
  if (!layer_disabled_[layer] && merged_[layer].empty()) {
    for (size_t a = 0; a < layout_->adapters.size(); ++a) {
      if (!((layer_active_[layer] >> a) & 1) || ls.lora_a[a] < 0 || !registry_[ls.lora_a[a]].defined()) continue;
      try {
        w = w + experts_einsum(registered(ls.lora_a[a]), registered(ls.lora_b[a]), ls.experts) *
                    lora_scaling(*layout_, static_cast<int>(a));
      } catch (const c10::Error& e) {
        throw OpError(Status::ShapeError, first_line(e.what()));
      }
    }
  }
  return at::matmul(h, w.sum(0));
}

}  // namespace fsdpsim::real
