// DTensor's redistributions and dispatch refusals on the real module's shards
// (torch/distributed/tensor: _redistribute.py, _dispatch.py, _ops/utils.py).
#include "real_backend/dtensor.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <string>

#include "real_backend/op_raised.hpp"
#include "real_backend/values.hpp"

namespace fsdpsim::real {

at::Tensor DTensor::chunk_of(const std::vector<float>& full, const ParamSpec& p) const {
  const int64_t rows = p.chunk_rows, start = pg_->rank() * p.chunk_rows;
  at::Tensor out = at::zeros({rows * p.cols});
  const int64_t have = p.local_rows(pg_->rank());
  if (have > 0) out.narrow(0, 0, have * p.cols).copy_(at::from_blob(const_cast<float*>(full.data()) + start * p.cols, {have * p.cols}, at::kFloat));
  return out.view(param_shape(*layout_, p, rows));
}

// The full value of a managed parameter: one all-gather of its padded shard,
// padding dropped (what FSDP.summon_full_params gives, the fix #3102 proposed).
at::Tensor DTensor::full_tensor(int p, DType wire) {
  const ParamSpec& ps = layout_->params[p];
  const at::Tensor& s = (*params_)[p].leaf.s;
  // torch 2.13 distributed/tensor/_redistribute.py::redistribute_local_tensor: a 1-rank mesh's
  // Shard -> Replicate is the local tensor, no all-gather.
  at::Tensor all = layout_->world == 1 ? s.reshape({-1}) : redistribute(s.reshape({-1}), ps.group, p, wire);
  return all.narrow(0, 0, ps.rows * ps.cols).view({ps.rows, ps.cols});
}

at::Tensor DTensor::redistribute(const at::Tensor& local, int group, int member, DType wire) {
  return pg_->comm->all_gather(local, group, pg_->step, {member}, -1, true, wire);
}

at::Tensor DTensor::reduce(CollOp op, const at::Tensor& flat, int group, int member) {
  return pg_->comm->dtensor_reduce(op, flat, group, pg_->step, member);
}

int DTensor::rank() const { return pg_->rank(); }

// B @ A on DTensors whose W has fewer rows than ranks: B cannot stay Shard(0)
// (torch 2.13 distributed/tensor/_ops/utils.py::is_tensor_shardable). With
// r >= world, B moves to Shard(1): one all-gather of B's rows padded on dim 1
// to a multiple of the world, and this rank's Partial product B[:, my r] @ A's
// rows; else B and A are both gathered and the delta is replicated.
at::Tensor DTensor::matmul_few_rows(int layer, int adapter, DeltaForm* form) {
  const LayerSpec& ls = layout_->layers[layer];
  const int pa = ls.lora_a[adapter], pb = ls.lora_b[adapter];
  const ParamSpec& bs = layout_->params[pb];
  const int64_t w = layout_->world, r = layout_->params[pa].rows;
  const float scale = lora_scaling(*layout_, adapter);
  if (r < w) {
    if (form) *form = kDeltaFull;
    at::Tensor b_full = full_tensor(pb);  // B first, then A, as the matmul's redistribution does
    return at::matmul(b_full, full_tensor(pa)) * scale;
  }
  if (form) *form = kDeltaPartial;
  const int64_t cols = (r + w - 1) / w;
  at::Tensor local = at::zeros({bs.chunk_rows, cols * w});
  local.narrow(1, 0, r).copy_((*params_)[pb].leaf.s.reshape({bs.chunk_rows, r}));
  at::Tensor all = redistribute(local.reshape({-1}), bs.group, pb);
  at::Tensor b_full = all.view({w * bs.chunk_rows, cols * w}).narrow(0, 0, bs.rows).narrow(1, 0, r);
  const int64_t first = std::min<int64_t>(pg_->rank() * cols, r), n = std::min<int64_t>(cols, r - first);
  const ParamSpec& as = layout_->params[pa];
  at::Tensor a_rows = (*params_)[pa].leaf.s.reshape({as.chunk_rows, as.cols}).narrow(0, 0, n).to(at::kFloat);
  return at::matmul(b_full.narrow(1, first, n), a_rows) * scale;
}

// A plain delta (an adapter added after prepare) into W's DTensor shard, Linear or ParamWrapper
// (peft lora/layer.py merge / unmerge: `param.data += delta`): torch 2.13
// distributed/tensor/_dispatch.py::OpDispatcher.unwrap_to_op_info refuses the mix before any
// shape check, so before the delta's own errors.
bool DTensor::late_delta_on_shard(int layer, int adapter) const {
  const LayerSpec& ls = layout_->layers[layer];
  const int gw = params_->group_of(ls.weight);
  return fsdp_->prepared && params_->group_of(ls.lora_a[adapter]) < 0 && gw >= 0 && group_sharded(gw);
}

void DTensor::check_mixed(int layer, int adapter, bool add) const {
  const LayerSpec& ls = layout_->layers[layer];
  if (!late_delta_on_shard(layer, adapter)) return;
  // delta_weight_gather=on lays a ParamWrapper's plain delta out like W (param_wrapper.cpp).
  if (ls.experts == 0 || layout_->profile.get(Switch::DeltaWeightGather) != sw::kOn)
    throw OpError(Status::Exception, mixed_tensor_error(add ? "add_.Tensor" : "sub_.Tensor"));
}

// torch 2.13 distributed/tensor/_dispatch.py::OpDispatcher.unwrap_to_op_info's refusal.
std::string DTensor::mixed_tensor_error(const std::string& aten_op) {
  return "RuntimeError: aten." + aten_op + " got mixed torch.Tensor and DTensor, need to convert all torch.Tensor "
         "to DTensor before calling distributed operators!";
}

// torch 2.13 distributed/tensor/_ops/utils.py::expand_to_full_mesh_op_strategy: on a sharded
// Linear (A, B, W DTensors) `W.data += delta` must keep W's Shard(0), which a weight with
// fewer rows than ranks cannot (is_tensor_shardable): the in-place op raises after the delta.
void DTensor::check_inplace_placement(int layer, int adapter, bool add) const {
  const LayerSpec& ls = layout_->layers[layer];
  const int pa = ls.lora_a[adapter];
  const bool dtensors = ls.experts == 0 && params_->group_of(pa) >= 0 && group_sharded(layout_->params[pa].group);
  // An experts weight (E, in, out) sharded on E: the same when E < world (param_wrapper.cpp).
  const bool experts_dtensors = ls.experts > 1 && params_->group_of(pa) >= 0 && group_sharded(layout_->params[pa].group) &&
                                layout_->profile.get(Switch::DeltaWeightGather) != sw::kOn;
  // One expert with single_expert_delta=param_layout: the (1, in, out) delta is Shard(2) (B's rows
  // transposed), W's one row keeps no Shard(0) either (measured upstream, world 2).
  const bool one_expert_dtensors = ls.experts == 1 && params_->group_of(pa) >= 0 && group_sharded(layout_->params[pa].group) &&
                                   layout_->profile.get(Switch::SingleExpertDelta) == sw::kParamLayout &&
                                   layout_->profile.get(Switch::DeltaWeightGather) != sw::kOn;
  if ((!dtensors && !experts_dtensors && !one_expert_dtensors) || layout_->world == 1 || layout_->params[ls.weight].rows >= layout_->world) return;
  throw OpError(Status::Exception, std::string("RuntimeError: aten.") + (add ? "add_" : "sub_") +
                                       ".Tensor: in-place operations that require placement changes are not "
                                       "supported. The input has placement (Shard(dim=0),), but no valid strategy "
                                       "preserves this placement. Please use the out-of-place version of this "
                                       "operation instead.");
}

}  // namespace fsdpsim::real
