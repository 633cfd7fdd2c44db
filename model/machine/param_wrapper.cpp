// get_delta_weight for Linear and ParamWrapper targets: where it reads A and B
// from, which collectives that costs, and how a sharded read fails.
#include "model/machine/rank_model.hpp"

namespace fsdpsim {

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
bool RankModel::get_delta_weight(int layer, int adapter, int sign) {
  const LayerInfo& li = topo_->layers[layer];
  const int a = li.A[adapter], b = li.B[adapter];
  const bool sharded_read = group_of(a) >= 0 && !is_registered_u(a);
  const CollRecord::Into into = sign != 0 ? CollRecord::kIntoShard : CollRecord::kNowhere;
  if (li.experts == 0) {
    if (sharded_read && topo_->world > 1 && topo_->params[li.weight].dim0 < topo_->world) {
      // Fewer rows than ranks: B @ A cannot keep B's Shard(0) (torch 2.13
      // distributed/tensor/_ops/utils.py::is_tensor_shardable). With r >= world B moves to
      // Shard(1) (one all-gather of B padded on dim 1, a Partial delta); else both are gathered.
      const int64_t w = topo_->world, r = topo_->adapters[adapter].r;
      if (r >= w) {
        const int64_t rows = (topo_->params[b].dim0 + w - 1) / w;
        gather_one(b, CollRecord::kNowhere, layer, adapter, 0, rows * ((r + w - 1) / w) * w);
      } else {
        gather_one(b, CollRecord::kNowhere, layer, adapter);
        gather_one(a, CollRecord::kNowhere, layer, adapter);
      }
      if (sign == 0) return true;  // the delta_weight op: the full delta, replicated or partial
      // _ops/utils.py::expand_to_full_mesh_op_strategy: `W.data += delta` (`-=` on unmerge) must keep
      // W's Shard(0), which no delta placement can reach: the in-place op raises.
      error(Status::Exception, std::string("RuntimeError: aten.") + (sign > 0 ? "add_" : "sub_") +
                                   ".Tensor: in-place operations that require placement changes are not supported. "
                                   "The input has placement (Shard(dim=0),), but no valid strategy preserves this "
                                   "placement. Please use the out-of-place version of this operation instead.");
      return false;
    }
    if (sharded_read) {
      gather_one(a, into, layer, adapter, sign);
      return true;
    }
    if (sign != 0 && group_of(li.weight) >= 0 && !is_registered_u(li.weight)) {
      // An adapter FSDP does not manage (added after prepare) gives a plain delta, and W
      // is the DTensor shard: torch 2.13 distributed/tensor/_dispatch.py::OpDispatcher.unwrap_to_op_info.
      error(Status::Exception, std::string("RuntimeError: aten.") + (sign > 0 ? "add_" : "sub_") +
                                   ".Tensor got mixed torch.Tensor and DTensor, need to convert all "
                                   "torch.Tensor to DTensor before calling distributed operators!");
      return false;
    }
    if (sign != 0) registered_weight(layer).add(adapter, delta_version(layer, adapter), sign);
    return true;
  }
  if (li.experts == 1) {
    // peft 0.21.2 lora/layer.py::ParamWrapper.get_delta_weight -> Linear.get_delta_weight for
    // num_experts == 1: B @ A, shape (out, in), for a weight stored (1, in, out) (is_transposed).
    if (sharded_read && topo_->world > 1) {
      const int64_t w = topo_->world, r = topo_->adapters[adapter].r;
      if (topo_->profile.get(Switch::DeltaWeightGather) == sw::kOn) {
        // delta_weight_gather=on (the #3102 fix) reads the full A and B.
        gather_one(a, CollRecord::kNowhere, layer, adapter);
        gather_one(b, CollRecord::kNowhere, layer, adapter);
      } else if (topo_->params[b].dim0 < w && r >= w) {
        // B @ A with fewer out rows than ranks, as for a Linear above: B moves to Shard(1).
        const int64_t rows = (topo_->params[b].dim0 + w - 1) / w;
        gather_one(b, CollRecord::kNowhere, layer, adapter, 0, rows * ((r + w - 1) / w) * w);
      } else if (topo_->params[b].dim0 < w) {
        gather_one(b, CollRecord::kNowhere, layer, adapter);
        gather_one(a, CollRecord::kNowhere, layer, adapter);
      } else {
        gather_one(a, CollRecord::kNowhere, layer, adapter);
      }
    }
    const std::string err = one_expert_add_error(layer, adapter, sharded_read);
    if (sign == 0 || err.empty()) {
      // the delta_weight op returns the (out, in) delta: not the layer's delta
      if (sign == 0) {
        res_.corrupt_deltas |= static_cast<uint8_t>(1u << adapter);
        return true;
      }
      // `param.data += delta` broadcasts (out, in) onto (1, in, out): DTensor first makes the
      // delta, Shard(0) over its out rows, Replicate (torch 2.13 _redistribute.py): one all-gather
      // of this rank's padded rows, named after the weight it is added to.
      const int64_t w = topo_->world, out = topo_->params[b].dim0;
      if (sharded_read && w > 1 && (out >= w || topo_->profile.get(Switch::DeltaWeightGather) == sw::kOn))
        gather_one(li.weight, CollRecord::kNowhere, layer, adapter, 0, (out + w - 1) / w * topo_->params[a].rest);
      // a square layer adds the transposed delta: a delta of its own, which unmerge takes back
      uint32_t v = delta_version(layer, adapter);
      if (v != kZeroDelta) v ^= 0x40000000u;
      registered_weight(layer).add(adapter, v, sign);
      return true;
    }
    error(Status::ShapeError, err);
    return false;
  }
  if (!sharded_read || topo_->world == 1) {
    if (sign != 0) registered_weight(layer).add(adapter, delta_version(layer, adapter), sign);
    return true;
  }
  if (topo_->profile.get(Switch::DeltaWeightGather) == sw::kOn) {
    gather_one(a, into, layer, adapter, sign);
    gather_one(b, CollRecord::kNowhere, layer, adapter);
    return true;
  }
  // torch 2.13 distributed/tensor/_ops/_view_ops.py::_ViewShardingPropagator._analyze_split (strict
  // view): A.reshape(E, -1, in) of a Shard(0) A raises when E does not divide over the mesh.
  const int64_t E = li.experts, r = topo_->adapters[adapter].r;
  if (E % topo_->world != 0 && r > 1) {
    error(Status::Exception, "RuntimeError: Cannot unflatten unevenly sharded tensor: output dimension 0 (size " +
                                 std::to_string(E) + ") is not evenly divisible by mesh dimension 0 (size " +
                                 std::to_string(topo_->world) + "). Please redistribute the tensor before this operation.");
    return false;
  }
  gather_one(a, into, layer, adapter, sign);
  // torch 2.13 distributed/tensor/_redistribute.py: `param.data += delta` redistributes the
  // delta, sharded on its out dimension, to W's Shard(0): one all-gather of this rank's
  // (E, in, ceil(out / world)) columns, padded on dim 0 to a multiple of the world so the
  // result splits into W's chunks: the size of W's shard when E and out divide evenly.
  if (sign != 0) {
    const int64_t out = topo_->params[b].dim0, w = topo_->world;
    gather_one(li.weight, CollRecord::kNowhere, layer, adapter, 0,
               (E + w - 1) / w * w * (topo_->params[li.weight].rest / out) * ((out + w - 1) / w));
  }
  return true;
}

// W (1, in, out) + delta (out, in): torch's broadcasting check, last dimension
// first (aten ExpandUtils.cpp::infer_size_impl), or, for `param.data += delta`
// on FSDP2's DTensor shard (any world size), torch 2.13
// distributed/tensor/_ops/utils.py::infer_broadcast_dims_map's text; "" when
// the shapes broadcast.
std::string RankModel::one_expert_add_error(int layer, int adapter, bool dtensor) const {
  const LayerInfo& li = topo_->layers[layer];
  const std::string in = std::to_string(topo_->params[li.A[adapter]].rest);
  const std::string out = std::to_string(topo_->params[li.B[adapter]].dim0);
  if (out == in || out == "1" || in == "1") return "";
  if (dtensor)
    return "Attempting to broadcast a dimension of length " + in + " at -1! Mismatching argument at index 1 had torch.Size([" +
           out + ", " + in + "]); but expected shape should be broadcastable to [1, " + in + ", " + out + "]";
  return "The size of tensor a (" + out + ") must match the size of tensor b (" + in + ") at non-singleton dimension 2";
}

}  // namespace fsdpsim
