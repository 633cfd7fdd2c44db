// One LoRA layer's PEFT bookkeeping on one rank (peft/tuners/lora/layer.py::
// LoraLayer and tuners_utils.py::BaseTunerLayer): which adapters it runs, which
// are merged into its weight, whether it is disabled. Its merge, unmerge,
// set_adapter and forward reach the parameters and collectives, so they are
// RankModel's (lora_layer.cpp, named after the upstream methods).
#pragma once
#include <array>
#include <cstdint>

#include "model/vocab/adapter_set.hpp"

namespace fsdpsim {

struct LoraLayer {
  AdapterSet active;                          // adapters this layer runs
  std::array<int8_t, kMaxAdapters> merged{};  // LIFO
  int n_merged = 0;
  bool disabled = false;
  // A BaseTunerLayer: some adapter targeting it was injected (it stays one after a delete).
  bool tuner = false;
  // A ModulesToSaveWrapper (peft/utils/other.py) instead, once an adapter listing the layer in
  // modules_to_save was injected: the adapters with a copy here (its modules_to_save
  // ModuleDict), those it trains along with (its _adapters: the same set, except after a
  // delete that raised between the two removals) and the one whose copy runs (-1:
  // `_active_adapter = []`); `disabled` is its _disable_adapters.
  bool wrapper = false;
  AdapterSet copies, trains;
  int8_t copy_active = -1;

  bool is_merged(int adapter) const {
    for (int i = 0; i < n_merged; ++i)
      if (merged[i] == adapter) return true;
    return false;
  }
  bool any_merged() const { return n_merged > 0; }
  void push_merged(int adapter) { merged[n_merged++] = static_cast<int8_t>(adapter); }
  int pop_merged() { return merged[--n_merged]; }
};

}  // namespace fsdpsim
