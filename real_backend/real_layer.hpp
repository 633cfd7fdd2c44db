// One layer of the real module as PEFT and activation checkpointing see it:
// the fields of the model's LoraLayer (model/machine/lora_layer.hpp) under the
// same names, so the two can be read side by side.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "model/vocab/adapter_set.hpp"

namespace fsdpsim::real {

// One tensor autograd saved, as torch/utils/checkpoint.py compares them: sizes and dtype.
struct SavedTensor {
  std::vector<int64_t> sizes;
  at::ScalarType dtype;
  bool operator==(const SavedTensor& o) const { return sizes == o.sizes && dtype == o.dtype; }
};

struct RealLayer {
  AdapterSet active = AdapterSet::of(0);  // BaseTunerLayer._active_adapter: the adapters this layer runs
  std::vector<int> merged;                // merged_adapters, LIFO
  bool disabled = false;                  // a LoRA layer's, or a wrapper's, _disable_adapters
  bool tuner = false;                     // a BaseTunerLayer: some adapter targeting it was injected
  // A ModulesToSaveWrapper (peft/utils/other.py) instead: wrapped yet, its _adapters, and the
  // adapter whose copy runs (-1: `_active_adapter = []`).
  bool wrapper = false;
  AdapterSet trains;
  int copy_active = -1;
  // checkpoint_wrapper (real_checkpoint.cpp): what the layer's last forward saved, and the input it keeps.
  std::vector<SavedTensor> ckpt_saved;
  at::Tensor ckpt_input;
};

}  // namespace fsdpsim::real
