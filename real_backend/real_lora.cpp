// LoRA layers on real tensors (peft/tuners/lora/layer.py::Linear,
// peft/tuners/tuners_utils.py::BaseTunerLayer): every edit hits whatever leaf
// the registry holds now, the shard S or the unsharded U.
#include <ATen/core/grad_mode.h>

#include "real_backend/real_param_wrapper.hpp"
#include "real_backend/real_rank.hpp"
#include "real_backend/values.hpp"

namespace fsdpsim::real {

// lora/layer.py::Linear / ParamWrapper.get_delta_weight, with the upstream error order of
// merge (sign +1) and unmerge (-1) in this one place: DTensor's refusal of a plain delta into
// W's shard, then the delta's own errors (experts_delta's for a ParamWrapper), then the in-place
// placement rule of `W.data += delta`. Sign 0 (the delta_weight op) is the delta alone.
at::Tensor RealRank::get_delta_weight(int layer, int adapter, int sign, DeltaForm* form) {
  at::NoGradGuard ng;
  if (sign != 0) dtensor_.check_mixed(layer, adapter, sign > 0);
  at::Tensor d = layout_->layers[layer].experts > 0 ? experts_delta(layer, adapter, true) : linear_delta(layer, adapter, form);
  if (sign != 0) dtensor_.check_inplace_placement(layer, adapter, sign > 0);
  return d;
}

// lora/layer.py::Linear.get_delta_weight: B @ A * scaling from the registered A
// and B. On a sharded layer (DTensors) the matmul all-gathers A and yields this
// rank's rows of the delta, matching W's shard.
at::Tensor RealRank::linear_delta(int layer, int adapter, DeltaForm* form) {
  DeltaForm unused;
  if (!form) form = &unused;
  at::NoGradGuard ng;
  const LayerSpec& ls = layout_->layers[layer];
  int pa = ls.lora_a[adapter], pb = ls.lora_b[adapter], pw = ls.weight;
  float scale = lora_scaling(*layout_, adapter);
  const ParamSpec& a_spec = layout_->params[pa];
  bool w_sharded = !fsdp_.groups[layout_->params[pw].group].unsharded();
  bool a_managed = group_of(pa) >= 0;
  if (a_managed && !fsdp_.groups[a_spec.group].unsharded()) {
    if (layout_->world > 1 && layout_->params[pw].rows < layout_->world) return dtensor_.matmul_few_rows(layer, adapter, form);
    *form = kDeltaChunk;
    return at::matmul(params_[pb].leaf.s, gather_full(pa)) * scale;  // B's rows line up with W's shard
  }
  at::Tensor d = at::matmul(registered(pb), registered(pa)) * scale;
  *form = w_sharded ? kDeltaChunk : kDeltaFull;
  if (!w_sharded) return d;
  return dtensor_.chunk_of(std::vector<float>(d.data_ptr<float>(), d.data_ptr<float>() + d.numel()), layout_->params[pw]);
}

// lora/layer.py::Linear.merge: W.data += delta for each adapter not yet merged.
void RealRank::layer_merge(int layer, int adapter) {
  const LayerSpec& ls = layout_->layers[layer];
  if (ls.lora_a[adapter] < 0 || !registered(ls.lora_a[adapter]).defined()) return;
  for (int m : layers_[layer].merged)
    if (m == adapter) return;
  apply_delta(layer, get_delta_weight(layer, adapter, +1), true);
  layers_[layer].merged.push_back(adapter);
}

// W.data += delta (merge) or -= delta (unmerge) on the registered weight;
// libtorch raises when a delta does not fit it (ParamWrapper's local-rows delta).
void RealRank::apply_delta(int layer, const at::Tensor& d, bool add) {
  at::Tensor w = registered(layout_->layers[layer].weight).variable_data();
  try {
    if (add) w.add_(d);
    else w.sub_(d);
  } catch (const c10::Error& e) {
    throw OpError(Status::ShapeError, first_line(e.what_without_backtrace()));  // what() symbolizes a backtrace: slow
  }
}

// lora/layer.py::Linear.unmerge: pop every merged adapter, LIFO, W.data -= delta
// (the pop comes first: a delta that raises leaves the adapter unlisted).
void RealRank::layer_unmerge(int layer) {
  while (!layers_[layer].merged.empty()) {
    int adapter = layers_[layer].merged.back();
    layers_[layer].merged.pop_back();
    apply_delta(layer, get_delta_weight(layer, adapter, -1), false);
  }
}

// tuners_utils.py::BaseTunerLayer.set_adapter.
void RealRank::layer_set_adapter(int layer, AdapterSet names, bool inference_mode) {
  const LayerSpec& ls = layout_->layers[layer];
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (ls.lora_a[a] < 0 || !registered(ls.lora_a[a]).defined()) continue;
    bool rg = names.contains(static_cast<int>(a)) && !inference_mode;
    set_registered_rg(ls.lora_a[a], rg);
    set_registered_rg(ls.lora_b[a], rg);
  }
  layers_[layer].active = names;
}

// tuners_utils.py::BaseTunerLayer.enable_adapters (inference_mode ignored
// upstream, #3447; honoured when patched, #3453).
void RealRank::layer_enable_adapters(int layer, bool enabled) {
  if (layers_[layer].wrapper) return wrapper_enable_adapters(layer, enabled);
  const LayerSpec& ls = layout_->layers[layer];
  bool respect = layout_->profile.get(Switch::EnableInferenceMode) == sw::kRespect;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (ls.lora_a[a] < 0 || !registered(ls.lora_a[a]).defined()) continue;
    bool rg = enabled && layers_[layer].active.contains(static_cast<int>(a)) && !(respect && inference_mode_.contains(static_cast<int>(a)));
    set_registered_rg(ls.lora_a[a], rg);
    set_registered_rg(ls.lora_b[a], rg);
  }
  layers_[layer].disabled = !enabled;
}

// lora/layer.py::Linear.forward.
at::Tensor RealRank::layer_forward(int layer, const at::Tensor& h, at::Tensor* base_out) {
  const LayerSpec& ls = layout_->layers[layer];
  if (ls.experts > 0) {
    at::Tensor y = experts_forward(layer, h);
    if (base_out) *base_out = y;
    return y;
  }
  if (layers_[layer].wrapper) {  // a ModulesToSaveWrapper: no LoRA, its output is the FSDP module's
    at::Tensor y = wrapper_module_forward(layer, h);
    if (base_out) *base_out = y;
    return y;
  }
  if (layers_[layer].disabled && !layers_[layer].merged.empty()) layer_unmerge(layer);
  at::Tensor y = saving_linear(h, param_dtype(ls.weight), ls.weight, ls.bias);
  if (base_out) *base_out = y;
  if (layers_[layer].disabled || !layers_[layer].merged.empty()) return y;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!layers_[layer].active.contains(static_cast<int>(a)) || ls.lora_a[a] < 0 || !registered(ls.lora_a[a]).defined()) continue;
    // PEFT casts the input to lora_A's dtype (lora/layer.py::Linear.forward, _cast_input_dtype).
    const at::ScalarType dt = param_dtype(ls.lora_a[a]);
    y = y + saving_linear(saving_linear(h, dt, ls.lora_a[a]), dt, ls.lora_b[a]) * lora_scaling(*layout_, static_cast<int>(a));
  }
  return y;
}

bool RealRank::any_merged() const {
  for (const RealLayer& ly : layers_)
    if (!ly.merged.empty()) return true;
  return false;
}

}  // namespace fsdpsim::real
