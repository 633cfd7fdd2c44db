// The observer: one rank's abstract state in, the vocabulary's Observation out, as
// real_backend/observer.hpp turns the ranks' reports into Observations. It is a const view of
// the rank (its RankState, the Topology, the rank and the op's CollectiveLog) and changes
// nothing: the simulator, the spec checks' tests and the explorer's state key read the rank
// through it (RankModel::observer), and a test builds one over a RankState it wrote by hand.
// The weight classes are its methods in weight_class.cpp; the explorer's key over every
// rank's view is in state_key.cpp.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "model/machine/collective_log.hpp"
#include "model/machine/dtensor.hpp"
#include "model/machine/op_result.hpp"
#include "model/machine/optimizer.hpp"
#include "model/machine/peft_model.hpp"
#include "model/machine/rank_state.hpp"
#include "model/machine/topology.hpp"
#include "model/vocab/observation.hpp"
#include "model/vocab/op.hpp"

namespace fsdpsim {

// What the stored-weight class depends on, kept per observation so the
// simulator can judge it against the peers' shards afterwards.
struct StoredSnapshot {
  std::vector<uint32_t> ver_s;      // per param
  std::vector<WeightContent> w_s;   // per layer
  std::vector<LoraLayer> layers;    // per layer
  // per param: an adapter tensor's value token (ver_s, drift), held whole (an unmanaged replica)
  // or as this rank's rows of a managed shard (kind), 0 for any other parameter
  std::vector<uint64_t> replica;
  enum ReplicaKind : uint8_t { kNone, kWhole, kAllRows, kSomeRows };  // kNone: a shard with no row, not compared
  std::vector<uint8_t> replica_kind;
};

class Observer {
 public:
  // `peer_judged`: a simulator of two or more ranks judges every layer's stored class against
  // the peers' shards after the run (Simulator::judge_against_peers), and takes the registered
  // one from it where the module holds the shard: the observation leaves both to it and
  // classifies only the unsharded copies it will keep.
  Observer(const Topology& topo, int rank, const RankState& st, const CollectiveLog& log, bool peer_judged = false)
      : topo_(&topo), rank_(rank), st_(&st), log_(&log), peer_judged_(peer_judged) {}

  // --- what the module registers now (shared with the transitions and the spec checks) ---
  // The module holds the unsharded copy U: its group is unsharded (inline: the observation reads it per parameter).
  bool is_registered_u(int param) const { return u_registered(*topo_, st_->params, st_->groups, param); }
  // The module holds this parameter's S object now, the one the optimizer was handed: an
  // adapter added again after a delete brings new Parameter objects the optimizer never saw.
  bool is_registered_s(int param) const { return s_registered(st_->params[param], is_registered_u(param)); }
  bool registered_rg(int param) const { return st_->params[param].registered_rg(is_registered_u(param)); }
  // The FSDP group managing the registered object now (-1: none; a re-added adapter's new module).
  int group_of(int param) const { return managing_group(*topo_, st_->params, param); }
  // A rank of an FSDP-managed parameter past its last row holds padding only (ParamInfo::rows_on).
  bool holds_rows(int param, int rank) const { return group_of(param) < 0 || topo_->params[param].rows_on(rank); }
  bool in_some_layer(int adapter) const;  // some layer holds this adapter's tensors (PEFT's config aside)
  bool any_merged() const;
  // Optimizer objects the module no longer registers (is_registered_s); *first_index: the first one's position.
  int optimizer_missing(int* first_index) const {
    return st_->optimizer.missing(st_->params, [this](int p) { return is_registered_u(p); }, first_index);
  }
  // Rows of param in the adapter state dict rank `rank` computes (peft_model.hpp).
  int64_t saved_rows(int param, int rank) const { return fsdpsim::saved_rows(*topo_, st_->params, param, rank); }

  // --- the observation (observer.cpp) ---
  Observation observe(int step, const Op& op, const OpResult& r) const;
  // The same into an Observation that may hold an earlier one, reusing its buffers.
  // `spec_fields_only`: leaves out what no spec check reads (collectives, memory; RunOptions).
  void observe_into(Observation& o, int step, const Op& op, const OpResult& r, bool spec_fields_only = false) const;
  void observe_layers_into(std::vector<LayerObs>& out) const;
  // The vocabulary's view of a collective this rank issued (name, parts).
  Collective collective_of(const CollRecord& c) const;
  void collective_into(const CollRecord& c, Collective& out) const;

  // --- the weight classes (weight_class.cpp) ---
  WeightClass classify_stored(int layer) const;
  WeightClass classify_registered(int layer) const;
  // Into a snapshot of an earlier run: assign keeps the lists' buffers.
  void stored_snapshot_into(StoredSnapshot& s) const;
  // The stored class of `layer` given this rank's snapshot and its peers' (a
  // peer whose A shard differs makes the full A a mix no rank computed with).
  WeightClass classify_stored(const StoredSnapshot& own, const std::vector<std::pair<int, const StoredSnapshot*>>& peers,
                              int layer) const;

  const Topology& topology() const { return *topo_; }
  const RankState& state() const { return *st_; }
  int rank() const { return rank_; }
  // The shards this rank holds per owner (an adapter, or "base"): whole tensors until prepare.
  void sharded_bytes_into(std::vector<OwnerBytes>& out) const;
  // The unsharded copies alive at the op's peak, per owner.
  void peak_unsharded_into(std::vector<OwnerBytes>& out) const;

 private:
  // The DTensor port for its queries only (delta ids, the experts einsum's plan), which read
  // the parameters and write nothing; no provenance: nothing here is a transition.
  DTensor dtensor() const {
    return DTensor(*topo_, rank_, const_cast<std::vector<FsdpParam>&>(st_->params), st_->groups,
                   const_cast<CollectiveLog&>(*log_), nullptr);
  }

  const Topology* topo_;
  int rank_;
  const RankState* st_;
  const CollectiveLog* log_;
  bool peer_judged_;
};

}  // namespace fsdpsim
