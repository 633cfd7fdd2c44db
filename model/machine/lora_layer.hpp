// One LoRA layer's PEFT bookkeeping on one rank (peft/tuners/lora/layer.py::
// LoraLayer and tuners_utils.py::BaseTunerLayer): which adapters it runs, which
// are merged into its weight, whether it is disabled; and its transitions, named
// after the upstream methods: set_adapter, update_layer, enable_adapters, forward,
// merge, unmerge and get_delta_weight (lora_layer.cpp; a ParamWrapper target's
// get_delta_weight and forward are param_wrapper.cpp's), on the parameters a LayerPort hands
// in; a ModulesToSaveWrapper's state too, which that class (modules_to_save.hpp) runs. A delta read off
// shards issues its all-gathers through the DTensor port (dtensor.hpp).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/machine/dtensor.hpp"
#include "model/machine/op_raised.hpp"
#include "model/machine/scope_site.hpp"
#include "model/vocab/adapter_set.hpp"

namespace fsdpsim {

// The layer's own parameters as this rank holds them (topo.layers[layer] names them): which
// object of each is registered now (S, or the group's temporary U, as the groups' state says;
// a requires_grad flip lands there) and whether fully_shard made the managed ones DTensors.
struct LayerParams {
  const Topology& topo;
  int layer;
  std::vector<FsdpParam>& params;
  const std::vector<FsdpParamGroup>& groups;  // read only to know which object is registered
  bool prepared;                               // fully_shard ran

  const LayerInfo& info() const { return topo.layers[layer]; }
  bool is_registered_u(int param) const { return u_registered(topo, params, groups, param); }
  bool registered_rg(int param) const { return params[param].registered_rg(is_registered_u(param)); }
  void set_registered_rg(int param, bool value) const { fsdpsim::set_registered_rg(topo, params, groups, param, value); }
};

// What a layer's transitions reach: its own parameters, the DTensor port its delta reads gather
// through, and where a transition or a raise is noted. What else one transition reads or writes
// is its argument (enable_adapters' inference_mode, forward's autograd graph, the delta_weight
// op's corrupt deltas), as on real_backend::LoraLayer. RankModel::layer_port and
// PeftModel::layer_port build it.
struct LayerPort {
  LayerParams own;
  DTensor dtensor;
  ScopeSite scope;

  // What upstream raises here; with provenance the raise site is noted.
  Raise raise(Status s, std::string msg) const { return raise_at(scope.prov, s, std::move(msg)); }
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
  // DoRA adapters whose merge cached its weight norm off the sharded DTensor weight
  // (variants.py::DoraLinearVariant.merge_unsafe's _cache_store), not off a plain U.
  AdapterSet dora_norm_on_shard;
  int8_t copy_active = -1;
  // layer.py::Linear._unmerged_base_weight's cached copy is held (between its unmerge and the end of
  // its re-merge): a DoRA merge re-entered from that re-merge replays nothing. False between ops.
  bool replay_cached = false;

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
  [[nodiscard]] Raise merge(const LayerPort& c, int adapter);
  // lora/layer.py::Linear.unmerge: pops every merged adapter, LIFO, then
  // W.data -= delta; the pop happens before the delta, so a raising delta
  // leaves the adapter unlisted but still in W.
  [[nodiscard]] Raise unmerge(const LayerPort& c);
  // lora/layer.py::Linear._unmerged_base_weight, as a DoRA merge enters it: unmerge every merged
  // adapter, then merge again those it took out, in their order (also after the unmerge raised).
  // `inside`: what the `with` body reads off the copy (a DoRA weight norm's collectives), run
  // between the unmerge and the re-merge.
  [[nodiscard]] Raise unmerged_base_weight(const LayerPort& c, const std::function<void()>& inside = {});
  // A merge (sign +1) or unmerge (-1) on a 4-bit layer after prepare (lora_layer.cpp).
  [[nodiscard]] Raise quant_merge_raise(const LayerPort& c, int adapter, int sign, bool sharded_read);
  // A DoRA merge (sign > 0) or unmerge on a weight of fewer rows than ranks: its collectives.
  // `norm`: the weight norm taken inside _unmerged_base_weight (its argument: the norm's collectives).
  [[nodiscard]] Raise dora_few_rows(const LayerPort& c, int adapter, int sign,
                                    const std::function<Raise(const std::function<void()>&)>& norm);
  // lora/layer.py::Linear.get_delta_weight (a ParamWrapper's: param_wrapper.cpp) added into the
  // registered weight: sign +1 merge, -1 unmerge, 0 the delta only (the delta_weight op).
  // corrupt_deltas: where the delta_weight op (sign 0) notes a read that is not the layer's delta.
  [[nodiscard]] Raise get_delta_weight(const LayerPort& c, int adapter, int sign, AdapterSet* corrupt_deltas = nullptr);
  // lora/layer.py::Linear.forward: records which registered objects autograd will give a
  // gradient in `graph_grad` (per param; `path_rg`: the output requires grad so far).
  // *act: the activation's dtype, in (after the FSDP module's input cast) and out.
  [[nodiscard]] Raise forward(const LayerPort& c, std::vector<uint8_t>& graph_grad, bool grad_enabled, bool* path_rg, DType* act);
  // The layer's output is not its base output (an active adapter adds a term).
  bool adds_output(const LayerPort& c) const;
  int active_count(const LayerPort& c) const;  // active adapters this layer holds
  // The delta B @ A of the registered A and B (recomputed at every merge and unmerge).
  DeltaId delta_version(const LayerPort& c, int adapter) const;
  WeightContent& registered_weight(const LayerPort& c) const;  // the base weight object registered now
  // Adds sign * delta `d` to the registered weight; on U, noted in FsdpParam::u_edit too.
  void edit_registered(const LayerPort& c, int adapter, DeltaId d, int sign) const;
  void set_adapter(const LayerPort& c, AdapterSet names, bool inference_mode);
  void update_layer(const LayerPort& c, int adapter, bool inference_mode);
  // inference_mode: the adapters configured so (PeftConfig::inference_mode).
  void enable_adapters(const LayerPort& c, bool enabled, AdapterSet inference_mode);
};

}  // namespace fsdpsim
