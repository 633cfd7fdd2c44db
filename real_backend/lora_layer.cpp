// LoRA layers on real tensors (peft/tuners/lora/layer.py::Linear,
// peft/tuners/tuners_utils.py::BaseTunerLayer): every edit hits whatever leaf
// the registry holds now, the shard S or the unsharded U.
#include "real_backend/lora_layer.hpp"
#include "real_backend/activation_dtype.hpp"

#include <ATen/core/grad_mode.h>

#include "real_backend/op_raised.hpp"
#include "real_backend/values.hpp"

namespace fsdpsim::real {

LoraLayer::LoraLayer(const Layout& layout, int index, Parameters& params, DTensor& dtensor, CheckpointWrapper& ckpt, ProcessGroup& pg)
    : layout_(&layout), index_(index), params_(&params), dtensor_(&dtensor), ckpt_(&ckpt), experts_(layout, index, params, dtensor, pg) {}

void LoraLayer::reset() {
  active = AdapterSet::of(0);
  merged.clear();
  disabled = false;
  tuner = false;
}

bool LoraLayer::holds(int adapter) const {
  const int p = spec().lora_a[adapter];
  return p >= 0 && params_->registered(p).defined();
}

// lora/layer.py::Linear / ParamWrapper.get_delta_weight, with the upstream error order of
// merge (sign +1) and unmerge (-1) in this one place: DTensor's refusal of a plain delta into
// W's shard, then the delta's own errors (ParamWrapper's), then the in-place
// placement rule of `W.data += delta`. Sign 0 (the delta_weight op) is the delta alone.
at::Tensor LoraLayer::get_delta_weight(int adapter, int sign, DeltaForm* form) {
  at::NoGradGuard ng;
  if (sign != 0) dtensor_->check_mixed(index_, adapter, sign > 0);
  at::Tensor d = spec().experts > 0 ? experts_.get_delta_weight(adapter, true) : linear_delta(adapter, form);
  if (sign != 0) dtensor_->check_inplace_placement(index_, adapter, sign > 0);
  return d;
}

at::Tensor LoraLayer::delta_value(int adapter, DeltaValue* got) {
  const LayerSpec& ls = spec();
  got->shape = {ls.out, ls.in};  // Linear's B @ A; an experts layer says its own
  return ls.experts > 0 ? experts_.get_delta_weight(adapter, false, got) : get_delta_weight(adapter, 0, &got->form);
}

// lora/layer.py::Linear.get_delta_weight: B @ A * scaling from the registered A
// and B. On a sharded layer (DTensors) the matmul all-gathers A and yields this
// rank's rows of the delta, matching W's shard.
at::Tensor LoraLayer::linear_delta(int adapter, DeltaForm* form) {
  DeltaForm unused;
  if (!form) form = &unused;
  at::NoGradGuard ng;
  const LayerSpec& ls = spec();
  int pa = ls.lora_a[adapter], pb = ls.lora_b[adapter], pw = ls.weight;
  float scale = lora_scaling(*layout_, adapter);
  const ParamSpec& a_spec = layout_->params[pa];
  bool w_sharded = dtensor_->group_sharded(layout_->params[pw].group);
  bool a_managed = params_->group_of(pa) >= 0;
  if (a_managed && dtensor_->group_sharded(a_spec.group)) {
    if (layout_->world > 1 && layout_->params[pw].rows < layout_->world) return dtensor_->matmul_few_rows(index_, adapter, form);
    *form = kDeltaChunk;
    return at::matmul((*params_)[pb].leaf.s, dtensor_->full_tensor(pa)) * scale;  // B's rows line up with W's shard
  }
  at::Tensor d = at::matmul(params_->registered(pb), params_->registered(pa)) * scale;
  *form = w_sharded ? kDeltaChunk : kDeltaFull;
  if (!w_sharded) return d;
  return dtensor_->chunk_of(std::vector<float>(d.data_ptr<float>(), d.data_ptr<float>() + d.numel()), layout_->params[pw]);
}

// lora/layer.py::Linear.merge: W.data += delta for each adapter not yet merged.
void LoraLayer::merge(int adapter) {
  if (!holds(adapter)) return;
  for (int m : merged)
    if (m == adapter) return;
  apply_delta(get_delta_weight(adapter, +1), true);
  merged.push_back(adapter);
}

// W.data += delta (merge) or -= delta (unmerge) on the registered weight;
// libtorch raises when a delta does not fit it (ParamWrapper's local-rows delta).
void LoraLayer::apply_delta(const at::Tensor& d, bool add) {
  at::Tensor w = params_->registered(spec().weight).variable_data();
  try {
    if (add) w.add_(d);
    else w.sub_(d);
  } catch (const c10::Error& e) {
    throw OpError(Status::ShapeError, first_line(e.what_without_backtrace()));  // what() symbolizes a backtrace: slow
  }
}

// lora/layer.py::Linear.unmerge: pop every merged adapter, LIFO, W.data -= delta
// (the pop comes first: a delta that raises leaves the adapter unlisted).
void LoraLayer::unmerge() {
  while (!merged.empty()) {
    int adapter = merged.back();
    merged.pop_back();
    apply_delta(get_delta_weight(adapter, -1), false);
  }
}

void LoraLayer::set_adapter(AdapterSet names, bool inference_mode) {
  const LayerSpec& ls = spec();
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!holds(static_cast<int>(a))) continue;
    bool rg = names.contains(static_cast<int>(a)) && !inference_mode;
    params_->set_requires_grad(ls.lora_a[a], rg);
    params_->set_requires_grad(ls.lora_b[a], rg);
  }
  active = names;
}

// inference_mode ignored upstream (#3447); honoured when patched (#3453).
void LoraLayer::enable_adapters(bool enabled, AdapterSet inference_mode) {
  const LayerSpec& ls = spec();
  bool respect = layout_->profile.get(Switch::EnableInferenceMode) == sw::kRespect;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!holds(static_cast<int>(a))) continue;
    bool rg = enabled && active.contains(static_cast<int>(a)) && !(respect && inference_mode.contains(static_cast<int>(a)));
    params_->set_requires_grad(ls.lora_a[a], rg);
    params_->set_requires_grad(ls.lora_b[a], rg);
  }
  disabled = !enabled;
}

// The layer's own set_adapter (its active adapters, the new config's inference_mode); a new
// LoRA layer is active on the new adapter, frozen (lora/model.py::LoraModel._create_and_replace).
void LoraLayer::update_layer(int adapter, bool inference_mode) {
  if (tuner) return set_adapter(active, inference_mode);
  tuner = true;
  set_adapter(AdapterSet::of(adapter), inference_mode);
  params_->set_requires_grad(spec().lora_a[adapter], false);
  params_->set_requires_grad(spec().lora_b[adapter], false);
}

void LoraLayer::delete_adapter(int adapter) {
  if (!active.contains(adapter)) return;
  AdapterSet next = active.without(AdapterSet::of(adapter));
  if (next.empty()) {
    int best = -1;  // _all_available_adapter_names()[0]
    for (size_t a = 0; a < layout_->adapters.size(); ++a)
      if (holds(static_cast<int>(a)) && (best < 0 || layout_->adapters[a].name < layout_->adapters[best].name))
        best = static_cast<int>(a);
    next = best < 0 ? AdapterSet() : AdapterSet::of(best);
  }
  set_adapter(next, false);
}

at::Tensor LoraLayer::forward(const at::Tensor& h, at::Tensor* base_out) {
  const LayerSpec& ls = spec();
  if (disabled && !merged.empty()) unmerge();
  if (ls.experts > 0) {
    // a wrapper made around a child group's FSDP module: FSDP's casts wrap the module's call
    const GroupSpec& gs = layout_->groups[ls.group];
    const bool base_hooks = layout_->mixed_precision && ls.lora_after_fsdp && !gs.is_root;
    at::Tensor y = experts_.forward(*this, base_hooks ? fsdp_cast_in(gs, h) : h);
    if (base_out) *base_out = y;
    return base_hooks ? fsdp_cast_out(gs, y) : y;
  }
  if (layout_->mixed_precision) return forward_cast(h, base_out);
  at::Tensor y = ckpt_->linear(h, params_->param_dtype(ls.weight), ls.weight, ls.bias);
  if (base_out) *base_out = y;
  if (disabled || !merged.empty()) return y;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!active.contains(static_cast<int>(a)) || !holds(static_cast<int>(a))) continue;
    // PEFT casts the input to lora_A's dtype (lora/layer.py::Linear.forward, _cast_input_dtype).
    const at::ScalarType dt = params_->param_dtype(ls.lora_a[a]);
    y = y + ckpt_->linear(ckpt_->linear(h, dt, ls.lora_a[a]), dt, ls.lora_b[a]) * lora_scaling(*layout_, static_cast<int>(a));
  }
  return y;
}

// peft 0.21.2 lora/layer.py::Linear.forward with the activation in its real dtype: the base layer
// first (a LoRA layer made around a child group's FSDP module: FSDP's casts wrap that call alone,
// _fsdp_state.py::FSDPState._pre_forward / _post_forward, its hook on the uncast output), then per
// active adapter `x = self._cast_input_dtype(x, lora_A.weight.dtype)` and lora_B(lora_A(x)) added,
// the sum cast back to the base output's dtype.
at::Tensor LoraLayer::forward_cast(const at::Tensor& h, at::Tensor* base_out) {
  const LayerSpec& ls = spec();
  const GroupSpec& gs = layout_->groups[ls.group];
  const bool base_hooks = ls.lora_after_fsdp && !gs.is_root;
  at::Tensor y = ckpt_->linear(base_hooks ? fsdp_cast_in(gs, h) : h, h.scalar_type(), ls.weight, ls.bias);
  if (base_out) *base_out = y;
  if (base_hooks) y = fsdp_cast_out(gs, y);
  if (disabled || !merged.empty()) return y;
  const at::ScalarType result_dtype = y.scalar_type();
  at::Tensor x = h;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!active.contains(static_cast<int>(a)) || !holds(static_cast<int>(a))) continue;
    x = x.to(params_->forward_dtype(ls.lora_a[a]));
    y = y + ckpt_->linear(ckpt_->linear(x, x.scalar_type(), ls.lora_a[a]), x.scalar_type(), ls.lora_b[a]) *
                lora_scaling(*layout_, static_cast<int>(a));
  }
  return y.to(result_dtype);
}

void LoraLayer::activate_lora() { experts_.activate_lora(*this); }

}  // namespace fsdpsim::real
