// One LoRA layer's PEFT bookkeeping on one rank (peft/tuners/lora/layer.py::
// LoraLayer and tuners_utils.py::BaseTunerLayer): which adapters it runs, which
// are merged into its weight, whether it is disabled; and its transitions, named
// after the upstream methods: merge and unmerge (given the get_delta_weight that
// adds one adapter's delta, which reaches the collectives: RankModel's,
// param_wrapper.cpp), set_adapter, update_layer and enable_adapters (lora_layer.cpp),
// and a ModulesToSaveWrapper's (modules_to_save.cpp), on the parameters a LayerContext
// hands in. Its forward is RankModel's (lora_layer.cpp).
#pragma once
#include <array>
#include <cstdint>

#include <vector>

#include "model/machine/op_raised.hpp"
#include "model/vocab/adapter_set.hpp"

namespace fsdpsim {

struct FsdpParam;
struct FsdpParamGroup;
struct Topology;
class Provenance;
struct LoraLayer;

// What a layer's transitions reach: its index, the parameters (a requires_grad flip lands on
// the object registered now, which the groups' state says), the rank's layers and provenance
// (the scopes), and the adapters' inference_mode.
struct LayerContext {
  const Topology& topo;
  int layer;
  std::vector<FsdpParam>& params;
  const std::vector<FsdpParamGroup>& groups;
  const std::vector<LoraLayer>& layers;
  Provenance* prov;
  AdapterSet inference_mode;
};

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

  // lora/layer.py::Linear.merge (ParamWrapper.merge alike): W.data += delta for
  // each adapter not yet merged; a delta that raises leaves merged_adapters as it was.
  // `held`: the layer holds the adapter's tensors; `delta(adapter, sign)` is get_delta_weight.
  template <class Delta>
  [[nodiscard]] Raise merge(int adapter, bool held, Delta&& delta) {
    if (!held) return {};
    if (is_merged(adapter)) return {};  // "Already following adapters were merged"
    if (Raise r = delta(adapter, +1)) return r;
    push_merged(adapter);
    return {};
  }
  // lora/layer.py::Linear.unmerge: pops every merged adapter, LIFO, then
  // W.data -= delta; the pop happens before the delta, so a raising delta
  // leaves the adapter unlisted but still in W.
  template <class Delta>
  [[nodiscard]] Raise unmerge(Delta&& delta) {
    while (any_merged())
      if (Raise r = delta(pop_merged(), -1)) return r;
    return {};
  }
  void set_adapter(const LayerContext& c, AdapterSet names, bool inference_mode);
  void update_layer(const LayerContext& c, int adapter, bool inference_mode);
  void enable_adapters(const LayerContext& c, bool enabled);
  // Its ModulesToSaveWrapper side (modules_to_save.cpp): one adapter's copy's requires_grad,
  // which copy runs, and its enable_adapters.
  void set_copy_rg(const LayerContext& c, int adapter, bool rg);
  void wrapper_set_adapter(const LayerContext& c, int adapter, bool inference_mode);  // adapter -1: set_adapter([])
  void wrapper_enable_adapters(const LayerContext& c, bool enabled);
};

}  // namespace fsdpsim
