// The abstract lifecycle machine for one rank: the op dispatcher. It owns the
// rank's state (RankState: FsdpParam, FsdpParamGroup, LoraLayer, Optimizer, the
// PEFT bookkeeping) and the op's CollectiveLog, and routes each op to the class
// named after the upstream object it mirrors, built on the fly over its narrow
// port (PeftModel, Accelerator, Optimizer, FsdpState, CheckpointWrapper; the
// groups' and layers' own methods on a GroupContext or LayerContext); forward and
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
#include "model/machine/op_raised.hpp"
#include "model/machine/provenance.hpp"
#include "model/machine/rank_state.hpp"
#include "model/machine/topology.hpp"
#include "model/vocab/op.hpp"

namespace fsdpsim {

// What the stored-weight class depends on, kept per observation so the
// simulator can judge it against the peers' shards afterwards.
struct StoredSnapshot {
  std::vector<uint32_t> ver_s;      // per param
  std::vector<WeightContent> w_s;   // per layer
  std::vector<LoraLayer> layers;    // per layer
  // per param: a whole unmanaged replica's value token (ver_s, drift), 0 for any other parameter
  std::vector<uint64_t> replica;
};

struct OpResult {
  Status status = Status::Ok;
  std::string message;
  int64_t index = -1;       // key_error: optimizer index
  int opt_missing = 0;      // save/load_optimizer: optimizer params not registered
  bool has_grads = false;   // training op reached the gradient stage
  AdapterSet grads;         // adapters whose shard received a gradient
  AdapterOrder deltas;      // delta_weight: adapters whose delta was computed, in the order computed
  AdapterSet corrupt_deltas;  // ... from one rank's rows (not the full A and B)
  std::vector<int> reload_diff;  // load_adapters: params whose values differ from this rank's at save time
};

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
  // Runs one op; collectives it issued are appended to collectives(). A shard merge's delta
  // settles once its all-gather pairs (dtensor.hpp): a rank of a world > 1 run alone never settles it.
  const OpResult& apply(const Op& op);
  // The next load_adapters finds no file of rank 0 for this rank's save number: rank 0 stopped
  // (stuck in a collective, or done) before writing it. The simulator says so per op.
  void set_rank0_file_missing(bool missing) { rank0_file_missing_ = missing; }
  const OpResult& result() const { return res_; }  // the last op's
  const RankState& state() const { return st_; }
  const Topology& topology() const { return *topo_; }
  int rank() const { return rank_; }
  const CollectiveLog& log() const { return log_; }
  std::vector<CollRecord>& collectives() { return log_.records(); }
  const std::vector<CollRecord>& collectives() const { return log_.records(); }
  const std::vector<uint64_t>& digests() const { return log_.digests(); }
  const std::vector<int>& members() const { return log_.members(); }
  // Per all-gathered parameter: its version on this rank, kNoRows for padding only.
  const std::vector<uint32_t>& gathered_versions() const { return log_.gathered_versions(); }
  // The DTensor port over this rank's parameters and this op's collectives (dtensor.hpp): the
  // simulator settles matched gathers through it. The const one answers queries only.
  DTensor dtensor() { return DTensor(*topo_, rank_, st_.params, st_.groups, log_, prov_); }
  const DTensor dtensor() const { return const_cast<RankModel*>(this)->dtensor(); }  // NOLINT(readability-const-return-type)
  // A simulator of two or more ranks judges every layer's stored class against the peers'
  // shards after the run (Simulator::judge_against_peers), and takes the registered one from
  // it where the module holds the shard: the observation leaves both to it and classifies
  // only the unsharded copies it will keep.
  void set_peer_judged(bool on) { peer_judged_ = on; }
  // Records which transition writes each piece a spec reads (provenance.hpp); null: none
  // (the hunt's, the fuzzer's and the explorer's runs). reset() keeps it and restarts it.
  void set_provenance(Provenance* p) { prov_ = p; }
  Provenance* provenance() const { return prov_; }

  // Queries shared with the spec checks and the observation builder.
  // The module holds the unsharded copy U: its group is unsharded (inline: the observation reads it per parameter).
  bool is_registered_u(int param) const {
    return u_registered(*topo_, st_.params, st_.groups, param);
  }
  bool registered_rg(int param) const;
  WeightClass classify_stored(int layer) const;
  WeightClass classify_registered(int layer) const;
  bool any_merged() const;
  int optimizer_missing(int* first_index) const;
  bool is_registered_s(int param) const;  // the module holds this parameter's S object now
  bool in_some_layer(int adapter) const;  // some layer holds this adapter's tensors (PEFT's config aside)
  Observation observe(int step, const Op& op, const OpResult& r, const CollRecord* colls, size_t n_colls) const;
  // The same into an Observation that may hold an earlier one, reusing its buffers.
  // `spec_fields_only`: leaves out what no spec check reads (collectives, memory; RunOptions).
  void observe_into(Observation& o, int step, const Op& op, const OpResult& r, const CollRecord* colls, size_t n_colls,
                    bool spec_fields_only = false) const;
  std::vector<LayerObs> observe_layers() const;
  void observe_layers_into(std::vector<LayerObs>& out) const;
  StoredSnapshot stored_snapshot() const;
  void stored_snapshot_into(StoredSnapshot& s) const;
  // The stored class of `layer` given this rank's snapshot and its peers' (a
  // peer whose A shard differs makes the full A a mix no rank computed with).
  WeightClass classify_stored(const StoredSnapshot& own, const std::vector<std::pair<int, const StoredSnapshot*>>& peers,
                              int layer) const;
  // A rank of an FSDP-managed parameter past its last row holds padding only (ParamInfo::rows_on).
  bool holds_rows(int param, int rank) const { return group_of(param) < 0 || topo_->params[param].rows_on(rank); }
  // The FSDP group managing the registered object now (-1: none; a re-added adapter's new module).
  int group_of(int param) const { return managing_group(*topo_, st_.params, param); }
  // The vocabulary's view of a collective this rank issued (name, parts).
  Collective collective_of(const CollRecord& c) const;
  void collective_into(const CollRecord& c, Collective& out) const;

 private:
  // --- FSDP2 state over every group (fsdp_state.hpp); the groups' own transitions are FsdpParamGroup's ---
  FsdpState fsdp() { return FsdpState(*topo_, rank_, st_, log_, res_.grads, prov_); }
  // --- LoRA layers (lora_layer.cpp, param_wrapper.cpp hold their transitions) ---
  LayerContext layer_context(int layer);  // what layer's transitions reach on this rank
  // --- PEFT model (peft_model.hpp; it runs the modules_to_save wrappers, modules_to_save.hpp) ---
  PeftModel peft();
  // --- loading and prepare (loading.hpp) ---
  Accelerator accelerator();
  // --- training (rank_model.cpp) ---
  Raise op_forward(bool grad_enabled);
  Raise forward_hooks(bool grad_enabled);  // op_forward's body; op_forward restores the graph on a raise
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
  RankState st_;
  OpResult res_;
  CollectiveLog log_;  // this op's collectives
  bool peer_judged_ = false;
  Provenance* prov_ = nullptr;
};


}  // namespace fsdpsim
