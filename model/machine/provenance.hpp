// Provenance: which transition last wrote each piece of state a spec reads, or
// dropped a write to it. Root-cause attribution (sim/findings/root_cause.cpp) turns a
// finding into the transitions that put the offending state there, so a class
// is named by its mechanism, not by the ops before it.
//
// A RankModel records provenance only when one is attached (set_provenance):
// triage attaches one to the minimal sequence's run; the hunt, the fuzzer and
// the explorer run without, at the cost of one null test per transition.
// Every transition id names the upstream function it mirrors (tr_info).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "model/machine/fsdp_param.hpp"
#include "model/machine/lora_layer.hpp"
#include "model/machine/op_raised.hpp"
#include "model/machine/scope_site.hpp"

namespace fsdpsim {

// One mirrored upstream call. The op-level ones are the public calls a user
// makes; the inner ones are the mechanisms those calls run.
enum class Tr : uint8_t {
  None,
  // op level (a user's call)
  Prepare, Forward, Eval, Backward, OptimizerStep, ZeroGrad, Merge, Unmerge, SetAdapter, BaseSetAdapter,
  DisableEnter, DisableExit, AddAdapter, LoadAdapter, DeleteAdapter, Reshard, Unshard, StateDict,
  SaveOptimizer, LoadOptimizer, SaveAdapters, LoadAdapters, DeltaWeight, GradientSync, NewOptimizer, SaveModel,
  LoadModel, Generate, MergeAndUnload,
  // inner mechanisms
  InjectAdapter,            // BaseTuner.inject_adapter: set_adapter with the new config's inference_mode
  DeleteFallback,           // BaseTunerLayer.delete_adapter: a layer falls back to its own first adapter
  DisabledForwardUnmerge,   // lora Linear.forward: disabled and merged -> unmerge first
  EnableAdapters,           // BaseTunerLayer.enable_adapters(True): set_adapter(active), inference_mode ignored
  ToUnsharded,              // FSDPParam.to_unsharded: U registered, flags copied S -> U
  ToSharded,                // FSDPParam.to_sharded: S registered again, U's edits dropped
  PostBackwardReduce,       // FSDPParamGroup.post_backward: reduce-scatter U's grads into S
  PostBackwardUnsynced,     // the same without gradient sync: U keeps its grad
  LazyInitDtypes,           // FSDPParamGroup._init_mp_dtypes
  CheckpointRecompute,      // torch.utils.checkpoint's recompute metadata check
  GetDeltaWeight,           // lora Linear / ParamWrapper.get_delta_weight
  ReduceDtypeUnset,         // foreach_reduce on a group whose _init_mp_dtypes saw nothing trainable
  DoraDataAssign,           // DoRA's merge / unmerge: `weight.data = new` on the DTensor shard, a no-op there
  kCount
};

struct TrInfo {
  const char* slug;     // stable, used in root-cause ids: "set_adapter"
  const char* mirrors;  // upstream file::function
};
const TrInfo& tr_info(Tr t);
// A mechanism a root cause is named after whatever call ran it (a delete's fallback,
// a disabled forward's unmerge), as opposed to plumbing every call runs (get_delta_weight).
bool is_mechanism(Tr t);

// One write: by which transition, at which step (1-based op index), in which order.
struct Stamp {
  Tr op = Tr::None;  // the user's call it ran in
  Tr by = Tr::None;  // the innermost transition that wrote it
  Tr mech = Tr::None;  // the innermost mechanism of note (is_mechanism) it ran in
  int step = 0;
  uint32_t seq = 0;  // global write order on this rank (0: never written)
};

// A write to the unsharded copy that a reshard discarded.
struct Drop {
  Tr writer_op = Tr::None;  // the user's call that wrote U
  Tr writer = Tr::None;     // the innermost mechanism (else transition) that wrote U
  Tr dropper = Tr::None;  // the op whose reshard dropped it
  int step = 0;
  uint32_t seq = 0;
};

struct ParamTags {
  Stamp rg_s, rg_u, w_s, w_u, ver_s, present, grad_s, grad_u;
  Stamp meta;  // device or dtype of S (placement)
  Stamp w_lost;  // a weight edit assigned to S's `.data` that left the shard as it was (DoraDataAssign)
  Drop rg_drop, w_drop;
};

class Provenance {
 public:
  void reset(size_t params, size_t layers, size_t groups);
  // The op about to run (its step, its op-level transition).
  void start_op(int step) { step_ = step; }
  int step() const { return step_; }
  uint32_t next_seq() { return ++seq_; }
  uint32_t seq() const { return seq_; }
  // A write by the transitions running now (outermost and innermost).
  Stamp stamp() {
    Stamp s{stack.empty() ? Tr::None : stack.front(), stack.empty() ? Tr::None : stack.back(), Tr::None, step_, ++seq_};
    for (auto it = stack.rbegin(); it != stack.rend() && s.mech == Tr::None; ++it)
      if (is_mechanism(*it)) s.mech = *it;
    return s;
  }

  std::vector<ParamTags> params;
  std::vector<Stamp> layer_merged;  // per layer: who last changed its merged list
  std::vector<Stamp> layer_active;  // per layer: who last changed the adapters it runs
  // The innermost transition running when the last raise happened, and the op around it.
  struct Raised {
    Tr op = Tr::None, site = Tr::None;
    int step = 0;
  } raised;
  std::vector<int> raised_steps;  // every step whose op raised, in order
  // The pending graph's forward: its step, and whether a layer was merged then (its LoRA path skipped).
  int graph_step = 0;
  bool graph_merged = false;
  // A raise mid-backward at this step (0: never), before the root's final callback finished: a
  // CheckpointError in a recompute, or FSDP's reduce refusing the gradients' dtypes. FSDP stays
  // in PRE_BACKWARD. `wedged_site` says which.
  int wedged_step = 0;
  Tr wedged_site = Tr::None;
  // Per group: what registered its unsharded copy last (the op that left it unsharded).
  std::vector<Stamp> group_unsharded;
  // Shard merges issued and applied once their all-gather pairs: (layer, the merge's stamp).
  std::vector<std::pair<int, Stamp>> deferred;
  // The transitions running now, outermost first.
  std::vector<Tr> stack;
  // A raise happens now: the innermost transition is its site (wedging a backward where it is
  // a recompute or a reduce).
  void note_raise();
  // FSDPParam.to_sharded of `group_params` while unsharded: U's edits that differ from S are lost.
  void note_drops(const std::vector<FsdpParam>& params, const std::vector<int>& group_params);

 private:
  int step_ = 0;
  uint32_t seq_ = 0;
};

// What a scope compares at its exit: the per-param pieces a spec reads.
struct PieceSnapshot {
  std::vector<FsdpParam> params;
  std::vector<int> merged_counts;  // per layer: n_merged, and the list as a bit mask << 8
  std::vector<uint32_t> active;    // per layer: its active adapters' bits
};

// A scope names the transition running; at its exit every piece it changed that no inner scope
// stamped is stamped with it. Without a Provenance it costs one null test.
class TrScope {
 public:
  TrScope(const ScopeSite& site, Tr t) : site_(site) {
    if (site_.prov) enter(t);
  }
  ~TrScope() {
    if (site_.prov) leave();
  }
  TrScope(const TrScope&) = delete;
  TrScope& operator=(const TrScope&) = delete;

 private:
  void enter(Tr t);
  void leave();
  ScopeSite site_;
  PieceSnapshot snap_;
  uint32_t seq_ = 0;
};

}  // namespace fsdpsim
