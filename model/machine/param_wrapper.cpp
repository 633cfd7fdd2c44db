// A ParamWrapper target (peft lora/layer.py::ParamWrapper, an nn.Parameter of E experts):
// its get_delta_weight's einsum, where it reads A and B from, which collectives that costs and
// how a sharded read fails; and its forward's parametrization.
#include "model/machine/param_wrapper.hpp"

#include <fmt/format.h>

namespace fsdpsim {

// How DTensor runs ParamWrapper.get_delta_weight's einsum "o r e, e r i -> e i o" on a Shard(0)
// B (out, r, E) and A (E, r, in). torch.einsum lowers it to a bmm over the experts (r > 1) or a
// broadcasting mul (r == 1); DTensor takes the cheapest strategy of each (torch 2.13
// _ops/_matrix_ops.py and _ops/_pointwise_ops.py; _collective_utils.py::redistribute_cost charges
// Shard -> Shard 1.0 more than an all-gather; _ops/utils.py::is_tensor_shardable drops a bmm
// strategy that shards fewer rows than ranks). Measured on torch 2.13, E 2..6, r 1..4, out 1..6,
// worlds 2 and 3:
// - kShardOut: B keeps its rows, A is gathered, the delta is sharded on out (r == 1 and out > 1,
//   or out >= world);
// - kShardExperts: both shard on the experts (E >= world): B's Shard(out) -> Shard(experts) is
//   one all-gather of B's shard padded on E (gloo has no all-to-all: shard_dim_alltoall), A stays, and the
//   delta is W's own Shard(0);
// - kReplicate: B, then A, gathered;
// - kViewRaises: r > 1 with one out row: the bmm's view of B's sharded singleton raises.
ExpertsEinsum experts_einsum(const Topology& topo, int layer, int adapter) {
  const LayerInfo& li = topo.layers[layer];
  const int64_t w = topo.world, out = topo.params[li.B[adapter]].dim0, r = topo.adapters[adapter].r;
  if (r > 1 && out == 1) return ExpertsEinsum::kViewRaises;
  if ((r == 1 && out > 1) || out >= w) return ExpertsEinsum::kShardOut;
  return li.experts >= w ? ExpertsEinsum::kShardExperts : ExpertsEinsum::kReplicate;
}

// lora/layer.py::ParamWrapper.get_delta_weight (E experts) reads lora_A[a].weight and
// lora_B[a].weight without calling the modules (LoraLayer::get_delta_weight says how a sharded
// read gathers); `read`: where it reads A and B from.
Raise ParamWrapper::get_delta_weight(LoraLayer& lp, const LayerPort& c, int adapter, int sign, const DeltaRead& read) {
  const Topology& topo = c.own.topo;
  DTensor dt = c.dtensor;
  const int layer = c.own.layer;
  const LayerInfo& li = topo.layers[layer];
  const int a = li.A[adapter], b = li.B[adapter];
  const bool sharded_read = read.sharded_read, late_distributed = read.late_distributed, gather_fix = read.gather_fix;
  const CollRecord::Into into = read.into;
  if (li.experts == 1) {
    // peft 0.21.2 lora/layer.py::ParamWrapper.get_delta_weight -> Linear.get_delta_weight for
    // num_experts == 1: B @ A, shape (out, in), for a weight stored (1, in, out) (is_transposed).
    if (sharded_read && topo.world > 1) {
      const int64_t w = topo.world, r = topo.adapters[adapter].r;
      if (gather_fix) {
        // delta_weight_gather=on (the #3102 fix) reads the full A and B.
        dt.all_gather(a, CollRecord::kNowhere, layer, adapter);
        dt.all_gather(b, CollRecord::kNowhere, layer, adapter);
      } else if (topo.params[b].dim0 < w && r >= w) {
        // B @ A with fewer out rows than ranks, as for a Linear above: B moves to Shard(1).
        const int64_t rows = (topo.params[b].dim0 + w - 1) / w;
        dt.all_gather(b, CollRecord::kNowhere, layer, adapter, 0, rows * ((r + w - 1) / w) * w);
      } else if (topo.params[b].dim0 < w) {
        dt.all_gather(b, CollRecord::kNowhere, layer, adapter);
        dt.all_gather(a, CollRecord::kNowhere, layer, adapter);
      } else {
        dt.all_gather(a, CollRecord::kNowhere, layer, adapter);
      }
    }
    const bool dtensor_add = sharded_read || late_distributed;  // the delta W meets is a DTensor
    // single_expert_delta=param_layout (docs/findings/param-wrapper-single-expert.patch): the same
    // B @ A, transposed and unsqueezed to the weight's (1, in, out): the layer's delta, added as is.
    const bool param_layout = topo.profile.get(Switch::SingleExpertDelta) == sw::kParamLayout;
    const std::string err = param_layout ? "" : one_expert_add_error(c, adapter, dtensor_add);
    if (sign == 0 || err.empty()) {
      // the delta_weight op returns the (out, in) delta: not the layer's delta
      if (sign == 0) {
        if (read.corrupt_deltas && !param_layout) read.corrupt_deltas->insert(adapter);
        return {};
      }
      // single_expert_delta=param_layout: the (1, in, out) delta is Shard(2) (B's rows transposed)
      // and W's one row keeps no Shard(0): the in-place add raises after the delta's gathers
      // (measured upstream, world 2: corpus/regressions/single_expert_delta_square_merge_world2.seq).
      if (param_layout && sharded_read && topo.world > 1 && !gather_fix)
        return c.raise(Status::Exception, DTensor::inplace_placement_error(sign));
      // `param.data += delta` broadcasts (out, in) onto (1, in, out): DTensor first makes the
      // delta, Shard(0) over its out rows, Replicate (torch 2.13 _redistribute.py): one all-gather
      // of this rank's padded rows, named after the weight it is added to.
      // single_expert_delta=param_layout with delta_weight_gather=on: the delta is already laid out like
      // W and distributed with W's placements (each rank slices its rows), so the add redistributes
      // nothing (fsdpsim_upstream session.py::Session.delta_on_full, distribute_tensor with src_data_rank=None).
      const int64_t w = topo.world, out = topo.params[b].dim0;
      if (dtensor_add && w > 1 && !param_layout && (out >= w || gather_fix))
        dt.all_gather(li.weight, CollRecord::kNowhere, layer, adapter, 0, (out + w - 1) / w * topo.params[a].rest);
      // a square layer adds the transposed delta: a delta of its own, which unmerge takes back
      DeltaId v = lp.delta_version(c, adapter);
      if (v != kZeroDelta && !param_layout) v ^= kTransposedDelta;
      lp.registered_weight(c).add(adapter, v, sign);
      return {};
    }
    return c.raise(Status::ShapeError, err);
  }
  if (!sharded_read || topo.world == 1) {
    if (sign != 0) lp.registered_weight(c).add(adapter, lp.delta_version(c, adapter), sign);
    return {};
  }
  // ParamWrapper.get_delta_weight's einsum has no fp32 cast (Linear.get_delta_weight's CPU cast is
  // not on this path): each DTensor gather sends its tensor's own dtype, the delta's is A's and B's
  // promoted (peft 0.21.2 lora/layer.py::ParamWrapper.get_delta_weight).
  const auto own = [&](int p) { return c.own.params[p].dtype; };
  const DType delta_dtype = own(a) == DType::BF16 && own(b) == DType::BF16 ? DType::BF16 : DType::F32;
  if (topo.profile.get(Switch::DeltaWeightGather) == sw::kOn) {
    // A, then B, gathered whole: the delta settles once B's gather pairs, from the A slots this
    // rank's experts read and every B slot, whatever tensor each peer posted (Simulator::
    // apply_gathered_deltas).
    dt.all_gather(a, CollRecord::kNowhere, layer, adapter, 0, -1, own(a));
    dt.all_gather(b, into, layer, adapter, sign, -1, own(b));
    return {};
  }
  // torch 2.13 distributed/tensor/_ops/_view_ops.py::_ViewShardingPropagator._analyze_split (strict
  // view): A.reshape(E, -1, in) of a Shard(0) A raises when E does not divide over the mesh.
  const int64_t E = li.experts, r = topo.adapters[adapter].r;
  if (E % topo.world != 0 && r > 1)
    return c.raise(Status::Exception, fmt::format("RuntimeError: Cannot unflatten unevenly sharded tensor: output dimension 0 (size "
                                                "{}) is not evenly divisible by mesh dimension 0 (size {}). Please redistribute "
                                                "the tensor before this operation.",
                                                E, topo.world));
  const int64_t out = topo.params[b].dim0, w = topo.world;
  const ExpertsEinsum plan = experts_einsum(topo, layer, adapter);  // see experts_einsum
  if (plan == ExpertsEinsum::kViewRaises)
    return c.raise(Status::ShapeError, "This operation would remove or reshape sharded dimension 3, which requires "
                              "redistribution. Please redistribute the input first.");
  const bool shard_out = plan == ExpertsEinsum::kShardOut, shard_experts = plan == ExpertsEinsum::kShardExperts;
  // `param.data += delta` must keep W's Shard(0), which W's E < world rows cannot hold: it raises.
  const bool add_raises = sign != 0 && E < w;
  const CollRecord::Into feed = add_raises ? CollRecord::kNowhere : into;
  if (shard_out) {
    dt.all_gather(a, feed, layer, adapter, sign, -1, own(a));
  } else if (shard_experts) {
    // the redistribution pads B's shard on the experts to a multiple of the world (torch 2.13
    // placement_types.py::Shard._to_new_shard_dim): (ceil(out / w), r, ceil(E / w) * w)
    dt.all_gather(b, feed, layer, adapter, sign, (out + w - 1) / w * r * ((E + w - 1) / w * w), own(b));
  } else {
    dt.all_gather(b, CollRecord::kNowhere, layer, adapter, 0, -1, own(b));
    dt.all_gather(a, CollRecord::kNowhere, layer, adapter, 0, -1, own(a));
  }
  if (add_raises) return c.raise(Status::Exception, DTensor::inplace_placement_error(sign));  // after its all-gathers
  // torch 2.13 distributed/tensor/_redistribute.py: `param.data += delta` redistributes a delta
  // sharded on out to W's Shard(0): one all-gather of this rank's (E, in, ceil(out / world))
  // columns, padded on dim 0 to a multiple of the world so the result splits into W's chunks.
  if (sign != 0 && shard_out)
    dt.all_gather(li.weight, CollRecord::kNowhere, layer, adapter, 0,
                  (E + w - 1) / w * w * (topo.params[li.weight].rest / out) * ((out + w - 1) / w), delta_dtype);
  return {};
}

// W (1, in, out) + delta (out, in): torch's broadcasting check, last dimension
// first (aten ExpandUtils.cpp::infer_size_impl), or, for `param.data += delta`
// on FSDP2's DTensor shard (any world size), torch 2.13
// distributed/tensor/_ops/utils.py::infer_broadcast_dims_map's text; "" when
// the shapes broadcast.
// peft lora/layer.py::ParamWrapper.forward -> _activate_lora on a ParamWrapper created after
// fully_shard around the experts module: it runs before that module's pre-forward, so the
// parametrization (torch nn/utils/parametrize.py::register_parametrization, checked once on
// registration) combines plain LoRA factors with the registered weight, the DTensor shard while
// the group is SHARDED. One adapter on E > 1 experts in fp32 folds into torch.baddbmm
// (_LoraFactorsProxy); otherwise W + delta (_LoraParameterProxy). DTensor refuses the mix.
Raise ParamWrapper::forward(const LoraLayer& lp, const LayerPort& c) {
  const LayerInfo& li = c.own.info();
  if (!c.own.prepared || !li.wrapper_after_fsdp || c.own.is_registered_u(li.weight) || !lp.adds_output(c)) return {};
  const bool fold = lp.active_count(c) == 1 && li.experts > 1 && c.own.params[li.weight].dtype != DType::BF16;
  return c.raise(Status::Exception, DTensor::mixed_tensor_error(fold ? "baddbmm.default" : "add.Tensor"));
}

std::string ParamWrapper::one_expert_add_error(const LayerPort& c, int adapter, bool dtensor) {
  const Topology& topo = c.own.topo;
  const LayerInfo& li = c.own.info();
  const int in = topo.params[li.A[adapter]].rest, out = topo.params[li.B[adapter]].dim0;
  if (out == in || out == 1 || in == 1) return "";
  if (dtensor)
    return fmt::format("Attempting to broadcast a dimension of length {0} at -1! Mismatching argument at index 1 had "
                       "torch.Size([{1}, {0}]); but expected shape should be broadcastable to [1, {0}, {1}]",
                       in, out);
  return fmt::format("The size of tensor a ({}) must match the size of tensor b ({}) at non-singleton dimension 2", out, in);
}

}  // namespace fsdpsim
