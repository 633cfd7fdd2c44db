// LoRA layer behaviour (peft/tuners/lora/layer.py::Linear and
// peft/tuners/tuners_utils.py::BaseTunerLayer). Every edit lands on whichever
// object the module holds now: the shard S, or FSDP's temporary copy U. The stored and
// registered weights' classes (what the observation reports) follow (RankModel's).
#include "model/machine/activation_dtype.hpp"
#include "model/machine/modules_to_save.hpp"
#include "model/machine/param_wrapper.hpp"
#include "model/machine/provenance.hpp"

namespace fsdpsim {

void WeightContent::add(int adapter, DeltaId version, int sign) {
  if (version == kZeroDelta) return;  // adding or subtracting zero changes nothing
  int8_t& c = coeff[adapter];
  if (c != 0 && ver[adapter] != version) {
    corrupt = true;  // +delta(v1) - delta(v2): not W0 plus any set of current deltas
    return;
  }
  c = static_cast<int8_t>(c + sign);
  ver[adapter] = c == 0 ? 0 : version;
}

// The delta B @ A * scaling is recomputed from the current A and B at every
// merge and unmerge (lora/layer.py::Linear.get_delta_weight); nothing is cached.
DeltaId LoraLayer::delta_version(const LayerPort& c, int adapter) const {
  const LayerInfo& li = c.own.info();
  auto ver = [&](int p) { return c.own.params[p].registered_version(c.own.is_registered_u(p)); };
  return c.dtensor.delta_id(adapter, ver(li.A[adapter]), ver(li.B[adapter]), li.M[adapter] >= 0 ? ver(li.M[adapter]) : 0);
}

WeightContent& LoraLayer::registered_weight(const LayerPort& c) const {
  const int w = c.own.info().weight;
  return c.own.params[w].registered_weight(c.own.is_registered_u(w));
}

void LoraLayer::edit_registered(const LayerPort& c, int adapter, DeltaId d, int sign) const {
  const int w = c.own.info().weight;
  registered_weight(c).add(adapter, d, sign);
  if (c.own.is_registered_u(w)) c.own.params[w].u_edit[adapter] = static_cast<int8_t>(c.own.params[w].u_edit[adapter] + sign);
}

Raise LoraLayer::merge(const LayerPort& c, int adapter) {
  const int a = c.own.info().A[adapter];
  if (a < 0 || !c.own.params[a].present) return {};  // the layer does not hold the adapter's tensors
  if (is_merged(adapter)) return {};  // "Already following adapters were merged"
  if (Raise r = get_delta_weight(c, adapter, +1)) return r;
  push_merged(adapter);
  return {};
}

Raise LoraLayer::unmerge(const LayerPort& c) {
  while (any_merged())
    if (Raise r = get_delta_weight(c, pop_merged(), -1)) return r;
  return {};
}

// The copy is cached only once the unmerge returned, so a re-merge after a raising unmerge replays
// again for its DoRA adapters; the `finally`'s merge stops at its first raise, which then goes on.
Raise LoraLayer::unmerged_base_weight(const LayerPort& c, const std::function<void()>& inside) {
  if (replay_cached || !any_merged()) {
    if (inside) inside();
    return {};
  }
  const auto was = merged;
  const int n_was = n_merged;
  Raise raised = unmerge(c);
  replay_cached = !raised;
  if (!raised && inside) inside();  // the `with` body: what reads the copy, before the re-merge
  Raise again;
  for (int i = 0; i < n_was && !again; ++i)
    if (!is_merged(was[i])) again = merge(c, was[i]);
  replay_cached = false;
  return again ? std::move(again) : std::move(raised);
}


// tuners_utils.py::BaseTunerLayer.set_adapter: requires_grad = (a in names) and
// not inference_mode on every adapter's A and B, through
// utils/other.py::_set_layer_requires_grad (which only sees registered objects).
void LoraLayer::set_adapter(const LayerPort& c, AdapterSet names, bool inference_mode) {
  const LayerInfo& li = c.own.info();
  for (int a = 0; a < c.own.topo.n_adapters(); ++a) {
    if (li.A[a] < 0 || !c.own.params[li.A[a]].present) continue;
    bool rg = names.contains(a) && !inference_mode;
    for (int p : li.tensors(a)) c.own.set_registered_rg(p, rg);
  }
  active = names;
}

// lora/layer.py::LoraLayer.update_layer (the adapter injected here) ends with the layer's own
// set_adapter(its active adapters, the new config's inference_mode); a new LoRA layer is active
// on the new adapter, frozen (lora/model.py::LoraModel._create_and_replace).
void LoraLayer::update_layer(const LayerPort& c, int adapter, bool inference_mode) {
  if (tuner) return set_adapter(c, active, inference_mode);
  tuner = true;
  set_adapter(c, AdapterSet::of(adapter), inference_mode);
  for (int p : c.own.info().tensors(adapter)) c.own.set_registered_rg(p, false);
}

// tuners_utils.py::BaseTunerLayer.enable_adapters: disabling freezes every
// adapter (no unmerge); enabling calls the layer's set_adapter(active), which
// ignores inference_mode upstream (#3447) and honours it when patched (#3453).
// A ModulesToSaveWrapper has its own (ModulesToSaveWrapper::enable_adapters).
void LoraLayer::enable_adapters(const LayerPort& c, bool enabled, AdapterSet inference_mode) {
  if (wrapper) return ModulesToSaveWrapper(c.own, c.scope.prov, *this).enable_adapters(enabled);
  const LayerInfo& li = c.own.info();
  if (!enabled) {
    for (int a = 0; a < c.own.topo.n_adapters(); ++a) {
      if (li.A[a] < 0 || !c.own.params[li.A[a]].present) continue;
      for (int p : li.tensors(a)) c.own.set_registered_rg(p, false);
    }
    disabled = true;
    return;
  }
  TrScope scope(c.scope, Tr::EnableAdapters);
  bool respect = c.own.topo.profile.get(Switch::EnableInferenceMode) == sw::kRespect;
  for (int a = 0; a < c.own.topo.n_adapters(); ++a) {
    if (li.A[a] < 0 || !c.own.params[li.A[a]].present) continue;
    bool rg = active.contains(a) && !(respect && inference_mode.contains(a));
    for (int p : li.tensors(a)) c.own.set_registered_rg(p, rg);
  }
  disabled = false;
}

// lora/layer.py::Linear.forward: disabled and merged -> unmerge first, base
// only; merged -> base only; otherwise base plus every active adapter.
// Records which registered objects autograd will give a gradient. Returns
// a Raise when the forward raised (an E == 1 ParamWrapper, below).
// peft lora/layer.py::Linear.forward: `result = result + lora_B(lora_A(x)) * scaling` for each
// active adapter, unless disabled or merged (then the base output is the layer's output).
bool LoraLayer::adds_output(const LayerPort& c) const { return tuner && !disabled && !any_merged() && active_count(c) > 0; }

// The layer's active adapters that it holds (lora_A has them).
int LoraLayer::active_count(const LayerPort& c) const {
  const LayerInfo& li = c.own.info();
  int n = 0;
  for (int a : active) n += li.A[a] >= 0 && c.own.params[li.A[a]].present;
  return n;
}

namespace {
// The dtype a forward reads a parameter in: U's (the policy's param_dtype cast) while U is
// registered, else the plain parameter's or shard's own.
DType forward_dtype(const LayerParams& c, int p) { return c.is_registered_u(p) ? c.params[p].gathered_dtype() : c.params[p].dtype; }

// F.linear(x, weight, bias) on the activation's dtype `x`: torch's dtype error, else "".
std::string linear_error(const LayerParams& c, DType x, int weight, int bias) {
  return linear_dtype_error(x, forward_dtype(c, weight), bias >= 0 ? std::optional<DType>(forward_dtype(c, bias)) : std::nullopt);
}
}  // namespace

Raise LoraLayer::forward(const LayerPort& c, std::vector<uint8_t>& graph_grad, bool grad_enabled, bool* path_rg, DType* act) {
  const LayerInfo& li = c.own.info();
  auto use = [&](int p) {
    if (p < 0 || !c.own.registered_rg(p)) return;  // p < 0: a ParamWrapper target has no bias
    *path_rg = true;
    if (grad_enabled) graph_grad[p] = 1;
  };
  // A LoRA layer made around the FSDP module (a child group's layer): FSDP's casts wrap the
  // base layer's call alone (_fsdp_state.py::FSDPState._pre_forward / _post_forward).
  const GroupInfo& gi = c.own.topo.groups[li.group];
  const bool base_hooks = li.lora_after_fsdp && !gi.is_root;
  // The base layer's call: nn.Linear's F.linear, or the experts' einsum (session Experts.forward);
  // its output has the input's dtype.
  auto base = [&]() -> Raise {
    const DType x = base_hooks ? fsdp_cast_in(gi, *act) : *act;
    DType y = x;
    // bitsandbytes/nn/modules.py::Linear4bit.forward casts its bias to the input's dtype and the
    // dequantized product back to it: a 4-bit base raises no dtype error and keeps x's dtype.
    const std::string err = li.quant          ? std::string()
                            : li.experts > 0 ? einsum_dtype_error(x, forward_dtype(c.own, li.weight), li.fan_in, li.fan_out, &y)
                                             : linear_error(c.own, x, li.weight, li.bias);
    if (!err.empty()) return c.raise(Status::Exception, err);
    *act = base_hooks ? fsdp_cast_out(gi, y) : y;
    return {};
  };
  // other.py::AuxiliaryTrainingWrapper.forward: the running adapter's copy, else original_module.
  if (wrapper && !disabled && copy_active >= 0 && trains.contains(copy_active)) {
    use(li.SW[copy_active]);
    use(li.SB[copy_active]);
    const std::string err = linear_error(c.own, *act, li.SW[copy_active], li.SB[copy_active]);
    return err.empty() ? Raise{} : c.raise(Status::Exception, err);
  }
  use(li.weight);
  use(li.bias);
  if (wrapper) return base();
  if (disabled) {
    // U is registered here (the group's pre_forward ran), so the unmerge reads no shard and cannot raise.
    TrScope scope(c.scope, Tr::DisabledForwardUnmerge);
    if (any_merged())
      if (Raise r = unmerge(c)) return r;
    return base();
  }
  if (any_merged()) return base();
  // lora/layer.py::Linear.forward calls the base layer first; ParamWrapper.forward activates
  // its adapters (_activate_lora) around the base layer's call.
  if (li.experts == 0)
    if (Raise r = base()) return r;
  DType x = *act;  // Linear.forward's `x`, recast per adapter
  for (int a : active) {
    if (li.A[a] < 0 || !c.own.params[li.A[a]].present) continue;
    // peft 0.21.2 lora/layer.py::ParamWrapper._activate_lora: with E == 1 (single_expert_delta=linear) it sums
    // get_delta_weight (Linear's (out, in) delta) and registers W + delta as the
    // parametrization of the (1, in, out) weight: torch's broadcasting error.
    if (li.experts == 1 && c.own.topo.profile.get(Switch::SingleExpertDelta) != sw::kParamLayout) {
      std::string err = ParamWrapper::one_expert_add_error(c, a, false);
      if (!err.empty()) return c.raise(Status::ShapeError, err);
    }
    use(li.A[a]);
    use(li.B[a]);
    // variants.py::DoraLinearVariant.forward: the magnitude scales the output, so it gets a gradient.
    use(li.M[a]);
    if (li.experts > 0) continue;
    // Linear.forward: `x = self._cast_input_dtype(x, lora_A.weight.dtype)`, then
    // lora_B(lora_A(x)) (both without bias); the sum is cast back to the base output's dtype.
    x = forward_dtype(c.own, li.A[a]);
    const std::string err = linear_dtype_error(x, forward_dtype(c.own, li.B[a]), std::nullopt);
    if (!err.empty()) return c.raise(Status::Exception, err);
  }
  if (li.experts > 0) return base();
  return {};
}

// peft/tuners/lora/bnb.py::Linear4bit.merge / unmerge after fully_shard: dequantize_bnb_weight reads the
// weight's own quant_state, which a weight fully_shard manages no longer carries (the DTensor shard, or
// the plain unsharded Parameter); a weight accelerate left whole (ignored_params) dequantizes, and the
// delta of DTensor factors cannot be added to (subtracted from) it. Measured on torch 2.13, world 2.
// With plain factors (an adapter added after prepare, or U registered) the merge requantizes.
// variants.py::DoraLinearVariant.merge_unsafe / unmerge on a weight of fewer rows than ranks, after
// get_delta_weight's gathers: neither W nor the magnitude can stay Shard(0) (torch 2.13
// _ops/utils.py::is_tensor_shardable). Beside a replicated delta (r < world) W and the magnitude are
// gathered where they meet it. A Partial delta (r >= world) meets W as Shard(1): W moves there
// (_redistribute.py's Shard(0) -> Shard(1), an all_to_all gloo runs as an all-gather of W's padded
// columns) and the delta is reduce-scattered; the norm over dim 1 of Shard(1) is Partial, all-reduced
// where the factor divides the gathered magnitude by it (at the merge, and at the unmerge, which
// reads the cached Partial norm); the unmerge's `W / factor - delta` gathers W alone. Measured on
// torch 2.13 gloo (worlds 3 and 4, 2-3 rows, r 1-5).
Raise LoraLayer::dora_few_rows(const LayerPort& c, int adapter, int sign,
                               const std::function<Raise(const std::function<void()>&)>& norm) {
  DTensor dt = c.dtensor;
  const LayerInfo& li = c.own.info();
  const int layer = c.own.layer;
  const int64_t w = c.own.topo.world;
  const bool partial = c.own.topo.adapters[adapter].r >= w;
  const auto weight_plus_delta = [&]() {  // get_weight_norm's `W + delta`, merge's `W.data + delta`
    if (!partial) return dt.all_gather(li.weight, CollRecord::kNowhere, layer, adapter);
    const int64_t cols = (li.fan_in + w - 1) / w * w;
    dt.all_gather(li.weight, CollRecord::kNowhere, layer, adapter, 0, cols);
    dt.reduce(CollOp::ReduceScatter, li.weight, li.fan_out * cols);
  };
  const auto factor = [&]() {  // `magnitude / weight_norm`
    dt.all_gather(li.M[adapter], CollRecord::kNowhere, layer, adapter);
    if (partial) dt.reduce(CollOp::AllReduce, li.M[adapter], li.fan_out);
  };
  if (sign < 0) {
    factor();
    dt.all_gather(li.weight, CollRecord::kNowhere, layer, adapter);
    return {};
  }
  if (Raise r = norm(weight_plus_delta)) return r;
  factor();
  weight_plus_delta();
  return {};
}

Raise LoraLayer::quant_merge_raise(const LayerPort& c, int adapter, int sign, bool sharded_read) {
  const int w = c.own.info().weight;
  // A weight left on meta (a RAM-efficient rank > 0) was never quantized: a float that fully_shard took.
  if (c.dtensor.group_of(w) >= 0 || c.own.params[w].device == Device::Meta)
    return c.raise(Status::Exception, std::string("AttributeError: '") + (c.own.is_registered_u(w) ? "Parameter" : "DTensor") +
                                          "' object has no attribute 'quant_state'");
  if (!sharded_read) {
    edit_registered(c, adapter, delta_version(c, adapter), sign);
    return {};
  }
  if (Raise r = get_delta_weight(c, adapter, 0)) return r;  // the delta: DTensor's gathers of the factors
  return c.raise(Status::Exception, DTensor::mixed_tensor_error(sign > 0 ? "add.Tensor" : "sub.Tensor"));
}

// lora/layer.py::Linear.get_delta_weight: B @ A on DTensors redistributes A
// (one all-gather of A); B's local rows meet W's local rows.
// lora/layer.py::ParamWrapper.get_delta_weight (E experts) reads
// lora_A[a].weight and lora_B[a].weight without calling the modules. Under
// FSDP2 (torch 2.13) a sharded group hands it DTensors, not local rows: the
// reshape / einsum redistribute A (one all-gather of A) and the delta is the
// full one; a merge's in-place add into the sharded weight redistributes once
// more (an all-gather the size of W's shard). The FSDP1 local-rows failure of
// #3080 does not happen. E == 1 takes Linear's path: a delta (out, in) for a
// weight stored (1, in, out). With delta_weight_gather on (the fix #3102
// proposed) A and B are gathered first (full_tensor) and the delta is laid out
// like the weight. sign: +1 merge, -1 unmerge, 0 delta only (the delta_weight op).
Raise LoraLayer::get_delta_weight(const LayerPort& c, int adapter, int sign, AdapterSet* corrupt_deltas) {
  const Topology& topo = c.own.topo;
  TrScope scope(c.scope, Tr::GetDeltaWeight);
  DTensor dt = c.dtensor;
  const int layer = c.own.layer;
  const LayerInfo& li = topo.layers[layer];
  const int a = li.A[adapter], b = li.B[adapter];
  const bool sharded_read = c.dtensor.group_of(a) >= 0 && !c.own.is_registered_u(a);
  if (li.quant && sign != 0 && c.own.prepared) return quant_merge_raise(c, adapter, sign, sharded_read);
  // variants.py::DoraLinearVariant.merge_unsafe / unmerge end with `orig_weight.data = new_weight`: on
  // the FSDP2 shard (a DTensor Parameter) that assignment is lost, the shard keeps its values
  // (measured on torch 2.13, world 2), though merged_adapters lists the adapter.
  const bool dora_lost = c.own.info().M[adapter] >= 0 && sharded_read;
  const CollRecord::Into into = sign != 0 && !dora_lost ? CollRecord::kIntoShard : CollRecord::kNowhere;
  const bool gather_fix = topo.profile.get(Switch::DeltaWeightGather) == sw::kOn;
  // An adapter added after prepare holds plain A and B while W is still a DTensor shard.
  const bool late_on_shard = c.own.prepared && c.dtensor.group_of(a) < 0 && c.dtensor.group_of(li.weight) >= 0 && !c.own.is_registered_u(li.weight);
  // delta_weight_gather=on lays a ParamWrapper's plain delta out like W (each rank slices its own
  // rows, no collective), so only a Linear's late delta still meets W's shard as a plain tensor.
  const bool late_distributed = late_on_shard && li.experts > 0 && gather_fix;
  if (sign != 0 && late_on_shard && !late_distributed) {
    // lora/layer.py Linear / ParamWrapper merge and unmerge: `param.data += delta` (`-=`) with
    // the plain delta of an adapter added after prepare into W's DTensor shard; DTensor checks
    // the mix before any shape.
    return c.raise(Status::Exception, DTensor::mixed_tensor_error(sign > 0 ? "add_.Tensor" : "sub_.Tensor"));
  }
  // variants.py::DoraLinearVariant.unmerge divides the magnitude by the norm its merge cached: a norm
  // taken off the DTensor shard meeting a plain U (or the reverse) is DTensor's mixed-tensor error,
  // raised after get_delta_weight's reads (measured on torch 2.13, worlds 1 and 2).
  const bool weight_shard = c.dtensor.group_of(li.weight) >= 0 && !c.own.is_registered_u(li.weight);
  const bool dora = li.M[adapter] >= 0 && sign != 0;
  const bool dora_mixed = dora && sign < 0 && dora_norm_on_shard.contains(adapter) != weight_shard;
  const auto dora_raise = [&]() { return c.raise(Status::Exception, DTensor::mixed_tensor_error("div.Tensor")); };
  // variants.py::DoraLinearVariant.merge_unsafe, after get_delta_weight's reads: the weight norm off
  // _unmerged_base_weight (the merged adapters taken out and merged again), then cached (_cache_store).
  const auto dora_norm = [&](const std::function<void()>& inside = {}) -> Raise {
    if (!dora || sign < 0) return {};
    if (Raise r = unmerged_base_weight(c, inside)) return r;
    const AdapterSet me = AdapterSet::of(adapter);
    dora_norm_on_shard = weight_shard ? dora_norm_on_shard | me : dora_norm_on_shard.without(me);
    return {};
  };
  if (li.experts > 0) return ParamWrapper::get_delta_weight(*this, c, adapter, sign, {sharded_read, late_distributed, into, gather_fix, corrupt_deltas});
  if (sharded_read && topo.world > 1 && li.fan_out < topo.world) {
    // Fewer rows than ranks: B @ A cannot keep B's Shard(0) (torch 2.13
    // distributed/tensor/_ops/utils.py::is_tensor_shardable). With r >= world B moves to
    // Shard(1) (one all-gather of B padded on dim 1, a Partial delta); else both are gathered.
    const int64_t w = topo.world, r = topo.adapters[adapter].r;
    if (r >= w) {
      const int64_t rows = (topo.params[b].dim0 + w - 1) / w;
      dt.all_gather(b, CollRecord::kNowhere, layer, adapter, 0, rows * ((r + w - 1) / w) * w);
    } else {
      dt.all_gather(b, CollRecord::kNowhere, layer, adapter);
      dt.all_gather(a, CollRecord::kNowhere, layer, adapter);
    }
    if (sign == 0) return {};  // the delta_weight op: the full delta, replicated or partial
    // DoRA's merge and unmerge build a new weight out of place (`dora_factor * (W + delta)`,
    // `W / dora_factor - delta`), which any placement allows; its assignment to the shard is lost.
    if (dora) return dora_mixed ? dora_raise() : dora_few_rows(c, adapter, sign, dora_norm);
    // _ops/utils.py::expand_to_full_mesh_op_strategy: `W.data += delta` (`-=` on unmerge) must keep
    // W's Shard(0), which no delta placement can reach: the in-place op raises.
    return c.raise(Status::Exception, DTensor::inplace_placement_error(sign));
  }
  if (sharded_read) {
    if (dora_lost && sign != 0 && c.scope.prov) {  // provenance: the edit W's shard never got (root_cause.cpp's S2 rule)
      TrScope lost(c.scope, Tr::DoraDataAssign);
      c.scope.prov->params[static_cast<size_t>(li.weight)].w_lost = c.scope.prov->stamp();
    }
    dt.all_gather(a, into, layer, adapter, dora_lost ? 0 : sign);  // a lost DoRA edit lands nowhere, at any world
    if (li.conv1d && sign != 0 && !dora && topo.world > 1) {
      // A Conv1D (weight (in, out), Shard(0) over its input rows): get_delta_weight's
      // transpose(fan_in_fan_out) makes B @ A's Shard(0) a Shard(1) delta, and `W.data += delta`
      // (`-=`) keeps W's Shard(0) (torch 2.13 _ops/utils.py::expand_to_full_mesh_op_strategy, an
      // in-place op), so DTensor moves the delta Shard(1) -> Shard(0) (placement_types.py::
      // Shard._to_new_shard_dim): on gloo one all-gather of its padded shard, (ceil(in / w) * w,
      // ceil(out / w)), then each rank keeps its rows (_collective_utils.py::shard_dim_alltoall).
      // The delta is B's dtype (peft lora/layer.py::Linear.get_delta_weight casts it back);
      // upstream's log names it after the weight, whose shard has its size. W's rows get every
      // rank's B rows: DTensor::full_b_delta.
      const int64_t w = topo.world, in = li.fan_in, out = li.fan_out;
      dt.all_gather(li.weight, CollRecord::kNowhere, layer, adapter, 0, (in + w - 1) / w * w * ((out + w - 1) / w),
                    c.own.params[b].dtype);
    }
    return dora_mixed ? dora_raise() : dora_norm();
  }
  if (dora_mixed) return dora_raise();
  if (Raise r = dora_norm()) return r;
  if (sign == 0) return {};
  WeightContent& w = registered_weight(c);
  const DeltaId d = delta_version(c, adapter);
  // variants.py::DoraLinearVariant.unmerge: W / dora_factor - delta undoes the merge only where W holds
  // it; on a W without it (a merge a reshard dropped) the division leaves neither W0 nor W0 + delta.
  if (dora && sign < 0 && w.coeff[adapter] <= 0 && d != kZeroDelta) {
    w.corrupt = true;
    if (c.own.is_registered_u(li.weight)) c.own.params[li.weight].u_edit_corrupt = true;
  } else {
    edit_registered(c, adapter, d, sign);
  }
  return {};
}

}  // namespace fsdpsim
