// FSDP2's state over every group of one rank (torch/distributed/fsdp/_fully_shard/
// _fsdp_state.py::FSDPState and the root's context): the root's lazy init, the final backward
// callback, the state-dict hook and FSDPModule.reshard()/unshard() on every module; it owns the
// groups (FsdpParamGroup, whose own transitions are fsdp_param_group.cpp's) and the
// post-forward order, which live in the rank's FsdpRootState. Built on the fly over that part of
// the state, the rank's parameters, the op's collectives and the provenance (fsdp_state.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "model/machine/collective_log.hpp"
#include "model/machine/fsdp_param_group.hpp"
#include "model/machine/rank_state.hpp"

namespace fsdpsim {

class FsdpState {
 public:
  // state: FSDP's part of the rank's state; params: the rank's parameters (the groups' are
  // topo.groups[g].params); log: the op's collectives; scope: where transitions are noted.
  FsdpState(const Topology& topo, int rank, FsdpRootState& state, std::vector<FsdpParam>& params, CollectiveLog& log,
            const ScopeSite& scope)
      : topo_(topo), rank_(rank), st_(state), params_(params), log_(log), scope_(scope) {}

  GroupContext context(int g) const;  // what group g's transitions reach on this rank
  FsdpParamGroup& group(int g) const { return st_.groups[g]; }
  const std::vector<FsdpParamGroup>& groups() const { return st_.groups; }
  // The module registers param's unsharded copy U now (its group is unsharded), else its shard S.
  bool is_registered_u(int param) const { return u_registered(topo_, params_, st_.groups, param); }
  // _fsdp_state.py::FSDPState._lazy_init: once, at the root's first pre-forward.
  [[nodiscard]] Raise lazy_init() const;
  [[nodiscard]] Raise validate_no_meta_params(int g) const;
  // _fsdp_state.py::FSDPState._root_post_backward_final_callback; `done`: the groups whose
  // post_backward already ran in this backward; grads: the op's (OpResult::grads).
  [[nodiscard]] Raise post_backward_final_callback(const std::vector<uint8_t>& done, AdapterSet& grads) const;
  // The state-dict pre-hook on every group (_fsdp_param_group.py::FSDPParamGroup._register_state_dict_hooks).
  void reshard_all() const;
  // FSDPModule.reshard() on every FSDP module.
  void module_reshard_all() const;
  // _fully_shard.py::FSDPModule.unshard on group g: its lazy_init (the dtype check) every call, then unshard.
  [[nodiscard]] Raise module_unshard(int g) const;

 private:
  const Topology& topo_;
  int rank_;
  FsdpRootState& st_;
  std::vector<FsdpParam>& params_;
  CollectiveLog& log_;
  ScopeSite scope_;
};

}  // namespace fsdpsim
