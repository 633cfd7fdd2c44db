// The DTensor port (torch/distributed/tensor): what a managed parameter read
// outside FSDP's own hooks is while its group is sharded -- a Shard(0) DTensor
// over this rank's chunk -- and the redistributions the LoRA math issues on it
// (full_tensor, redistribute), with DTensor's dispatch refusals. Same file and
// class as model/machine/dtensor.
#pragma once
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "real_backend/fsdp_state.hpp"

namespace fsdpsim::real {

class DTensor {
 public:
  DTensor(const Layout& layout, Parameters& params, FsdpState& fsdp, ProcessGroup& pg)
      : layout_(&layout), params_(&params), fsdp_(&fsdp), pg_(&pg) {}

  // fully_shard ran: a parameter it manages can be a DTensor.
  bool prepared() const { return fsdp_->prepared; }
  // Group g is sharded: its managed parameters are registered as DTensor shards.
  bool group_sharded(int g) const { return !fsdp_->groups[g].unsharded(); }
  // This rank's padded dim-0 chunk of a full row-major value (distribute_tensor's Shard(0)).
  at::Tensor chunk_of(const std::vector<float>& full, const ParamSpec& p) const;
  // DTensor.full_tensor of a managed parameter: one all-gather of its padded shard, padding
  // dropped; wire: the dtype it gathers in.
  at::Tensor full_tensor(int p, DType wire = DType::F32);
  // A redistribution's all-gather of `local` (one collective on the mesh's group, named after
  // `member`), as DTensor issues it (a functional collective, not FSDP's).
  at::Tensor redistribute(const at::Tensor& local, int group, int member, DType wire = DType::F32);
  // A redistribution of a Partial tensor: a reduce-scatter (`flat` a multiple of the world) or an
  // all-reduce, SUM, named after `member` (Comm::dtensor_reduce).
  at::Tensor reduce(CollOp op, const at::Tensor& flat, int group, int member);
  int rank() const;
  // B @ A on DTensors whose W has fewer rows than ranks (Linear.get_delta_weight's matmul).
  at::Tensor matmul_few_rows(int layer, int adapter, DeltaForm* form = nullptr);
  // An adapter added after prepare (plain tensors) meets W's DTensor shard.
  bool late_delta_on_shard(int layer, int adapter) const;
  // _dispatch.py::OpDispatcher.unwrap_to_op_info: a plain delta into a DTensor shard.
  void check_mixed(int layer, int adapter, bool add) const;
  // DTensor's text for a plain tensor meeting a DTensor in `aten_op` ("div.Tensor").
  static std::string mixed_tensor_error(const std::string& aten_op);
  // _ops/utils.py::expand_to_full_mesh_op_strategy: an in-place op that must change placement.
  void check_inplace_placement(int layer, int adapter, bool add) const;

 private:
  const Layout* layout_;
  Parameters* params_;
  FsdpState* fsdp_;
  ProcessGroup* pg_;
};

}  // namespace fsdpsim::real
