// Activation checkpointing on one layer (`checkpoint LAYER`, hazard B7; torch/utils/checkpoint.py,
// non-reentrant, checkpoint_wrapper's default): what autograd saves for the layer's forward, kept
// in the pending graph, and the recompute backward runs when it reaches the layer, compared with
// it (activation_checkpoint.cpp). Built on the fly over the layer's LayerPort (its parameters
// and LoRA layer) and the pending graph. Same file and class as real_backend/activation_checkpoint.
#pragma once
#include <vector>

#include "model/machine/lora_layer.hpp"
#include "model/machine/rank_state.hpp"

namespace fsdpsim {

class CheckpointWrapper {
 public:
  // c: the wrapped layer's port; module: its LoRA layer; graph: the forward's saves.
  CheckpointWrapper(const LayerPort& c, LoraLayer& module, PendingGraph& graph) : c_(c), module_(module), graph_(graph) {}
  // torch/utils/checkpoint.py::_checkpoint_without_reentrant_generator: the layer's forward
  // keeps its input (`input_rg`: it requires grad) and records what autograd saved.
  void forward(bool input_rg);
  // torch/utils/checkpoint.py::_CheckpointFrame.check_recomputed_tensors_match: the recompute at
  // backward time, against what the forward saved.
  [[nodiscard]] Raise recompute();

 private:
  void saves(bool input_rg, std::vector<SavedMeta>* out) const;

  const LayerPort& c_;
  LoraLayer& module_;
  PendingGraph& graph_;
};

}  // namespace fsdpsim
