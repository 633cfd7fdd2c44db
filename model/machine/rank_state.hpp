// One rank's abstract state: per parameter its FsdpParam (S, U), per group its
// FsdpParamGroup (in FSDP's root state, FsdpRootState), per layer its LoraLayer, the PEFT model's adapter sets, the
// Optimizer, the pending autograd graph and the unsharded memory. One plain value,
// so the explorer copies and keys a rank by it (state_key.cpp).
#pragma once
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/machine/fsdp_param.hpp"
#include "model/machine/fsdp_param_group.hpp"
#include "model/machine/lora_layer.hpp"
#include "model/machine/optimizer.hpp"
#include "model/machine/topology.hpp"
#include "model/vocab/adapter_order.hpp"
#include "model/vocab/adapter_set.hpp"
#include "model/vocab/observation.hpp"

namespace fsdpsim {

// One tensor autograd saved for backward, as torch/utils/checkpoint.py compares them (its
// _CheckpointFrame metadata: shape, dtype; every tensor here is on the CPU).
struct SavedMeta {
  int64_t d0 = 0, d1 = 0;
  DType dtype = DType::F32;
  bool operator==(const SavedMeta& o) const { return d0 == o.d0 && d1 == o.d1 && dtype == o.dtype; }
  bool operator!=(const SavedMeta& o) const { return !(*this == o); }
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
  // Per layer under `checkpoint`: what its forward saved (empty: its output needs no grad, so
  // backward never recomputes it).
  std::vector<std::vector<SavedMeta>> ckpt_saved;
  std::vector<uint8_t> ckpt_input_rg;  // per layer: its input required grad (checkpoint keeps that flag)
};

// Bytes of unsharded copies alive now, and at the op's peak (with the groups
// unsharded at that moment, bit g = group g).
struct UnshardedMemory {
  int64_t now = 0, peak = 0;
  uint32_t groups = 0, peak_groups = 0;
  void start_op() {  // the op's peak starts at what is alive now
    peak = now;
    peak_groups = groups;
  }
  // Group g's all-gather output (`bytes`) comes or goes.
  void note(int g, int64_t bytes, bool unsharded) {
    if (unsharded) {
      now += bytes;
      groups |= 1u << g;
    } else {
      now -= bytes;
      groups &= ~(1u << g);
    }
    if (now <= peak) return;
    peak = now;
    peak_groups = groups;
  }
};

// PeftModel's bookkeeping (plain Python attributes upstream): its peft_config and the active adapters.
struct PeftConfig {
  AdapterSet present;          // adapters in the model
  AdapterOrder config_order;   // the same, in PeftModel.peft_config's (insertion) order
  // The active adapters as the last set_adapter listed them: each layer's _active_adapter is that
  // list, and a merge walks it in that order (tuners_utils.py::check_adapters_to_merge)
  AdapterOrder active_order;
  AdapterSet active;           // BaseTuner.active_adapter
  int8_t peft_active = 0;      // PeftModel.active_adapter: one adapter's index (a plain attribute of its own)
  AdapterSet inference_mode;   // per adapter config inference_mode
  bool disabled = false;       // inside `with disable_adapter()`
};

// A model state dict save_model kept on this rank (torch distributed/checkpoint/state_dict.py::
// get_model_state_dict's result, each rank its own): per parameter what the saved tensor holds.
// `managed`: a DTensor in a sharded save (a full save holds plain tensors only).
struct ModelStateEntry {
  bool present = false, managed = false, nan_rows = false;
  uint32_t ver = 0, drift = 0;
  WeightContent w;
};
struct ModelStateFile {
  std::vector<ModelStateEntry> full, sharded;  // empty: no save_model of that form yet
};

// The adapter checkpoint save_adapters wrote, as this rank knows it (PeftModel's), and the
// model state dicts save_model kept.
struct AdapterFile {
  AdapterSet saved_adapters;        // adapters written by the last save_adapters
  AdapterOrder saved_order;         // the same, in the file's order (the order load_adapters walks)
  int saves = 0;                    // save_adapters that ended ok: names rank 0's file a load reads
  std::vector<uint32_t> saved_ver;  // per param: the values saved
  std::vector<uint32_t> saved_drift;  // per param: this rank's FsdpParam::drift at the save
  std::vector<int64_t> saved_rows;  // per param: rows rank 0's checkpoint holds (-1: not saved)
  std::vector<int64_t> saved_own_rows;  // per param: rows this rank's own object held at the save
  std::vector<uint8_t> saved_nan;  // per param: this rank's rows held a part-filled load's NaN tail at the save
  ModelStateFile model_sd;         // save_model's
};

// FSDP2's state on the root (_fsdp_state.py::FSDPState with its FSDPStateContext and
// FSDPCommContext): the groups, whether fully_shard ran, the root's lazy init, the final callback's
// flag, the post-forward order and the memory the groups' all-gather outputs hold. FsdpState's
// port takes just this part of the rank's state.
struct FsdpRootState {
  std::vector<FsdpParamGroup> groups;
  bool prepared = true;        // fully_shard has run (false until an explicit prepare op)
  // FSDPState._is_root set: the root's lazy init has run (or raised). Not in the state key: with a
  // root group it is that group's lazy_inited.
  bool root_lazy_inited = false;
  // _fsdp_state.py::FSDPStateContext.post_backward_final_callback_queued: set by the first
  // pre_backward of a backward, cleared by the final callback; a backward that raised before
  // the callback (a checkpointed layer's recompute) leaves it set, and no later backward queues one.
  bool final_callback_queued = false;
  UnshardedMemory memory;
  // _fsdp_param_group.py::FSDPCommContext.post_forward_order: the groups in
  // post_forward order (eval forwards included) since the last backward.
  std::vector<int> post_forward_order;
};

// PeftModel's two parts and FSDPState's are bases, so a reader names their fields as the rank's
// (st.present, st.groups) and each class's port takes just its part.
struct RankState : PeftConfig, AdapterFile, FsdpRootState {
  std::vector<FsdpParam> params;
  std::vector<LoraLayer> layers;
  Optimizer optimizer;
  PendingGraph graph;
};

}  // namespace fsdpsim
