// The scenario compiled to indices: parameters in module order, FSDP groups
// as fully_shard assigns them, LoRA layers. Shared read-only by every rank.
#pragma once
#include <algorithm>
#include <array>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include "model/vocab/limits.hpp"
#include "model/vocab/name.hpp"
#include "model/vocab/profile.hpp"
#include "model/vocab/scenario.hpp"
#include "model/vocab/seq.hpp"

namespace fsdpsim {

// kMaxAdapters, kMaxLayers: model/vocab/limits.hpp.

// SavedWeight, SavedBias: one adapter's copy of a modules_to_save layer (its Weight and Bias
// are then the wrapper's original_module).
// LoraM: a DoRA adapter's lora_magnitude_vector (peft/tuners/lora/dora.py::DoraLinearLayer), one
// value per output row.
enum class ParamKind : uint8_t { Weight, Bias, LoraA, LoraB, SavedWeight, SavedBias, LoraM };
inline bool is_lora(ParamKind k) { return k == ParamKind::LoraA || k == ParamKind::LoraB || k == ParamKind::LoraM; }

// An adapter's own tensors on one layer: lora_A, lora_B and, for a DoRA adapter, its magnitude
// (every PEFT loop over an adapter's parameters reaches the three alike).
struct AdapterTensors {
  std::array<int, 3> p{};
  int n = 0;
  const int* begin() const { return p.data(); }
  const int* end() const { return p.data() + n; }
};

struct ParamInfo {
  Name name;  // "lin0.weight", "lin0.lora_A.other"
  ParamKind kind;
  int layer;
  int adapter;  // -1 for base parameters
  int dim0, rest;
  int group;    // -1: not managed by FSDP (an adapter added after fully_shard)
  int64_t shard_numel;  // ceil(dim0 / world) * rest: what this rank holds and contributes
  int chunk_rows = 0;   // ceil(dim0 / world): the rows of each rank's (padded) shard
  // The rows `rank` holds unpadded: torch.chunk over the world (FSDP2 Shard(0)); 0 for a
  // rank past the last row, which holds padding only.
  int64_t local_rows(int rank) const {
    const int64_t left = static_cast<int64_t>(dim0) - static_cast<int64_t>(chunk_rows) * rank;
    return left <= 0 ? 0 : std::min<int64_t>(left, chunk_rows);
  }
  bool rows_on(int rank) const { return local_rows(rank) > 0; }
};

struct GroupInfo {
  Name name;                // first module's name, or "root"
  std::vector<int> layers;  // layers whose parameters this group manages
  std::vector<int> params;  // managed parameters, in registration order
  int first_layer = -1, last_layer = -1;  // forward hooks: pre on first, post on last
  // A model scenario's unit inside another's module (fully_shard model.layers.1.mlp, then
  // model.layers.1): the innermost enclosing child group (-1: none, always for `layer` stacks),
  // and the last layer under the group's module, a nested unit's included (>= last_layer): the
  // module's forward returns, and its post-forward hook runs, after that layer.
  int parent = -1;
  int span_last = -1;
  // Its modules end with a tied output head (ShardDecl::tied_head), called after every layer: its
  // post-forward runs once the head returns, span_last == layers.size().
  bool tied_head = false;
  bool is_root = false;
  bool raf = true;          // reshard_after_forward as resolved at lazy init
  int64_t numel = 0;        // all-gather element count per rank
  // The MixedPrecisionPolicy its fully_shard call got (torch _fsdp_api.py); unset: None.
  std::optional<DType> mp_param, mp_reduce;
  std::optional<DType> mp_output;  // output_dtype
  bool mp_cast_inputs = true;      // cast_forward_inputs (the policy's default: true)
};

struct LayerInfo {
  Name name;
  int experts = 0;  // > 0: a ParamWrapper target of shape (E, in, out), no bias
  int fan_in = 0, fan_out = 0;
  // A transformers Conv1D (a `model` file's gpt2 attention and MLP): its weight is stored (in, out),
  // so FSDP2's Shard(0) splits the input rows, and PEFT's delta is transposed (fan_in_fan_out).
  bool conv1d = false;
  int group = -1;
  int weight = -1, bias = -1;
  std::array<int, kMaxAdapters> A{}, B{};
  std::array<int, kMaxAdapters> M{};  // a DoRA adapter's magnitude vector (-1: none here)
  AdapterTensors tensors(int a) const {
    AdapterTensors t;
    if (A[a] < 0) return t;
    t.p = {A[a], B[a], M[a]};
    t.n = M[a] >= 0 ? 3 : 2;
    return t;
  }
  // No adapter targeted it when fully_shard ran: a later one wraps the FSDP
  // module in a new LoRA layer, so FSDP's hooks see the base output only.
  bool lora_after_fsdp = false;  // -1 where the adapter does not target the layer
  // The same for an experts layer given to fully_shard itself: the later ParamWrapper runs
  // before the FSDP module's pre-forward, on whatever weight is registered then.
  bool wrapper_after_fsdp = false;
  // `checkpoint`: wrapped in checkpoint_wrapper before fully_shard; backward recomputes its forward.
  bool checkpoint = false;
  // A modules_to_save layer: a ModulesToSaveWrapper (peft/utils/other.py) around it, with per
  // adapter its copy's weight and bias (-1: that adapter has no copy here).
  bool saved_module = false;
  std::array<int, kMaxAdapters> SW{}, SB{};
  // `quant=`: a bitsandbytes Linear4bit whose weight is the packed uint8 Params4bit of
  // (in*out/2, 1) (bitsandbytes/nn/modules.py::Params4bit._quantize).
  std::optional<Quant> quant;
  std::optional<DType> compute_dtype;  // its Linear4bit.compute_dtype (unset: None)
  // A `model` scenario's module: the aten op it raises in when called on its sharded parameters
  // (ModuleShape::sharded_call_op; "" for layer scenarios).
  std::string sharded_call_op;
};

struct Topology {
  int world = 1;
  Profile profile;
  std::vector<AdapterDecl> adapters;
  std::vector<Name> adapter_names;  // adapters[a].name, interned once for the observations
  std::vector<ParamInfo> params;
  std::vector<GroupInfo> groups;  // all_states order: root first, then children in module order
  // The groups in root.modules() pre-order, where a unit enclosing another comes first though
  // the nested one's layers come first (GroupInfo::parent); `groups` order where nothing nests.
  std::vector<int> states_order;
  std::vector<LayerInfo> layers;
  std::vector<int> state_dict_order;
  // A tied output head's key: the input embedding's weight again, after state_dict_order's last
  // (model_lowering.hpp tied_head_source); -1 where nothing is tied.
  int tied_head_param = -1;
  std::vector<std::string> target_parameters;  // per adapter: its LoraConfig's (target_parameters_text)  // every parameter in module.state_dict() order (injection order)
  OptimizerParams optimizer = OptimizerParams::Trainable;
  Loading loading = Loading::Full;
  DType dtype = DType::F32;
  bool autocast_adapter_dtype = true;
  // The scenario's `mixed_precision` line: accelerate's prepare upcasts trainable parameters to fp32.
  bool mp_upcast = false;
  // Some fully_shard call has a policy (the line or an override): collectives observe their wire dtype.
  bool mixed_precision = false;
  Data data = Data::Same;  // `data per_rank`: each rank's forward reads its own batch
  bool explicit_prepare = false;  // the ops start before prepare (the parameters are whole)
  // A `model` scenario: `generate` is transformers' GenerationMixin.generate, reached through
  // PeftModel.generate -> the base model, so the root unit's (the PeftModel's) FSDP hooks never run.
  bool generate_skips_root = false;
  // A `model` scenario's forward is given labels: transformers computes the loss inside the root
  // module's forward, so the root's pre-backward hook is on the loss, the last tensor of all.
  bool loss_in_root = false;
  // Some layer is 4-bit (a Params4bit in the model): accelerate skips its fp32 upcast and its
  // RAM-efficient load (utils/fsdp_utils.py::fsdp2_prepare_model, `model_has_params4bit`).
  bool params4bit = false;
  // accelerate's own prepare runs (prepare_by_accelerate): the frozen uint8 Params4bit weights are
  // its ignored_params, whole on every rank in no group; else the direct fully_shard shards their bytes.
  bool params4bit_ignored = false;

  int n_adapters() const { return static_cast<int>(adapters.size()); }
  int group_index(const std::string& module) const;
  int layer_index(const std::string& name) const;  // group holding that module's state, -1 if none
};

// Throws std::invalid_argument on a profile override that does not apply.
// `wrapped`: adapters in the model when fully_shard runs (bit a = adapter a;
// wrapped_at_prepare(SeqFile)); -1: the non-deferred ones.
// `order`: the adapters' injection order (adapter_order_at_prepare); empty: file order.
Topology compile_topology(const Scenario& s, int wrapped = -1, std::vector<int> order = {});
// The file's scenario, with the adapters its ops load before `prepare`, and
// whether the ops start on the plain model (an explicit `prepare`).
Topology compile_topology(const SeqFile& f);
// The same, kept per thread for the next file: a loop over many files of one scenario (the
// fuzzer's mutations of an input's ops) compiles it once. The scenario and every property of
// the ops compile_topology(f) reads are compared; the reference holds until this thread's
// next call.
const Topology& compile_topology_reused(const SeqFile& f);

// Whether upstream's prepare takes accelerate's own Accelerator.prepare for this scenario rather than
// the direct fully_shard calls (the static part of real_backend/upstream/fsdpsim_upstream/prepare.py::blocker:
// root last and alone, one module per child call, no checkpointed child, no per-call policy).
bool prepare_by_accelerate(const Scenario& s);

// Some rank holds only padding rows of an FSDP-managed parameter (ParamInfo::rows_on).
bool has_padding_only_rank(const Topology& t);

}  // namespace fsdpsim
