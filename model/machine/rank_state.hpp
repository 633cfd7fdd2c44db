// One rank's abstract state: per parameter the shard S and the unsharded copy
// U (flags, gradients, symbolic contents), per group its ShardedState, the PEFT
// adapter bookkeeping and the optimizer's object list.
#pragma once
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/machine/topology.hpp"
#include "model/vocab/observation.hpp"

namespace fsdpsim {

// Which delta a base weight holds for an adapter: A's version in bits 32-62, B's
// in bits 0-31 (RankModel::delta_id), bit 63 for the transposed delta a square
// experts layer adds (param_wrapper.cpp). Kept apart so that rows merged from
// different ranks' B can be read back (RankModel::concatenated_u).
using DeltaId = uint64_t;
constexpr DeltaId kZeroDelta = ~DeltaId{0};  // the delta of an adapter whose B is still zero
constexpr DeltaId kTransposedDelta = DeltaId{1} << 63;
constexpr uint32_t kMixedVersion = 0xfffeu;   // LoRA values gathered from ranks that disagree
constexpr uint32_t kNoRows = 0xffffffffu;     // a rank holding only padding rows of a parameter

// What a base weight holds beyond W0: +coeff * delta(adapter, version) per
// adapter. A value the symbolic form cannot express (a delta subtracted at a
// different version than it was added) makes it corrupt.
struct WeightContent {
  std::array<int8_t, kMaxAdapters> coeff{};
  std::array<DeltaId, kMaxAdapters> ver{};
  bool corrupt = false;
  void add(int adapter, DeltaId version, int sign);
  bool operator==(const WeightContent& o) const { return coeff == o.coeff && ver == o.ver && corrupt == o.corrupt; }
  bool operator!=(const WeightContent& o) const { return !(*this == o); }
};

// One FSDPParam (torch/distributed/fsdp/_fully_shard/_fsdp_param.py::FSDPParam):
// S always exists; U exists from the group's first unshard on.
struct ParamState {
  bool present = true;  // registered in the module tree (false: deferred, or deleted)
  bool recreated = false;  // a new Parameter object since the optimizer was built (add after delete)
  // Re-added after fully_shard over a managed name: the registered object is a new module no group
  // manages (peft tuners/lora/layer.py::LoraLayer.update_layer); the group keeps the deleted one's
  // FSDPParam (the ghost) and all-gathers its shard under this name (torch _fsdp_init.py::_get_managed_states).
  bool detached = false;
  uint32_t ghost_ver = 0;   // the ghost shard's values (frozen at the re-add, or stepped by the optimizer)
  bool ghost_grad = false;  // the ghost shard's grad (the optimizer still holds it)
  bool rg_s = false, rg_u = false;
  bool grad_s = false, grad_u = false;
  uint32_t ver_s = 0, ver_u = 0;  // LoRA values: bumped by optimizer updates and loads
  // This rank's ver_s when U was last all-gathered: U is stale once S moves past it. ver_u
  // itself can differ from ver_s from the start (the gather of ranks' differing shards).
  uint32_t ver_s_at_gather = 0;
  WeightContent w_s, w_u;         // base weights: merged deltas
  Device device = Device::Cpu;    // of S (before prepare: the plain parameter)
  DType dtype = DType::F32;
};

enum class TrainingState : uint8_t { Idle, Forward, PreBackward, PostBackward };

struct GroupState {
  ShardedState sharded = ShardedState::Sharded;
  TrainingState training = TrainingState::Idle;
  bool has_u = false;
  bool lazy_inited = false;
  bool gather_pending = false;  // FSDPParamGroup._all_gather_result: a backward prefetch not yet waited for
  // _fsdp_param_group.py::FSDPParamGroup._post_forward_indices: this group's
  // positions in RankState::post_forward_order, one per post_forward since the last backward.
  std::vector<int> post_forward_indices;
};

struct LayerPeft {
  uint8_t active = 0;                      // adapters this layer runs (mask)
  std::array<int8_t, kMaxAdapters> merged{};  // LIFO
  int n_merged = 0;
  bool disabled = false;
  // A BaseTunerLayer: some adapter targeting it was injected (it stays one after a delete).
  bool tuner = false;
};

// The autograd graph of the last grad-enabled forward (or eval: loss_rg false).
struct PendingGraph {
  bool valid = false;
  bool loss_rg = false;
  std::vector<uint8_t> grad;             // per param: autograd will write a grad to its registered object
  std::vector<uint8_t> group_out_rg;     // per group: its output requires grad (pre-backward hook)
  std::vector<uint8_t> group_in_rg;      // per group: its input requires grad (post-backward node)
  // Pre-backward hooks in registration (post_forward) order: the group and the
  // tensor carrying its hook, in autograd position: 2l + 1 for layer l's output (the
  // root's: the model's output), 2l for the base output of a LoRA layer wrapped around
  // layer l's FSDP module.
  std::vector<std::pair<int, int>> hooks;
};

struct RankState {
  std::vector<ParamState> params;
  std::vector<GroupState> groups;
  std::vector<LayerPeft> layers;
  uint8_t present = 0;         // adapters in the model (mask)
  uint8_t active = 0;          // BaseTuner.active_adapter (mask)
  int8_t peft_active = 0;      // PeftModel.active_adapter: one adapter's index (a plain attribute of its own)
  uint8_t inference_mode = 0;  // per adapter config inference_mode (mask)
  bool disabled = false;       // inside `with disable_adapter()`
  bool prepared = true;        // fully_shard has run (false until an explicit prepare op)
  std::vector<int> optimizer;  // param indices whose S objects the optimizer holds, in pid order
  // Optimizer positions with AdamW state, in creation order (Optimizer.state's insertion
  // order, which Optimizer.state_dict keeps).
  std::vector<int> opt_state;
  bool has_opt_ckpt = false;
  std::vector<int> saved_state;  // param indices whose FQN had optimizer state in the last checkpoint
  uint8_t saved_adapters = 0;       // adapters written by the last save_adapters
  std::vector<uint32_t> saved_ver;  // per param: the values saved
  std::vector<int64_t> saved_rows;  // per param: rows rank 0's checkpoint holds (-1: not saved)
  // Bytes of unsharded copies alive now, and at the op's peak (with the groups
  // unsharded at that moment, bit g = group g).
  int64_t unsharded_now = 0, unsharded_peak = 0;
  uint32_t unsharded_groups = 0, peak_groups = 0;
  PendingGraph graph;
  // _fsdp_param_group.py::FSDPCommContext.post_forward_order: the groups in
  // post_forward order (eval forwards included) since the last backward.
  std::vector<int> post_forward_order;
};

}  // namespace fsdpsim
