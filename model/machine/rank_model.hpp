// The abstract lifecycle machine for one rank: the op dispatcher. It owns the
// rank's state (RankState: FsdpParam, FsdpParamGroup, LoraLayer, Optimizer, the
// PEFT bookkeeping) and the op's CollectiveLog, and routes each op to the class
// named after the upstream object it mirrors, built on the fly over its narrow
// port (PeftModel, Accelerator, Optimizer, FsdpState, CheckpointWrapper; the
// groups' and layers' own methods on a GroupContext or LayerPort); forward and
// backward over the groups and layers stay here. It reads side by side with real_backend/. A transition that may raise returns a Raise
// (op_raised.hpp), handed up to apply() and into the OpResult.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/machine/collective_log.hpp"
#include "model/machine/dtensor.hpp"
#include "model/machine/fsdp_state.hpp"
#include "model/machine/loading.hpp"
#include "model/machine/peft_model.hpp"
#include "model/machine/observer.hpp"
#include "model/machine/op_raised.hpp"
#include "model/machine/op_result.hpp"
#include "model/machine/provenance.hpp"
#include "model/machine/rank_state.hpp"
#include "model/machine/topology.hpp"
#include "model/vocab/op.hpp"

namespace fsdpsim {

class RankModel {
 public:
  RankModel(const Topology& topo, int rank);
  void reset();  // the state right after prepare (keeping the state's buffers)
  // The same model object for another topology or rank: a simulator built per
  // sequence takes ranks a finished one left (sim/core/simulator.cpp) rather than allocating.
  void rebind(const Topology& topo, int rank) {
    topo_ = &topo;
    rank_ = rank;
    reset();
  }
  // Runs one op; collectives it issued are appended to log(). A shard merge's delta
  // settles once its all-gather pairs (dtensor.hpp): a rank of a world > 1 run alone never settles it.
  const OpResult& apply(const Op& op);
  // The next load_adapters finds no file of rank 0 for this rank's save number: rank 0 stopped
  // (stuck in a collective, or done) before writing it. The simulator says so per op.
  void set_rank0_file_missing(bool missing) { rank0_file_missing_ = missing; }
  // What rank 0's first save wrote (null: nothing yet): the file a load on a rank that never
  // saved reads. The file system is the world's, so the simulator keeps it (per op, as above).
  void set_rank0_first_file(const AdapterFile* file) { rank0_first_file_ = file; }
  const OpResult& result() const { return res_; }  // the last op's
  const RankState& state() const { return st_; }
  const Topology& topology() const { return *topo_; }
  int rank() const { return rank_; }
  const CollectiveLog& log() const { return log_; }  // this op's collectives
  // The DTensor port over this rank's parameters and this op's collectives (dtensor.hpp): the
  // simulator settles matched gathers through it.
  DTensor dtensor() { return DTensor(*topo_, rank_, st_.params, st_.groups, log_, prov_); }
  // What this rank's state shows (observer.hpp): the observation, the weight classes and the
  // queries the transitions and the spec checks share. `peer_judged`: see Observer.
  Observer observer(bool peer_judged = false) const { return Observer(*topo_, rank_, st_, log_, peer_judged); }
  // Records which transition writes each piece a spec reads (provenance.hpp); null: none
  // (the hunt's, the fuzzer's and the explorer's runs). reset() keeps it and restarts it.
  void set_provenance(Provenance* p) { prov_ = p; }
  Provenance* provenance() const { return prov_; }

 private:
  // --- FSDP2 state over every group (fsdp_state.hpp); the groups' own transitions are FsdpParamGroup's ---
  FsdpState fsdp() { return FsdpState(*topo_, rank_, st_, st_.params, log_, site()); }
  // --- LoRA layers (lora_layer.cpp, param_wrapper.cpp hold their transitions) ---
  LayerPort layer_port(int layer);  // what layer's transitions reach on this rank
  // --- PEFT model (peft_model.hpp; it runs the modules_to_save wrappers, modules_to_save.hpp) ---
  PeftModel peft();
  // --- loading and prepare (loading.hpp) ---
  Accelerator accelerator();
  // --- training (rank_model.cpp) ---
  Raise op_forward(bool grad_enabled, bool root_hooks = true);
  // op_forward's body; op_forward restores the graph on a raise. `root_hooks` false: the root
  // unit's pre- and post-forward do not run (generate on a `model` scenario).
  Raise forward_hooks(bool grad_enabled, bool root_hooks = true);
  Raise op_generate(int steps);
  Raise op_backward();
  Raise dispatch(const Op& op);
  static Tr op_transition(const Op& op);
  // --- the optimizer (optimizer.hpp) ---
  OptimizerPort optimizer_port(const FsdpState& fsdp);

  // What upstream raises here: `return raise(...)`; with provenance, the raise site is noted.
  Raise raise(Status s, std::string msg) const {
    if (prov_) note_raise();
    return Raise(s, std::move(msg));
  }
  void note_raise() const { prov_->note_raise(); }
  // Provenance (provenance.hpp): the scope of a transition, on this rank's pieces.
  ScopeSite site() const { return {prov_, &st_.params, &st_.layers}; }
  AdapterSet adapters_named(const std::vector<std::string>& names) const { return AdapterSet::named(topo_->adapters, names); }

  const Topology* topo_;
  int rank_;
  bool rank0_file_missing_ = false;
  const AdapterFile* rank0_first_file_ = nullptr;
  RankState st_;
  OpResult res_;
  CollectiveLog log_;  // this op's collectives
  Provenance* prov_ = nullptr;
};


}  // namespace fsdpsim
