// The scenario: topology, world size, adapters, sharding plan and profile.
// Everything a `.seq` file says before its `---` line.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/vocab/model_decl.hpp"
#include "model/vocab/placement.hpp"
#include "model/vocab/source_error.hpp"

namespace fsdpsim {

// A named nn.Linear(in, out): weight (out, in) and bias (out). With
// experts = E > 0 it is instead a mixture-of-experts parameter of shape
// (E, in, out), no bias, that LoRA targets through a ParamWrapper
// (target_parameters): lora_A (r*E, in), lora_B (out, r*E).
// A layer's 4-bit storage (bitsandbytes Params4bit quant_type): `quant=nf4|fp4` on its line.
enum class Quant : uint8_t { NF4, FP4 };
inline const char* quant_name(Quant q) { return q == Quant::NF4 ? "nf4" : "fp4"; }

struct LayerDecl {
  std::string name;
  int in = 0;
  int out = 0;
  int experts = 0;
  std::optional<Quant> quant;          // set: the base is a bitsandbytes Linear4bit (QLoRA)
  std::optional<DType> compute_dtype;  // Linear4bit's compute_dtype; unset: bitsandbytes' default
  SourcePos pos;
  bool operator==(const LayerDecl& o) const {
    return name == o.name && in == o.in && out == o.out && experts == o.experts && quant == o.quant &&
           compute_dtype == o.compute_dtype;
  }
};

// reshard_after_forward as passed to fully_shard: true, false, or omitted (None).
enum class Raf : uint8_t { True, False, None };

// torch _fsdp_api.py::MixedPrecisionPolicy: each key unset is the policy's None (no cast), except
// cast_forward_inputs (True by default). On the scenario's `mixed_precision` line it is the policy
// every fully_shard gets; on a fully_shard line, the keys that call overrides.
struct MixedPrecision {
  std::optional<DType> param_dtype, reduce_dtype, output_dtype;
  std::optional<bool> cast_forward_inputs;
  bool empty() const { return !param_dtype && !reduce_dtype && !output_dtype && !cast_forward_inputs; }
  // This policy's keys, with `over`'s given keys replacing them.
  MixedPrecision with(const MixedPrecision& over) const {
    MixedPrecision m = *this;
    if (over.param_dtype) m.param_dtype = over.param_dtype;
    if (over.reduce_dtype) m.reduce_dtype = over.reduce_dtype;
    if (over.output_dtype) m.output_dtype = over.output_dtype;
    if (over.cast_forward_inputs) m.cast_forward_inputs = over.cast_forward_inputs;
    return m;
  }
  bool operator==(const MixedPrecision& o) const {
    return param_dtype == o.param_dtype && reduce_dtype == o.reduce_dtype && output_dtype == o.output_dtype &&
           cast_forward_inputs == o.cast_forward_inputs;
  }
};

// One fully_shard call; `modules` holds layer names or "root". Calls are
// listed bottom-up, root last (fully_shard must be applied bottom-up).
struct ShardDecl {
  std::vector<std::string> modules;
  Raf raf = Raf::None;
  MixedPrecision mp;  // the keys this call sets over the scenario's `mixed_precision` line
  SourcePos pos;
  // A lowered `model` call whose modules include a tied output head: a module with no parameter
  // of its own (not a layer), called after every layer (model_lowering.cpp lower_model).
  bool tied_head = false;
  bool is_root() const { return modules.size() == 1 && modules[0] == "root"; }
  bool operator==(const ShardDecl& o) const { return modules == o.modules && raf == o.raf && mp == o.mp; }
};

enum class LoraInit : uint8_t { Zero, Random };  // Zero: PEFT default (lora_B = 0)

// A LoRA adapter. `deferred` adapters are declared but only come into the
// model through an `add_adapter`/`load_adapter` op (after sharding).
struct AdapterDecl {
  std::string name;
  int r = 8;
  int alpha = 8;
  std::vector<std::string> targets;
  // PEFT's modules_to_save: layers wrapped in a ModulesToSaveWrapper that keeps the layer as
  // original_module and trains a whole copy of it per adapter (peft/utils/other.py).
  std::vector<std::string> modules_to_save;
  LoraInit init = LoraInit::Random;
  bool inference_mode = false;
  bool deferred = false;
  // PEFT's LoraConfig(use_dora=True): each target layer holds a trainable magnitude vector
  // lora_magnitude_vector.<name>.weight (out,) besides A and B (peft/tuners/lora/dora.py).
  bool use_dora = false;
  // The autocast_adapter_dtype this adapter's own entry point is called with (get_peft_model,
  // PeftModel.add_adapter and load_adapter each take one: peft/peft_model.py); unset: the
  // scenario's `dtype ... autocast_adapter_dtype=` value.
  std::optional<bool> autocast;
  SourcePos pos;
  bool operator==(const AdapterDecl& o) const {
    return name == o.name && r == o.r && alpha == o.alpha && targets == o.targets &&
           modules_to_save == o.modules_to_save && init == o.init &&
           inference_mode == o.inference_mode && deferred == o.deferred && autocast == o.autocast &&
           use_dora == o.use_dora;
  }
  bool autocast_or(bool scenario_wide) const { return autocast.value_or(scenario_wide); }
  bool saves(const std::string& layer) const {
    for (const auto& m : modules_to_save)
      if (m == layer) return true;
    return false;
  }
};

// Which parameters the optimizer is built over before prepare swaps in the
// sharded objects: the trainable ones (HF Trainer, accelerate) or every LoRA one.
enum class OptimizerParams : uint8_t { Trainable, AllLora };

struct SwitchOverride {
  std::string name;
  std::string value;
  SourcePos pos;
  bool operator==(const SwitchOverride& o) const { return name == o.name && value == o.value; }
};

// How the base weights reach the ranks before prepare: every rank loads them
// (full), or only rank 0 does and the others hold meta tensors until prepare
// broadcasts (accelerate's fsdp_cpu_ram_efficient_loading).
enum class Loading : uint8_t { Full, RamEfficient };

// What each rank's forward reads: one batch on every rank (same), or each
// rank its own, as torch.utils.data.DistributedSampler gives (per_rank), so
// gradients nothing all-reduces differ between ranks.
enum class Data : uint8_t { Same, PerRank };

struct Scenario {
  int world = 1;
  uint64_t seed = 0;  // drives the real backend's initial values and inputs
  std::string profile = "upstream";
  std::vector<SwitchOverride> overrides;
  std::vector<LayerDecl> layers;  // module order == forward order
  // The `model` line (instead of `layer` lines): a transformers family built from its config, its
  // modules named by dotted paths (module_tree.hpp). Adapters' `targets=` then hold PEFT
  // target_modules as written (suffixes or `all-linear`), `fully_shard` lines dotted module paths.
  std::optional<ModelDecl> model;
  ShardPlan plan = ShardPlan::None;  // `fully_shard_plan`, with a `model` line only
  SourcePos plan_pos;
  std::vector<AdapterDecl> adapters;  // insertion order; the first is active at start
  std::vector<ShardDecl> shards;
  OptimizerParams optimizer = OptimizerParams::Trainable;
  Loading loading = Loading::Full;
  DType dtype = DType::F32;           // the base weights' dtype as loaded
  bool autocast_adapter_dtype = true;  // PEFT casts bf16 adapter weights to fp32 when they are added
  Data data = Data::Same;
  // The `mixed_precision` line: the MixedPrecisionPolicy every fully_shard is called with (what
  // accelerate's FSDP2 plugin passes for mixed_precision="bf16"); empty: none.
  MixedPrecision mp;
  SourcePos mp_pos;  // the `mixed_precision` line, if any
  // Layers wrapped in checkpoint_wrapper before fully_shard, as accelerate's activation
  // checkpointing wraps them (accelerate/utils/fsdp_utils.py::fsdp2_apply_ac); module order.
  std::vector<std::string> checkpoint;
  SourcePos loading_pos;              // the `loading` line, if any (validation errors point there)

  bool operator==(const Scenario& o) const {
    return world == o.world && seed == o.seed && profile == o.profile && overrides == o.overrides &&
           layers == o.layers && adapters == o.adapters && shards == o.shards && optimizer == o.optimizer &&
           loading == o.loading && dtype == o.dtype && autocast_adapter_dtype == o.autocast_adapter_dtype &&
           data == o.data && checkpoint == o.checkpoint && mp == o.mp && model == o.model && plan == o.plan;
  }
  // The policy fully_shard call d is made with: the scenario's, with d's own keys over it.
  MixedPrecision policy_of(const ShardDecl& d) const { return mp.with(d.mp); }
  // Some adapter is a DoRA adapter (`use_dora`).
  bool uses_dora() const {
    for (const auto& a : adapters)
      if (a.use_dora) return true;
    return false;
  }
  // Some fully_shard call is made with a policy that sets a key.
  bool mixed_precision() const {
    for (const auto& d : shards)
      if (!policy_of(d).empty()) return true;
    return !mp.empty();
  }
  // The first layer with `quant=` (a 4-bit Linear4bit base), or nullptr.
  const LayerDecl* quantized() const {
    for (const auto& l : layers)
      if (l.quant) return &l;
    return nullptr;
  }
  int layer_index(const std::string& name) const;
  // A declared adapter `a` that would be built with use_dora beside an earlier declared adapter on
  // one of its layers, under ram-efficient loading at world > 1: the first layer's name, else "".
  // There a rank > 0 raises in get_peft_model (its lora_A container already holds a meta tensor,
  // so the new A stays on cpu and DoRA's weight norm copies the meta base weight to it).
  std::string dora_meets_meta_base(const AdapterDecl& a) const;
  // The layers a child `fully_shard a,b` was given, in the order given: the order its group
  // packs them (torch _fsdp_init.py::_get_managed_modules walks the modules in that order).
  std::vector<int> packing_order(const ShardDecl& d) const;
  int adapter_index(const std::string& name) const;
  // The layer is listed on the `checkpoint` line.
  bool checkpointed(const std::string& layer) const;
  // Some adapter lists the layer in modules_to_save: it becomes a ModulesToSaveWrapper.
  bool saved_module(const std::string& layer) const;
  // The adapter owning a parameter ("lin0.lora_A.b" -> index of b), by exact
  // match against the names the declarations produce (never by splitting the
  // name: see docs/guide/seq-format.md "Names"); -1 for a base parameter or an unknown name.
  int adapter_of_param(const std::string& param) const;
  // The owner's name for per-owner tables: the adapter's name, or "base".
  std::string owner_of_param(const std::string& param) const;
};

// Parameter names as module.named_parameters() spells them for the PEFT
// model (peft/tuners/lora/layer.py::LoraLayer registers lora_A/lora_B as
// ModuleDicts keyed by adapter name).
std::string lora_a_name(const std::string& layer, const std::string& adapter);
std::string lora_b_name(const std::string& layer, const std::string& adapter);
// A ModulesToSaveWrapper's parameters (peft/utils/other.py::ModulesToSaveWrapper): the wrapped
// layer as `original_module`, one deep copy per adapter under `modules_to_save.<adapter>`;
// `what` is "weight" or "bias".
std::string original_module_name(const std::string& layer, const std::string& what);
std::string saved_copy_name(const std::string& layer, const std::string& adapter, const std::string& what);

const char* raf_name(Raf r);

}  // namespace fsdpsim
