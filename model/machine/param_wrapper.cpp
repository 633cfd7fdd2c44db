// get_delta_weight for Linear and ParamWrapper targets: where it reads A and B
// from, which collectives that costs, and how a sharded read fails.
#include "model/machine/rank_model.hpp"

#include <fmt/format.h>

namespace fsdpsim {

namespace {

// torch 2.13 distributed/tensor/_ops/utils.py::expand_to_full_mesh_op_strategy: an in-place
// `W.data += delta` (`-=` on unmerge) whose input placement no strategy keeps.
std::string inplace_placement_error(int sign) {
  return fmt::format("RuntimeError: aten.{}.Tensor: in-place operations that require placement changes are not supported. The "
                     "input has placement (Shard(dim=0),), but no valid strategy preserves this placement. Please use the "
                     "out-of-place version of this operation instead.",
                     sign > 0 ? "add_" : "sub_");
}

// torch 2.13 distributed/tensor/_dispatch.py::OpDispatcher.unwrap_to_op_info: a DTensor op
// given a plain tensor too.
std::string mixed_dtensor_error(const std::string& aten_op) {
  return fmt::format("RuntimeError: aten.{} got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor "
                     "before calling distributed operators!",
                     aten_op);
}

}  // namespace

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

// lora/layer.py::Linear.get_delta_weight: B @ A on DTensors redistributes A
// (one all-gather of A); B's local rows meet W's local rows.
// lora/layer.py::ParamWrapper.get_delta_weight (E experts) reads
// lora_A[a].weight and lora_B[a].weight without calling the modules. Under
// FSDP2 (torch 2.13) a sharded group hands it DTensors, not local rows: the
// reshape / einsum redistribute A (one all-gather of A) and the delta is the
// full one; a merge's in-place add into the sharded weight redistributes once
// more (an all-gather the size of W's shard). The FSDP1 local-rows failure of
// #3080 does not happen. E == 1 takes Linear's path: a delta (out, in) for a
// weight stored (1, in, out). With delta_weight_gather on (the fix #3102
// proposed) A and B are gathered first (full_tensor) and the delta is laid out
// like the weight. sign: +1 merge, -1 unmerge, 0 delta only (the delta_weight op).
Raise RankModel::get_delta_weight(int layer, int adapter, int sign) {
  TrScope scope(site(), Tr::GetDeltaWeight);
  DTensor dt = dtensor();
  const LayerInfo& li = topo_->layers[layer];
  const int a = li.A[adapter], b = li.B[adapter];
  const bool sharded_read = group_of(a) >= 0 && !is_registered_u(a);
  const CollRecord::Into into = sign != 0 ? CollRecord::kIntoShard : CollRecord::kNowhere;
  const bool gather_fix = topo_->profile.get(Switch::DeltaWeightGather) == sw::kOn;
  // An adapter added after prepare holds plain A and B while W is still a DTensor shard.
  const bool late_on_shard = st_.prepared && group_of(a) < 0 && group_of(li.weight) >= 0 && !is_registered_u(li.weight);
  // delta_weight_gather=on lays a ParamWrapper's plain delta out like W (each rank slices its own
  // rows, no collective), so only a Linear's late delta still meets W's shard as a plain tensor.
  const bool late_distributed = late_on_shard && li.experts > 0 && gather_fix;
  if (sign != 0 && late_on_shard && !late_distributed) {
    // lora/layer.py Linear / ParamWrapper merge and unmerge: `param.data += delta` (`-=`) with
    // the plain delta of an adapter added after prepare into W's DTensor shard; DTensor checks
    // the mix before any shape.
    return raise(Status::Exception, mixed_dtensor_error(sign > 0 ? "add_.Tensor" : "sub_.Tensor"));
  }
  if (li.experts == 0) {
    if (sharded_read && topo_->world > 1 && topo_->params[li.weight].dim0 < topo_->world) {
      // Fewer rows than ranks: B @ A cannot keep B's Shard(0) (torch 2.13
      // distributed/tensor/_ops/utils.py::is_tensor_shardable). With r >= world B moves to
      // Shard(1) (one all-gather of B padded on dim 1, a Partial delta); else both are gathered.
      const int64_t w = topo_->world, r = topo_->adapters[adapter].r;
      if (r >= w) {
        const int64_t rows = (topo_->params[b].dim0 + w - 1) / w;
        dt.all_gather(b, CollRecord::kNowhere, layer, adapter, 0, rows * ((r + w - 1) / w) * w);
      } else {
        dt.all_gather(b, CollRecord::kNowhere, layer, adapter);
        dt.all_gather(a, CollRecord::kNowhere, layer, adapter);
      }
      if (sign == 0) return {};  // the delta_weight op: the full delta, replicated or partial
      // _ops/utils.py::expand_to_full_mesh_op_strategy: `W.data += delta` (`-=` on unmerge) must keep
      // W's Shard(0), which no delta placement can reach: the in-place op raises.
      return raise(Status::Exception, inplace_placement_error(sign));
    }
    if (sharded_read) {
      dt.all_gather(a, into, layer, adapter, sign);
      return {};
    }
    if (sign != 0) registered_weight(layer).add(adapter, delta_version(layer, adapter), sign);
    return {};
  }
  if (li.experts == 1) {
    // peft 0.21.2 lora/layer.py::ParamWrapper.get_delta_weight -> Linear.get_delta_weight for
    // num_experts == 1: B @ A, shape (out, in), for a weight stored (1, in, out) (is_transposed).
    if (sharded_read && topo_->world > 1) {
      const int64_t w = topo_->world, r = topo_->adapters[adapter].r;
      if (gather_fix) {
        // delta_weight_gather=on (the #3102 fix) reads the full A and B.
        dt.all_gather(a, CollRecord::kNowhere, layer, adapter);
        dt.all_gather(b, CollRecord::kNowhere, layer, adapter);
      } else if (topo_->params[b].dim0 < w && r >= w) {
        // B @ A with fewer out rows than ranks, as for a Linear above: B moves to Shard(1).
        const int64_t rows = (topo_->params[b].dim0 + w - 1) / w;
        dt.all_gather(b, CollRecord::kNowhere, layer, adapter, 0, rows * ((r + w - 1) / w) * w);
      } else if (topo_->params[b].dim0 < w) {
        dt.all_gather(b, CollRecord::kNowhere, layer, adapter);
        dt.all_gather(a, CollRecord::kNowhere, layer, adapter);
      } else {
        dt.all_gather(a, CollRecord::kNowhere, layer, adapter);
      }
    }
    const bool dtensor_add = sharded_read || late_distributed;  // the delta W meets is a DTensor
    const std::string err = one_expert_add_error(layer, adapter, dtensor_add);
    if (sign == 0 || err.empty()) {
      // the delta_weight op returns the (out, in) delta: not the layer's delta
      if (sign == 0) {
        res_.corrupt_deltas.insert(adapter);
        return {};
      }
      // `param.data += delta` broadcasts (out, in) onto (1, in, out): DTensor first makes the
      // delta, Shard(0) over its out rows, Replicate (torch 2.13 _redistribute.py): one all-gather
      // of this rank's padded rows, named after the weight it is added to.
      const int64_t w = topo_->world, out = topo_->params[b].dim0;
      if (dtensor_add && w > 1 && (out >= w || gather_fix))
        dt.all_gather(li.weight, CollRecord::kNowhere, layer, adapter, 0, (out + w - 1) / w * topo_->params[a].rest);
      // a square layer adds the transposed delta: a delta of its own, which unmerge takes back
      DeltaId v = delta_version(layer, adapter);
      if (v != kZeroDelta) v ^= kTransposedDelta;
      registered_weight(layer).add(adapter, v, sign);
      return {};
    }
    return raise(Status::ShapeError, err);
  }
  if (!sharded_read || topo_->world == 1) {
    if (sign != 0) registered_weight(layer).add(adapter, delta_version(layer, adapter), sign);
    return {};
  }
  // ParamWrapper.get_delta_weight's einsum has no fp32 cast (Linear.get_delta_weight's CPU cast is
  // not on this path): each DTensor gather sends its tensor's own dtype, the delta's is A's and B's
  // promoted (peft 0.21.2 lora/layer.py::ParamWrapper.get_delta_weight).
  const auto own = [&](int p) { return st_.params[p].dtype; };
  const DType delta_dtype = own(a) == DType::BF16 && own(b) == DType::BF16 ? DType::BF16 : DType::F32;
  if (topo_->profile.get(Switch::DeltaWeightGather) == sw::kOn) {
    // A, then B, gathered whole: the delta settles once B's gather pairs, from the A slots this
    // rank's experts read and every B slot, whatever tensor each peer posted (Simulator::
    // apply_gathered_deltas).
    dt.all_gather(a, CollRecord::kNowhere, layer, adapter, 0, -1, own(a));
    dt.all_gather(b, into, layer, adapter, sign, -1, own(b));
    return {};
  }
  // torch 2.13 distributed/tensor/_ops/_view_ops.py::_ViewShardingPropagator._analyze_split (strict
  // view): A.reshape(E, -1, in) of a Shard(0) A raises when E does not divide over the mesh.
  const int64_t E = li.experts, r = topo_->adapters[adapter].r;
  if (E % topo_->world != 0 && r > 1)
    return raise(Status::Exception, fmt::format("RuntimeError: Cannot unflatten unevenly sharded tensor: output dimension 0 (size "
                                                "{}) is not evenly divisible by mesh dimension 0 (size {}). Please redistribute "
                                                "the tensor before this operation.",
                                                E, topo_->world));
  const int64_t out = topo_->params[b].dim0, w = topo_->world;
  const ExpertsEinsum plan = experts_einsum(*topo_, layer, adapter);  // see experts_einsum
  if (plan == ExpertsEinsum::kViewRaises)
    return raise(Status::ShapeError, "This operation would remove or reshape sharded dimension 3, which requires "
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
  if (add_raises) return raise(Status::Exception, inplace_placement_error(sign));  // after its all-gathers
  // torch 2.13 distributed/tensor/_redistribute.py: `param.data += delta` redistributes a delta
  // sharded on out to W's Shard(0): one all-gather of this rank's (E, in, ceil(out / world))
  // columns, padded on dim 0 to a multiple of the world so the result splits into W's chunks.
  if (sign != 0 && shard_out)
    dt.all_gather(li.weight, CollRecord::kNowhere, layer, adapter, 0,
               (E + w - 1) / w * w * (topo_->params[li.weight].rest / out) * ((out + w - 1) / w), delta_dtype);
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
Raise RankModel::wrapper_forward(int layer) {
  const LayerInfo& li = topo_->layers[layer];
  if (!st_.prepared || !li.wrapper_after_fsdp || is_registered_u(li.weight) || !lora_adds_output(layer)) return {};
  const bool fold = lora_active_count(layer) == 1 && li.experts > 1 && st_.params[li.weight].dtype != DType::BF16;
  return raise(Status::Exception, mixed_dtensor_error(fold ? "baddbmm.default" : "add.Tensor"));
}

std::string RankModel::one_expert_add_error(int layer, int adapter, bool dtensor) const {
  const LayerInfo& li = topo_->layers[layer];
  const int in = topo_->params[li.A[adapter]].rest, out = topo_->params[li.B[adapter]].dim0;
  if (out == in || out == 1 || in == 1) return "";
  if (dtensor)
    return fmt::format("Attempting to broadcast a dimension of length {0} at -1! Mismatching argument at index 1 had "
                       "torch.Size([{1}, {0}]); but expected shape should be broadcastable to [1, {0}, {1}]",
                       in, out);
  return fmt::format("The size of tensor a ({}) must match the size of tensor b ({}) at non-singleton dimension 2", out, in);
}

}  // namespace fsdpsim
