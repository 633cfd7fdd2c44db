// One LoRA layer's PEFT bookkeeping on one rank (peft/tuners/lora/layer.py::
// LoraLayer and tuners_utils.py::BaseTunerLayer): which adapters it runs, which
// are merged into its weight, whether it is disabled; and its transitions, named
// after the upstream methods: set_adapter, update_layer, enable_adapters, forward,
// merge, unmerge and get_delta_weight (lora_layer.cpp; a ParamWrapper target's
// get_delta_weight and forward are param_wrapper.cpp's), on the parameters a LayerContext hands
// in; a ModulesToSaveWrapper's state too, which that class (modules_to_save.hpp) runs. A delta read off
// shards issues its all-gathers through the DTensor port (dtensor.hpp).
#pragma once
#include <array>
#include <cstdint>

#include <vector>

#include "model/machine/dtensor.hpp"
#include "model/machine/op_raised.hpp"
#include "model/vocab/adapter_set.hpp"

namespace fsdpsim {

class Provenance;
struct LoraLayer;

// What a layer's transitions reach: its index, the parameters (a requires_grad flip lands on
// the object registered now, which the groups' state says), the rank's layers and provenance
// (the scopes), the adapters' inference_mode, whether fully_shard ran, the DTensor port its
// delta reads gather through, the autograd graph a forward records into (per parameter: a
// grad will be written) and the op's corrupt deltas (a delta_weight read that is not the
// layer's delta). RankModel::layer_context builds it.
struct LayerContext {
  const Topology& topo;
  int layer;
  std::vector<FsdpParam>& params;
  const std::vector<FsdpParamGroup>& groups;
  const std::vector<LoraLayer>& layers;
  Provenance* prov;
  AdapterSet inference_mode;
  bool prepared;
  DTensor dtensor;
  std::vector<uint8_t>& grad;
  AdapterSet& corrupt_deltas;

  // What upstream raises here; with provenance the raise site is noted.
  Raise raise(Status s, std::string msg) const;
  bool is_registered_u(int param) const { return dtensor.is_registered_u(param); }
  bool registered_rg(int param) const;
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
  [[nodiscard]] Raise merge(const LayerContext& c, int adapter);
  // lora/layer.py::Linear.unmerge: pops every merged adapter, LIFO, then
  // W.data -= delta; the pop happens before the delta, so a raising delta
  // leaves the adapter unlisted but still in W.
  [[nodiscard]] Raise unmerge(const LayerContext& c);
  // lora/layer.py::Linear.get_delta_weight (a ParamWrapper's: param_wrapper.cpp) added into the
  // registered weight: sign +1 merge, -1 unmerge, 0 the delta only (the delta_weight op).
  [[nodiscard]] Raise get_delta_weight(const LayerContext& c, int adapter, int sign);
  // lora/layer.py::Linear.forward: records which registered objects autograd will give a
  // gradient (`path_rg`: the output requires grad so far).
  // *act: the activation's dtype, in (after the FSDP module's input cast) and out.
  [[nodiscard]] Raise forward(const LayerContext& c, bool grad_enabled, bool* path_rg, DType* act);
  // The layer's output is not its base output (an active adapter adds a term).
  bool adds_output(const LayerContext& c) const;
  int active_count(const LayerContext& c) const;  // active adapters this layer holds
  // The delta B @ A of the registered A and B (recomputed at every merge and unmerge).
  DeltaId delta_version(const LayerContext& c, int adapter) const;
  WeightContent& registered_weight(const LayerContext& c) const;  // the base weight object registered now
  void set_adapter(const LayerContext& c, AdapterSet names, bool inference_mode);
  void update_layer(const LayerContext& c, int adapter, bool inference_mode);
  void enable_adapters(const LayerContext& c, bool enabled);
};

}  // namespace fsdpsim
