// LoRA layers on real tensors (peft/tuners/lora/layer.py::Linear,
// peft/tuners/tuners_utils.py::BaseTunerLayer): every edit hits whatever leaf
// the registry holds now, the shard S or the unsharded U.
#include <ATen/core/grad_mode.h>

#include "real_backend/real_experts.hpp"
#include "real_backend/real_rank.hpp"
#include "real_backend/values.hpp"

namespace fsdpsim::real {

// lora/layer.py::Linear.get_delta_weight: B @ A * scaling from the registered A
// and B. On a sharded layer (DTensors) the matmul all-gathers A and yields this
// rank's rows of the delta, matching W's shard.
at::Tensor RealRank::delta(int layer, int adapter) {
  at::NoGradGuard ng;
  const LayerSpec& ls = layout_->layers[layer];
  if (ls.experts > 0) return experts_delta(layer, adapter, nullptr, true);
  int pa = ls.lora_a[adapter], pb = ls.lora_b[adapter], pw = ls.weight;
  float scale = lora_scaling(*layout_, adapter);
  const ParamSpec& a_spec = layout_->params[pa];
  bool w_sharded = !unsharded_[layout_->params[pw].group];
  bool a_managed = group_of(pa) >= 0;
  if (a_managed && !unsharded_[a_spec.group]) {
    return at::matmul(params_[pb].s, gather_full(pa)) * scale;  // B's rows line up with W's shard
  }
  at::Tensor d = at::matmul(registered(pb), registered(pa)) * scale;
  if (!w_sharded) return d;
  return chunk_of(std::vector<float>(d.data_ptr<float>(), d.data_ptr<float>() + d.numel()), layout_->params[pw]);
}

// lora/layer.py::Linear.merge: W.data += delta for each adapter not yet merged.
void RealRank::layer_merge(int layer, int adapter) {
  const LayerSpec& ls = layout_->layers[layer];
  if (ls.lora_a[adapter] < 0 || !registry_[ls.lora_a[adapter]].defined()) return;
  for (int m : merged_[layer])
    if (m == adapter) return;
  apply_delta(layer, delta(layer, adapter), true);
  merged_[layer].push_back(adapter);
}

// W.data += delta (merge) or -= delta (unmerge) on the registered weight;
// libtorch raises when a delta does not fit it (ParamWrapper's local-rows delta).
void RealRank::apply_delta(int layer, const at::Tensor& d, bool add) {
  at::Tensor w = registered(layout_->layers[layer].weight).variable_data();
  try {
    if (add) w.add_(d);
    else w.sub_(d);
  } catch (const c10::Error& e) {
    throw OpError(Status::ShapeError, first_line(e.what()));
  }
}

// lora/layer.py::Linear.unmerge: pop every merged adapter, LIFO, W.data -= delta
// (the pop comes first: a delta that raises leaves the adapter unlisted).
void RealRank::layer_unmerge(int layer) {
  while (!merged_[layer].empty()) {
    int adapter = merged_[layer].back();
    merged_[layer].pop_back();
    apply_delta(layer, delta(layer, adapter), false);
  }
}

// tuners_utils.py::BaseTunerLayer.set_adapter.
void RealRank::layer_set_adapter(int layer, uint32_t names, bool inference_mode) {
  const LayerSpec& ls = layout_->layers[layer];
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (ls.lora_a[a] < 0 || !registry_[ls.lora_a[a]].defined()) continue;
    bool rg = ((names >> a) & 1) && !inference_mode;
    set_registered_rg(ls.lora_a[a], rg);
    set_registered_rg(ls.lora_b[a], rg);
  }
  layer_active_[layer] = names;
}

// tuners_utils.py::BaseTunerLayer.enable_adapters (inference_mode ignored
// upstream, #3447; honoured when patched, #3453).
void RealRank::layer_enable_adapters(int layer, bool enabled) {
  const LayerSpec& ls = layout_->layers[layer];
  bool respect = layout_->profile.get(Switch::EnableInferenceMode) == sw::kRespect;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (ls.lora_a[a] < 0 || !registry_[ls.lora_a[a]].defined()) continue;
    bool rg = enabled && ((layer_active_[layer] >> a) & 1) && !(respect && ((inference_mode_ >> a) & 1));
    set_registered_rg(ls.lora_a[a], rg);
    set_registered_rg(ls.lora_b[a], rg);
  }
  layer_disabled_[layer] = !enabled;
}

// lora/layer.py::Linear.forward.
at::Tensor RealRank::layer_forward(int layer, const at::Tensor& h) {
  const LayerSpec& ls = layout_->layers[layer];
  if (ls.experts > 0) return experts_forward(layer, h);
  const at::Tensor& w = registered(ls.weight);
  const at::Tensor& b = registered(ls.bias);
  if (layer_disabled_[layer]) {
    if (!merged_[layer].empty()) layer_unmerge(layer);
    return at::linear(h, w, b);
  }
  if (!merged_[layer].empty()) return at::linear(h, w, b);
  at::Tensor y = at::linear(h, w, b);
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!((layer_active_[layer] >> a) & 1) || ls.lora_a[a] < 0 || !registry_[ls.lora_a[a]].defined()) continue;
    y = y + at::linear(at::linear(h, registered(ls.lora_a[a])), registered(ls.lora_b[a])) * lora_scaling(*layout_, static_cast<int>(a));
  }
  return y;
}

bool RealRank::any_merged() const {
  for (const auto& m : merged_)
    if (!m.empty()) return true;
  return false;
}

}  // namespace fsdpsim::real
