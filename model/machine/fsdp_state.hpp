// FSDP2's state over every group of one rank (torch/distributed/fsdp/_fully_shard/
// _fsdp_state.py::FSDPState and the root's context): the root's lazy init, the final backward
// callback, the state-dict hook and FSDPModule.reshard()/unshard() on every module; it owns the
// groups (FsdpParamGroup, whose own transitions are fsdp_param_group.cpp's) and the
// post-forward order, which live in the rank's state. Built on the fly over that state, the
// op's collectives and gradients (OpResult::grads) and the provenance (fsdp_state.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "model/machine/collective_log.hpp"
#include "model/machine/fsdp_param_group.hpp"
#include "model/machine/rank_state.hpp"

namespace fsdpsim {

class FsdpState {
 public:
  FsdpState(const Topology& topo, int rank, RankState& st, CollectiveLog& log, AdapterSet& grads, Provenance* prov)
      : topo_(topo), rank_(rank), st_(st), log_(log), grads_(grads), prov_(prov) {}

  GroupContext context(int g) const;  // what group g's transitions reach on this rank
  FsdpParamGroup& group(int g) const { return st_.groups[g]; }
  // _fsdp_state.py::FSDPState._lazy_init: once, at the root's first pre-forward.
  [[nodiscard]] Raise lazy_init() const;
  // _fsdp_state.py::FSDPState._root_post_backward_final_callback; `done`: the groups whose
  // post_backward already ran in this backward.
  [[nodiscard]] Raise post_backward_final_callback(const std::vector<uint8_t>& done) const;
  // The state-dict pre-hook on every group (_fsdp_param_group.py::FSDPParamGroup._register_state_dict_hooks).
  void reshard_all() const;
  // FSDPModule.reshard() on every FSDP module.
  void module_reshard_all() const;
  // _fully_shard.py::FSDPModule.unshard on group g: its lazy_init (the dtype check) every call, then unshard.
  [[nodiscard]] Raise module_unshard(int g) const;

 private:
  const Topology& topo_;
  int rank_;
  RankState& st_;
  CollectiveLog& log_;
  AdapterSet& grads_;
  Provenance* prov_;
};

}  // namespace fsdpsim
