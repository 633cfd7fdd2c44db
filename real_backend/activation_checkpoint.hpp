// Activation checkpointing on libtorch (`checkpoint LAYER`, hazard B7;
// torch/utils/checkpoint.py, non-reentrant, checkpoint_wrapper's default): what
// autograd saves for each checkpointed layer's forward, its kept input, and the
// recompute a tensor hook runs when the backward reaches the layer's output.
// Same file and class as model/machine/activation_checkpoint.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "real_backend/fsdp_param.hpp"

namespace fsdpsim::real {

// One tensor autograd saved, as torch/utils/checkpoint.py compares them: sizes and dtype.
struct SavedTensor {
  std::vector<int64_t> sizes;
  at::ScalarType dtype;
  bool operator==(const SavedTensor& o) const { return sizes == o.sizes && dtype == o.dtype; }
};

class CheckpointWrapper {
 public:
  // run_layer: the layer's forward as the module tree runs it (the recompute runs it again).
  using RunLayer = std::function<at::Tensor(int layer, const at::Tensor& in)>;
  CheckpointWrapper(const Layout& layout, Parameters& params) : layout_(&layout), params_(&params) {}
  void reset();
  // at::linear(x, w, b), noting what autograd keeps for it while a checkpointed layer runs
  // (x is in x_dtype).
  at::Tensor linear(const at::Tensor& x, at::ScalarType x_dtype, int w, int b = -1);
  // A new forward: nothing saved yet.
  void begin_forward();
  // Around one checkpointed layer's forward: note what it saves.
  void start_saving(int layer) { saving_ = &layers_[layer].saved; }
  void stop_saving() { saving_ = nullptr; }
  // After the layer's forward: keep what it saved and its input while its output needs grad.
  void forward(int layer, const at::Tensor& in, const at::Tensor& out);
  // After the root's post-forward: the recompute hooks go on the outputs last.
  void register_hooks(RunLayer run_layer);
  // The layer whose recompute raised in this backward (-1: none).
  int raised() const { return raised_; }
  void begin_backward() { raised_ = -1; }

 private:
  void recompute(int layer, const RunLayer& run_layer);
  struct Layer {
    std::vector<SavedTensor> saved;  // what the layer's last forward saved
    at::Tensor input;                // and the input it keeps
  };
  const Layout* layout_;
  Parameters* params_;
  std::vector<Layer> layers_;
  std::vector<SavedTensor>* saving_ = nullptr;  // during a checkpointed layer's forward or recompute
  std::vector<std::pair<int, at::Tensor>> outputs_;  // this forward's checkpointed outputs
  int raised_ = -1;
};

}  // namespace fsdpsim::real
