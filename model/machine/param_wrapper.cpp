// get_delta_weight for Linear and ParamWrapper targets: where it reads A and B
// from, which collectives that costs, and how a sharded read fails.
#include "model/machine/rank_model.hpp"

namespace fsdpsim {

// lora/layer.py::Linear.get_delta_weight: B @ A on DTensors redistributes A
// (one all-gather of A); B's local rows meet W's local rows.
// lora/layer.py::ParamWrapper.get_delta_weight (E experts): reads
// lora_A[a].weight and lora_B[a].weight without calling the modules, so a
// sharded group gives the local rows (#3080); E == 1 takes the Linear path.
// With delta_weight_gather on (the fix #3102 proposed) A and B are gathered
// first. sign: +1 merge, -1 unmerge, 0 delta only (the delta_weight op).
bool RankModel::get_delta_weight(int layer, int adapter, int sign) {
  const LayerInfo& li = topo_->layers[layer];
  const int a = li.A[adapter], b = li.B[adapter];
  const bool sharded_read = topo_->params[a].group >= 0 && !is_registered_u(a);
  const CollRecord::Into into = sign != 0 ? CollRecord::kIntoShard : CollRecord::kNowhere;
  if (li.experts == 0) {
    if (sharded_read) gather_one(a, into, layer, adapter, sign);
    else if (sign != 0) registered_weight(layer).add(adapter, delta_version(layer, adapter), sign);
    return true;
  }
  if (!sharded_read || topo_->world == 1) {
    if (sign != 0) registered_weight(layer).add(adapter, delta_version(layer, adapter), sign);
    return true;
  }
  if (li.experts == 1 || topo_->profile.get(Switch::DeltaWeightGather) == sw::kOn) {
    gather_one(a, into, layer, adapter, sign);
    gather_one(b, CollRecord::kNowhere, layer, adapter);
    return true;
  }
  std::string err = wrapper_read_error(layer, adapter);
  if (err.empty()) {
    // The einsum broadcast a size-1 subscript: a delta of the wrong shape, made
    // of this rank's rows only. The delta_weight op returns it; a merge fails
    // adding it to W's shard.
    if (sign == 0) {
      res_.corrupt_deltas |= static_cast<uint8_t>(1u << adapter);
      return true;
    }
    err = wrapper_add_error(layer, adapter);
  }
  error(Status::ShapeError, err);
  return false;
}

// The first libtorch error the local-rows read raises, in the order PEFT calls
// them: A.reshape(E, -1, in), B.reshape(out_local, -1, E), then
// einsum("o r e, e r i -> e i o") (texts as libtorch 1.13 words them).
std::string RankModel::wrapper_read_error(int layer, int adapter) const {
  const LayerInfo& li = topo_->layers[layer];
  const ParamInfo& pa = topo_->params[li.A[adapter]];
  const ParamInfo& pb = topo_->params[li.B[adapter]];
  const int64_t E = li.experts, in = pa.rest, r = topo_->adapters[adapter].r;
  const int64_t ra = local_rows(pa.dim0, topo_->world, rank_);
  const int64_t rb = local_rows(pb.dim0, topo_->world, rank_);
  const std::string e = std::to_string(E);
  if ((ra * in) % (E * in) != 0)
    return "shape '[" + e + ", -1, " + std::to_string(in) + "]' is invalid for input of size " + std::to_string(ra * in);
  if (rb == 0)
    return "cannot reshape tensor of 0 elements into shape [0, -1, " + e +
           "] because the unspecified dimension size -1 can be any value and is ambiguous";
  const int64_t k = ra / E;
  if (k == 1 || k == r || r == 1) return "";  // einsum broadcasts a size-1 subscript (either operand's)
  return "einsum(): subscript r has size " + std::to_string(k) +
         " for operand 1 which does not broadcast with previously seen size " + std::to_string(r);
}

// W.data += delta with delta (E, in, rows of B) and W's shard (padded experts
// chunk, in, out): libtorch's in-place broadcast check, last dimension first.
std::string RankModel::wrapper_add_error(int layer, int adapter) const {
  const LayerInfo& li = topo_->layers[layer];
  const ParamInfo& pb = topo_->params[li.B[adapter]];
  const int64_t E = li.experts, in = topo_->params[li.A[adapter]].rest, out = pb.dim0;
  const int64_t rb = local_rows(pb.dim0, topo_->world, rank_);
  const int64_t ce = (E + topo_->world - 1) / topo_->world;
  auto n = [](int64_t x) { return std::to_string(x); };
  if (rb != out && rb != 1 && out != 1)
    return "The size of tensor a (" + n(out) + ") must match the size of tensor b (" + n(rb) + ") at non-singleton dimension 2";
  if (ce == 1)
    return "output with shape [1, " + n(in) + ", " + n(out) + "] doesn't match the broadcast shape [" + n(E) + ", " + n(in) +
           ", " + n(out) + "]";
  return "The size of tensor a (" + n(ce) + ") must match the size of tensor b (" + n(E) + ") at non-singleton dimension 0";
}

}  // namespace fsdpsim
