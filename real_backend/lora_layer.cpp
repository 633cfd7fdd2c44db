// LoRA layers on real tensors (peft/tuners/lora/layer.py::Linear,
// peft/tuners/tuners_utils.py::BaseTunerLayer): every edit hits whatever leaf
// the registry holds now, the shard S or the unsharded U.
#include "real_backend/lora_layer.hpp"
#include "real_backend/activation_dtype.hpp"

#include <algorithm>

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
  dora_norms_.assign(layout_->adapters.size(), DoraNorm{});
  replay_base_ = at::Tensor();
}

// W is registered as its DTensor shard: fully_shard manages it and its group is sharded.
bool LoraLayer::weight_on_shard() const {
  const int g = params_->group_of(spec().weight);
  return dtensor_->prepared() && g >= 0 && dtensor_->group_sharded(g);
}

const LoraLayer::DoraNorm* LoraLayer::dora_norm(int adapter) const {
  return adapter < static_cast<int>(dora_norms_.size()) && dora_norms_[adapter].norm.defined() ? &dora_norms_[adapter] : nullptr;
}

void LoraLayer::set_adapter_requires_grad(int adapter, bool rg) {
  for (int p : spec().adapter_params(adapter)) params_->set_requires_grad(p, rg);
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
  // variants.py::DoraLinearVariant builds its new weight out of place: no in-place placement rule.
  if (sign != 0 && spec().lora_m[adapter] < 0) dtensor_->check_inplace_placement(index_, adapter, sign > 0);
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
  if (spec().lora_m[adapter] >= 0) dora_merge(adapter);
  else apply_delta(get_delta_weight(adapter, +1), true);
  merged.push_back(adapter);
}

// layer.py::Linear._unmerged_base_weight: unmerge every merged adapter, copy W, merge them again
// in their order; the copy is what a DoRA merge takes its weight norm from.
at::Tensor LoraLayer::unmerged_base_weight(const std::function<void()>& inside) {
  if (replay_base_.defined() || merged.empty()) {
    if (inside) inside();
    if (replay_base_.defined()) return replay_base_;
  }
  const std::vector<int> was = merged;
  struct Drop {
    at::Tensor& t;
    ~Drop() { t = at::Tensor(); }
  } drop{replay_base_};
  // the `finally`: merge(adapter_names=to_merge) of those actually unmerged, in order, also after
  // an unmerge that raised (a DoRA norm cached off the shard meeting U), before the raise goes on
  const auto merge_again = [&]() {
    for (int a : was)
      if (std::find(merged.begin(), merged.end(), a) == merged.end()) merge(a);
  };
  try {
    if (!was.empty()) unmerge();
  } catch (const OpError&) {
    merge_again();
    throw;
  }
  replay_base_ = params_->registered(spec().weight).detach().clone();
  const at::Tensor base = replay_base_;
  if (inside && !was.empty()) inside();  // the `with` body, before the `finally`'s re-merge
  merge_again();
  return base;
}

// variants.py::DoraLinearVariant.merge_unsafe: the norm of each row of the unmerged base weight plus
// the delta (scaling 1: the delta holds it), cached; W.data = (magnitude / norm) * (W + delta). On
// the sharded DTensor parameter that assignment is lost (torch 2.13): the shard keeps its values,
// though get_delta_weight's all-gather of A ran, and so are the replay's (its unmerges' and re-merges'
// all-gathers are issued on the shard as on U).
void LoraLayer::dora_merge(int adapter) {
  at::NoGradGuard ng;
  const LayerSpec& ls = spec();
  const at::Tensor d = get_delta_weight(adapter, +1);
  const bool on_shard = weight_on_shard();
  const bool few = on_shard && few_rows();
  const at::Tensor w = params_->registered(ls.weight).variable_data();
  const at::Tensor base = few ? unmerged_base_weight([&] { few_rows_weight_norm(adapter, d); }) : unmerged_base_weight();
  if (few) {
    few_rows_factor(adapter);
    few_rows_weight_plus_delta(adapter, d);
  }
  if (on_shard) {
    // a norm off the shard is never read (its unmerge is lost too), only where it was taken; DTensor
    // takes it whatever the delta's placement, which this rank's rows alone (none, with fewer rows
    // than ranks) need not broadcast with
    dora_norms_[adapter] = {at::zeros({0}), true};
    return;
  }
  at::Tensor norm;
  try {
    norm = at::linalg_vector_norm(base + d, 2, {1}).detach();
  } catch (const c10::Error& e) {
    throw OpError(Status::ShapeError, first_line(e.what_without_backtrace()));
  }
  dora_norms_[adapter] = {norm, false};
  const at::Tensor factor = params_->registered(ls.lora_m[adapter]).detach() / norm;
  w.copy_(factor.view({-1, 1}) * (w + d));
}

// model/machine/lora_layer.cpp::dora_few_rows: a DoRA merge or unmerge on a weight of fewer rows than
// ranks redistributes W and the magnitude (neither can stay Shard(0)); beside a Partial delta
// (r >= world) W moves to Shard(1), the delta is reduce-scattered there, and the norm over dim 1 is
// Partial until the factor all-reduces it. What they compute goes with the lost assignment.
bool LoraLayer::few_rows() const { return layout_->world > 1 && layout_->params[spec().weight].rows < layout_->world; }

bool LoraLayer::partial_delta(int adapter) const { return layout_->params[spec().lora_a[adapter]].rows >= layout_->world; }

// `W + delta` (get_weight_norm's, then merge's `W.data + delta`): W and this rank's Shard(1) columns
// of the delta, or the replicated W beside a replicated delta.
at::Tensor LoraLayer::few_rows_weight_plus_delta(int adapter, const at::Tensor& d) {
  const LayerSpec& ls = spec();
  const ParamSpec& ws = layout_->params[ls.weight];
  if (!partial_delta(adapter)) return dtensor_->full_tensor(ls.weight) + d;
  const int64_t w = layout_->world, cols = (ls.in + w - 1) / w;
  // Shard(0) -> Shard(1) is an all_to_all gloo runs as an all-gather of the padded columns
  const at::Tensor mine = (*params_)[ls.weight].leaf.s.reshape({ws.chunk_rows, ws.cols}).to(at::kFloat);
  const at::Tensor padded = at::constant_pad_nd(mine, {0, cols * w - ls.in});
  const at::Tensor all = dtensor_->redistribute(padded, ws.group, ls.weight).view({w, ws.chunk_rows, cols * w});
  const int64_t rank = dtensor_->rank();
  const at::Tensor w_cols = all.narrow(2, rank * cols, cols).reshape({w * ws.chunk_rows, cols}).narrow(0, 0, ls.out);
  // the Partial delta's column blocks, one per rank, reduce-scattered: this rank's block summed
  const at::Tensor blocks = at::constant_pad_nd(d, {0, cols * w - ls.in}).view({ls.out, w, cols}).permute({1, 0, 2});
  const at::Tensor d_cols = dtensor_->reduce(CollOp::ReduceScatter, blocks.contiguous(), ws.group, ls.weight).view({ls.out, cols});
  return w_cols + d_cols;
}

void LoraLayer::few_rows_weight_norm(int adapter, const at::Tensor& d) {
  const at::Tensor sum = few_rows_weight_plus_delta(adapter, d);
  few_norm_sq_ = partial_delta(adapter) ? sum.pow(2).sum(1) : at::Tensor();  // a Partial norm, squared
}

// `magnitude / weight_norm`: the magnitude gathered; a Partial norm all-reduced (its squares summed).
void LoraLayer::few_rows_factor(int adapter) {
  const LayerSpec& ls = spec();
  dtensor_->full_tensor(ls.lora_m[adapter]);
  if (!partial_delta(adapter)) return;
  const at::Tensor sq = few_norm_sq_.defined() ? few_norm_sq_ : at::zeros({ls.out});
  dtensor_->reduce(CollOp::AllReduce, sq, layout_->params[ls.weight].group, ls.lora_m[adapter]);
}

// variants.py::DoraLinearVariant.unmerge: W.data = W / (magnitude / cached norm) - delta. A norm cached
// off the shard meeting a plain U (or the reverse) is DTensor's mixed-tensor error, raised after
// get_delta_weight's reads; the shard's assignment is lost.
void LoraLayer::dora_unmerge(int adapter) {
  at::NoGradGuard ng;
  const LayerSpec& ls = spec();
  const at::Tensor d = get_delta_weight(adapter, -1);
  const bool on_shard = weight_on_shard();
  DoraNorm cached = dora_norms_[adapter];
  dora_norms_[adapter] = DoraNorm{};  // _cache_pop
  if (!cached.norm.defined()) throw OpError(Status::KeyError, "KeyError: '" + layout_->adapters[adapter].name + "-weight_norm'");
  if (cached.on_shard != on_shard) throw OpError(Status::Exception, DTensor::mixed_tensor_error("div.Tensor"));
  if (on_shard && few_rows()) {  // `W / (magnitude / norm) - delta`: the factor, then W alone
    few_rows_factor(adapter);
    dtensor_->full_tensor(ls.weight);
  }
  if (on_shard) return;
  const at::Tensor w = params_->registered(ls.weight).variable_data();
  const at::Tensor factor = params_->registered(ls.lora_m[adapter]).detach() / cached.norm;
  w.copy_(w / factor.view({-1, 1}) - d);
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
    if (spec().lora_m[adapter] >= 0) dora_unmerge(adapter);
    else apply_delta(get_delta_weight(adapter, -1), false);
  }
}

void LoraLayer::set_adapter(AdapterSet names, bool inference_mode) {
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!holds(static_cast<int>(a))) continue;
    set_adapter_requires_grad(static_cast<int>(a), names.contains(static_cast<int>(a)) && !inference_mode);
  }
  active = names;
}

// inference_mode ignored upstream (#3447); honoured when patched (#3453).
void LoraLayer::enable_adapters(bool enabled, AdapterSet inference_mode) {
  bool respect = layout_->profile.get(Switch::EnableInferenceMode) == sw::kRespect;
  for (size_t a = 0; a < layout_->adapters.size(); ++a) {
    if (!holds(static_cast<int>(a))) continue;
    set_adapter_requires_grad(static_cast<int>(a), enabled && active.contains(static_cast<int>(a)) && !(respect && inference_mode.contains(static_cast<int>(a))));
  }
  disabled = !enabled;
}

// The layer's own set_adapter (its active adapters, the new config's inference_mode); a new
// LoRA layer is active on the new adapter, frozen (lora/model.py::LoraModel._create_and_replace).
void LoraLayer::update_layer(int adapter, bool inference_mode) {
  if (tuner) return set_adapter(active, inference_mode);
  tuner = true;
  set_adapter(AdapterSet::of(adapter), inference_mode);
  set_adapter_requires_grad(adapter, false);
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
    if (ls.lora_m[a] >= 0) {
      y = y + dora_forward(h, static_cast<int>(a), y);
      continue;
    }
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
    if (ls.lora_m[a] >= 0) {
      y = y + dora_forward(x, static_cast<int>(a), y);
      continue;
    }
    y = y + ckpt_->linear(ckpt_->linear(x, x.scalar_type(), ls.lora_a[a]), x.scalar_type(), ls.lora_b[a]) *
                lora_scaling(*layout_, static_cast<int>(a));
  }
  return y.to(result_dtype);
}

void LoraLayer::activate_lora() { experts_.activate_lora(*this); }

}  // namespace fsdpsim::real

namespace fsdpsim::real {

// peft 0.21.2 variants.py::DoraLinearVariant.forward -> dora.py::DoraLinearLayer.forward (dropout
// off: base_result is the running result): lora_weight = lora_B(lora_A(eye)).T, the base weight's
// row norms with it added (detached), mag_norm_scale = magnitude / norm, and the term
// (mag_norm_scale - 1) * (result - bias) + mag_norm_scale * lora_B(lora_A(x)) * scaling.
// Under a policy every operand is read in its forward dtype and the term in x's.
at::Tensor LoraLayer::dora_forward(const at::Tensor& x, int adapter, const at::Tensor& result) {
  const LayerSpec& ls = spec();
  const bool mp = layout_->mixed_precision;
  const at::ScalarType dt = x.scalar_type();
  const float scale = lora_scaling(*layout_, adapter);
  const auto read = [&](int p) { return mp ? params_->registered(p).to(params_->forward_dtype(p)) : params_->registered(p); };
  const at::Tensor eye = at::eye(ls.in, at::TensorOptions().dtype(mp ? params_->forward_dtype(ls.lora_a[adapter]) : at::kFloat));
  const at::Tensor lora_weight = ckpt_->linear(ckpt_->linear(eye, eye.scalar_type(), ls.lora_a[adapter]), eye.scalar_type(), ls.lora_b[adapter]).t().to(dt);
  at::Tensor norm;
  {
    at::NoGradGuard ng;
    const at::Tensor weight = read(ls.weight).to(dt);
    norm = at::linalg_vector_norm(weight + scale * lora_weight.detach(), 2, {1}).to(dt).detach();
  }
  const at::Tensor mag_norm_scale = (read(ls.lora_m[adapter]) / norm).view({1, -1});
  const at::Tensor lora_result = ckpt_->linear(ckpt_->linear(x, dt, ls.lora_a[adapter]), dt, ls.lora_b[adapter]);
  at::Tensor base_result = result;
  if (ls.bias >= 0) base_result = base_result - read(ls.bias);
  return (mag_norm_scale - 1) * base_result + mag_norm_scale * lora_result * scale;
}

}  // namespace fsdpsim::real
