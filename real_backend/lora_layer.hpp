// One LoRA layer of the real module (peft/tuners/lora/layer.py::Linear on
// tuners_utils.py::BaseTunerLayer): its bookkeeping (active adapters, merged
// adapters LIFO, disabled) and its transitions on whatever leaf the registry holds
// now, the shard S or the unsharded U. An experts layer's math is its ParamWrapper's.
// Same file and class as model/machine/lora_layer.hpp.
#pragma once
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "model/vocab/adapter_set.hpp"
#include "real_backend/activation_checkpoint.hpp"
#include "real_backend/dtensor.hpp"
#include "real_backend/param_wrapper.hpp"

namespace fsdpsim::real {

class LoraLayer {
 public:
  LoraLayer(const Layout& layout, int index, Parameters& params, DTensor& dtensor, CheckpointWrapper& ckpt, ProcessGroup& pg);
  LoraLayer(const LoraLayer&) = delete;  // its ParamWrapper and a ModulesToSaveWrapper hold its address
  LoraLayer& operator=(const LoraLayer&) = delete;
  void reset();

  AdapterSet active = AdapterSet::of(0);  // BaseTunerLayer._active_adapter: the adapters this layer runs
  std::vector<int> merged;                // merged_adapters, LIFO
  bool disabled = false;                  // _disable_adapters (a wrapper around this layer shares it)
  bool tuner = false;                     // a BaseTunerLayer: some adapter targeting it was injected

  const LayerSpec& spec() const { return layout_->layers[index_]; }
  // The layer holds this adapter's lora_A (registered now).
  bool holds(int adapter) const;
  // tuners_utils.py::BaseTunerLayer.set_adapter.
  void set_adapter(AdapterSet names, bool inference_mode);
  // tuners_utils.py::BaseTunerLayer.enable_adapters (inference_mode: the adapters configured so).
  void enable_adapters(bool enabled, AdapterSet inference_mode);
  // lora/layer.py::LoraLayer.update_layer's end on a target of the adapter being injected.
  void update_layer(int adapter, bool inference_mode);
  // tuners_utils.py::BaseTunerLayer.delete_adapter's active list: the rest, or
  // sorted(its own adapters)[0] (made trainable).
  void delete_adapter(int adapter);
  // lora/layer.py::Linear.forward (or ParamWrapper.forward); base_out: the base layer's output.
  at::Tensor forward(const at::Tensor& h, at::Tensor* base_out = nullptr);
  // lora/layer.py::Linear.merge of one adapter (not yet merged).
  void merge(int adapter);
  // lora/layer.py::Linear.unmerge: every merged adapter, LIFO.
  void unmerge();
  // A DoRA adapter's weight norm as its merge cached it (variants.py::DoraLinearVariant.merge_unsafe's
  // _cache_store): the values, and whether they were taken off the DTensor shard (else off U).
  struct DoraNorm {
    at::Tensor norm;
    bool on_shard = false;
  };
  const DoraNorm* dora_norm(int adapter) const;
  // W is registered as its DTensor shard (a DoRA edit on it is lost).
  bool weight_on_shard() const;
  // lora/layer.py::Linear / ParamWrapper.get_delta_weight: sign +1 merge, -1 unmerge (their
  // checks around the delta), 0 the delta alone; *form: which rows it returned.
  at::Tensor get_delta_weight(int adapter, int sign, DeltaForm* form = nullptr);
  // The delta_weight op's value for one adapter, with its form and whole shape.
  at::Tensor delta_value(int adapter, DeltaValue* got);
  // ParamWrapper.forward's _activate_lora before the FSDP module's pre-forward.
  void activate_lora();

 private:
  at::Tensor linear_delta(int adapter, DeltaForm* form);
  // forward under a MixedPrecisionPolicy: the activation's real dtype through PEFT's casts
  at::Tensor forward_cast(const at::Tensor& h, at::Tensor* base_out);
  void apply_delta(const at::Tensor& d, bool add);
  // The adapter's tensors on this layer flip requires_grad together (utils/other.py::_set_adapter).
  void set_adapter_requires_grad(int adapter, bool rg);
  // variants.py::DoraLinearVariant.merge_unsafe and unmerge (the shard's edits are lost).
  void dora_merge(int adapter);
  void dora_unmerge(int adapter);
  // layer.py::Linear._unmerged_base_weight: W with the merged adapters taken out (unmerged, copied,
  // merged again); a nested call (the re-merge of a DoRA adapter) reads the outer copy.
  at::Tensor unmerged_base_weight(const std::function<void()>& inside = {});
  // A DoRA merge or unmerge on a weight of fewer rows than ranks: its redistributions.
  bool few_rows() const;
  bool partial_delta(int adapter) const;  // r >= world: B @ A is Partial
  at::Tensor few_rows_weight_plus_delta(int adapter, const at::Tensor& d);
  void few_rows_weight_norm(int adapter, const at::Tensor& d);
  void few_rows_factor(int adapter);
  // variants.py::DoraLinearVariant.forward: the DoRA term added to `result` (the running output).
  at::Tensor dora_forward(const at::Tensor& x, int adapter, const at::Tensor& result);

  const Layout* layout_;
  int index_;
  Parameters* params_;
  DTensor* dtensor_;
  CheckpointWrapper* ckpt_;
  ParamWrapper experts_;
  std::vector<DoraNorm> dora_norms_;  // per adapter (undefined norm: none cached)
  at::Tensor replay_base_;            // _unmerged_base_weight's copy while it re-merges
  at::Tensor few_norm_sq_;            // a few-rows merge's Partial norm (squared), until the factor
};

}  // namespace fsdpsim::real
