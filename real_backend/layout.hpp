// The scenario as the real backend lays it out: parameters in module
// registration order, the FSDP group each fully_shard call claims, chunk sizes.
// Derived from the vocabulary alone (never from the model's Topology), so the
// cross-check compares two independent readings of the same scenario.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/vocab/profile.hpp"
#include "model/vocab/scenario.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim::real {

// SavedWeight, SavedBias: one adapter's copy of a modules_to_save layer, whose Weight and Bias
// are then the ModulesToSaveWrapper's original_module (peft/utils/other.py).
// LoraM: a DoRA adapter's lora_magnitude_vector (peft/tuners/lora/dora.py::DoraLinearLayer.weight), (out,).
enum class Role : uint8_t { Weight, Bias, LoraA, LoraB, SavedWeight, SavedBias, LoraM };

struct ParamSpec {
  std::string name;  // "lin0.lora_A.other", as module.named_parameters() spells it
  Role role;
  int layer;
  int adapter;            // -1 for the base layer's weight and bias
  int64_t rows, cols;     // dim 0 and the rest (bias: cols == 1, stored 1-D)
  int group;              // -1: added after fully_shard, no FSDP group
  int64_t chunk_rows;     // ceil(rows / world): FSDP2's dim-0 chunk (_chunk_with_empty)
  int64_t chunk_numel() const { return chunk_rows * cols; }
  // Rows of the chunk `rank` holds that are not padding (0 for a padding-only rank).
  int64_t local_rows(int rank) const { return std::max<int64_t>(0, std::min<int64_t>(chunk_rows, rows - rank * chunk_rows)); }
};

struct GroupSpec {
  std::string name;
  bool is_root = false;
  bool reshard_after_forward = true;
  std::vector<int> params;
  std::vector<int> layers;
  int first_layer = -1, last_layer = -1;
  int64_t numel = 0;  // per-rank all-gather input
  // The MixedPrecisionPolicy its fully_shard call got (torch _fsdp_api.py); unset: None.
  std::optional<DType> mp_param, mp_reduce, mp_output;
  bool mp_cast_inputs = true;  // cast_forward_inputs (the policy's default: true)
};

struct LayerSpec {
  std::string name;
  int64_t in = 0, out = 0;
  int64_t experts = 0;  // > 0: a ParamWrapper target, weight (E, in, out), no bias (bias == -1)
  int group = -1;
  int weight = -1, bias = -1;
  std::vector<int> lora_a, lora_b;  // per adapter, -1 when not a target
  std::vector<int> lora_m;          // per adapter, its DoRA magnitude vector (-1: not a DoRA target)
  // The adapter's own tensors here: lora_A, lora_B and, for a DoRA adapter, its magnitude
  // (every loop over an adapter's parameters: set_adapter, placement, delete, load).
  std::vector<int> adapter_params(int a) const {
    if (lora_a[a] < 0) return {};
    if (lora_m[a] < 0) return {lora_a[a], lora_b[a]};
    return {lora_a[a], lora_b[a], lora_m[a]};
  }
  // No adapter targeted it at fully_shard: a later one wraps the FSDP module
  // (BaseTuner.inject_adapter), whose hooks then see the base output only.
  bool lora_after_fsdp = false;
  // The same for an experts layer given to fully_shard itself: the later ParamWrapper runs
  // before the FSDP module's pre-forward, on whatever weight is registered then.
  bool wrapper_after_fsdp = false;
  bool checkpoint = false;  // `checkpoint`: in a checkpoint_wrapper, recomputed in backward
  // Listed in some adapter's modules_to_save: a ModulesToSaveWrapper, with per adapter its
  // copy's weight and bias (-1: that adapter has no copy here).
  bool saved_module = false;
  std::vector<int> saved_w, saved_b;
};

struct Layout {
  int world = 1;
  Profile profile;
  std::vector<AdapterDecl> adapters;
  std::vector<ParamSpec> params;
  std::vector<GroupSpec> groups;  // FSDPState.all_states order: root's first, then module order
  std::vector<LayerSpec> layers;
  std::vector<int> state_dict_order;
  std::vector<std::string> target_parameters;  // per adapter: its LoraConfig's (target_parameters_text)  // every parameter in module.state_dict() order (injection order)
  OptimizerParams optimizer = OptimizerParams::Trainable;
  Data data = Data::Same;
  Loading loading = Loading::Full;
  DType dtype = DType::F32;  // the base weights' dtype as loaded
  bool autocast_adapter_dtype = true;
  // The scenario's `mixed_precision` line: accelerate's prepare upcasts trainable parameters to fp32.
  bool mp_upcast = false;
  // Some fully_shard call has a policy: the forward carries real dtypes, collectives observe their wire dtype.
  bool mixed_precision = false;
  bool explicit_prepare = false;  // a `prepare` op runs it; else it happens before op 1
  uint8_t wrapped = 0;            // adapters in the model at prepare (wrapped_at_prepare)
  int group_of_module(const std::string& module) const;  // -1: no FSDP state with parameters
  int layer_named(const std::string& name) const;
  int adapter_named(const std::string& name) const;
};

// The adapters in the model at prepare (wrapped_at_prepare(f)) are the ones
// fully_shard manages; adapters added after prepare have no group.
Layout make_layout(const SeqFile& f);

// The tensor shape of parameter p with `rows` rows on dim 0: (rows) for a
// bias, (rows, in, out) for an experts weight, (rows, cols) otherwise.
std::vector<int64_t> param_shape(const Layout& l, const ParamSpec& p, int64_t rows);

}  // namespace fsdpsim::real
