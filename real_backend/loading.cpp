// Placement of parameters on real tensors (seed 001: a meta tensor where
// accelerate's ram-efficient loading leaves no values, a tensor of the
// parameter's dtype elsewhere), accelerate's prepare (broadcast from rank 0,
// fully_shard, the optimizer), and the memory figures read off the tensors.
#include "real_backend/loading.hpp"

#include <ATen/core/grad_mode.h>

#include "real_backend/fsdp_state.hpp"
#include "real_backend/values.hpp"

namespace fsdpsim::real {
namespace {

// Bytes a tensor holds: none on meta (shape only, no storage).
int64_t bytes_of(const at::Tensor& t) { return t.is_meta() ? 0 : t.numel() * static_cast<int64_t>(t.element_size()); }

}  // namespace

// A parameter of the plain (not yet sharded) model: its full value, created on
// cpu in fp32 (nn.Linear / LoraLayer.update_layer), registered under its name.
void Accelerator::create_param(int p, const std::vector<float>& full) {
  const ParamSpec& ps = layout_->params[p];
  ParamTensors& rp = (*params_)[p].leaf;
  rp.s = at::from_blob(const_cast<float*>(full.data()), param_shape(*layout_, ps, ps.rows), at::kFloat).clone();
  rp.place = rp.s.detach().clone();
  (*params_)[p].registered = rp.s;
}

void Accelerator::place_base_params() {
  const bool on_meta = layout_->loading == Loading::RamEfficient && pg_->rank() != 0;
  const at::ScalarType dtype = layout_->dtype == DType::BF16 ? at::kBFloat16 : at::kFloat;
  for (size_t p = 0; p < layout_->params.size(); ++p) {
    if (layout_->params[p].adapter >= 0) continue;  // LoRA and modules_to_save copies come with their adapter
    create_param(static_cast<int>(p), initial_values(*layout_, seed_, static_cast<int>(p)));
    place_param(static_cast<int>(p), on_meta, dtype);
  }
}

// nn.Module.to(device, dtype) on one parameter: requires_grad kept. To meta the
// values are gone (S becomes a meta leaf too); on cpu only the dtype changes,
// the compute copy S keeping fp32. Never from meta to cpu: torch cannot copy
// out of a meta tensor, and nothing here asks it to (prepare broadcasts instead).
void Accelerator::place_param(int p, bool meta, at::ScalarType dtype) {
  ParamTensors& rp = (*params_)[p].leaf;
  if (meta) {
    const bool rg = rp.s.requires_grad();
    rp.place = at::empty(rp.place.sizes(), at::TensorOptions().device(at::kMeta).dtype(dtype));
    rp.s = at::empty(rp.s.sizes(), at::TensorOptions().device(at::kMeta).dtype(at::kFloat)).requires_grad_(rg);
    if (params_->registered(p).defined()) (*params_)[p].registered = rp.s;
  } else if (!rp.place.is_meta()) {
    rp.place = rp.place.to(dtype);
  }
}

// tuners_utils.py::BaseTunerLayer._move_adapter_to_device_of_base_layer: for the
// lora_A container, then lora_B, move the adapter to the base weight's device
// and dtype, unless a meta parameter says to skip: upstream any present
// adapter's in the container (#2834), patched only the adapter's own.
void Accelerator::move_adapter_to_device_of_base_layer(int layer, int adapter) {
  const LayerSpec& ls = layout_->layers[layer];
  const at::Tensor& w = (*params_)[ls.weight].leaf.place;
  // The module's weight now: U, in the policy's param_dtype, while its group is unsharded.
  const at::ScalarType dtype = w.is_meta() ? w.scalar_type() : (*params_)[ls.weight].forward_dtype();
  const bool per_adapter = layout_->profile.get(Switch::AdapterMetaCheck) == sw::kPerAdapter;
  for (const std::vector<int>* container : {&ls.lora_a, &ls.lora_b}) {
    const int p = (*container)[adapter];
    bool skip = false;
    if (per_adapter) {
      skip = (*params_)[p].leaf.place.is_meta();
    } else {
      for (int q : *container) skip = skip || (q >= 0 && params_->registered(q).defined() && (*params_)[q].leaf.place.is_meta());
    }
    if (!skip) place_param(p, w.is_meta(), dtype);
  }
  // lora/layer.py::LoraLayer.update_layer moves the adapter before the variant's init, which then
  // computes the DoRA magnitude from the base weight and the moved A and B: where and in what
  // dtype the base weight is (dora.py::DoraLinearLayer.update_layer).
  if (ls.lora_m[adapter] >= 0) place_param(ls.lora_m[adapter], w.is_meta(), dtype);
}

// lora/model.py::LoraModel._create_and_replace -> LoraLayer.update_layer per
// targeted layer: fresh (or loaded) A and B on cpu in fp32, moved to the base
// layer's device; then peft_model.py's _cast_adapter_dtype (autocast_adapter_dtype)
// turns the adapter's bf16 parameters back to fp32, wherever they are.
void Accelerator::place_new_adapter(int adapter, bool load) {
  for (size_t l = 0; l < layout_->layers.size(); ++l)
    if (layout_->layers[l].lora_a[adapter] >= 0) place_new_adapter_in(static_cast<int>(l), adapter, load);
}

// One layer's share of place_new_adapter: its new A and B, placed, then cast.
void Accelerator::place_new_adapter_in(int l, int adapter, bool load, bool autocast) {
  {
    const LayerSpec& ls = layout_->layers[l];
    for (int p : ls.adapter_params(adapter)) {
      // peft tuners/lora/layer.py::LoraLayer.update_layer: a new module; after fully_shard over a managed
      // name the group keeps the deleted one's FSDPParam (torch _fsdp_init.py::_get_managed_states).
      if (fsdp_->prepared && layout_->params[p].group >= 0 && !(*params_)[p].detached) {
        (*params_)[p].keep_ghost();
      }
      create_param(p, initial_values(*layout_, seed_, p, load));
    }
    move_adapter_to_device_of_base_layer(l, adapter);
  }
  const LayerSpec& ls = layout_->layers[l];
  for (int p : ls.adapter_params(adapter))
    if (autocast && layout_->adapters[adapter].autocast_or(layout_->autocast_adapter_dtype) &&
        (*params_)[p].leaf.place.scalar_type() == at::kBFloat16)
      place_param(p, (*params_)[p].leaf.place.is_meta(), at::kFloat);
}

// set_peft_model_state_dict -> load_state_dict copies into the objects already registered (the
// optimizer's); a managed one takes its chunk of the full tensor (save_and_load.py::
// _reshard_dtensor_values_for_load); a meta one stays meta (module.py::_load_from_state_dict: a no-op).
void Accelerator::load_into_adapter(int adapter) {
  at::NoGradGuard ng;
  for (const LayerSpec& ls : layout_->layers) {
    if (ls.lora_a[adapter] < 0) continue;
    for (int p : ls.adapter_params(adapter)) {
      ParamTensors& rp = (*params_)[p].leaf;
      if (!params_->registered(p).defined() || rp.s.is_meta()) continue;
      const ParamSpec& ps = layout_->params[p];
      std::vector<float> full = initial_values(*layout_, seed_, p, true);
      at::Tensor v = fsdp_->prepared && params_->group_of(p) >= 0 ? dtensor_->chunk_of(full, ps)
                                                                  : at::from_blob(full.data(), {ps.rows * ps.cols}, at::kFloat).clone();
      rp.s.variable_data().copy_(v.reshape(rp.s.sizes()));
      if (!rp.place.is_meta()) rp.place = rp.s.detach().to(rp.place.scalar_type());
    }
  }
}

// accelerate/utils/fsdp_utils.py::fsdp2_prepare_model. With ram-efficient
// loading, fsdp2_load_full_state_dict first: rank 0 broadcasts each present
// parameter in state-dict order and every rank adopts its values in its own
// dtype (a rank whose copy has another dtype is a mismatch, caught by the
// fingerprint before gloo sees the buffers). Then fully_shard keeps each
// managed parameter's padded dim-0 chunk, and the optimizer is built over the
// trainable S objects (fsdp2_switch_optimizer_parameters).
void Accelerator::upcast_trainable() {
  if (!layout_->mp_upcast) return;
  for (size_t p = 0; p < params_->size(); ++p) {
    FsdpParam& fp = (*params_)[p];
    // param.data = param.data.to(torch.float32): the same object, values kept (S holds them in fp32)
    if (fp.present() && fp.registered.requires_grad() && fp.leaf.place.defined() && fp.leaf.place.scalar_type() != at::kFloat)
      fp.leaf.place = fp.leaf.place.to(at::kFloat);
  }
}

void Accelerator::prepare() {
  at::NoGradGuard ng;
  upcast_trainable();
  const size_t n = params_->size();
  // What accelerate's _prepare_fsdp2 keys its map by: each registered tensor's data_ptr() before prepare.
  std::vector<int64_t> data_ptr_before(n, -1);
  for (int p : layout_->state_dict_order)
    if (params_->registered(p).defined())
      data_ptr_before[p] = params_->registered(p).is_meta() ? 0 : reinterpret_cast<int64_t>(params_->registered(p).data_ptr());
  optimizer_->prepare();  // built before prepare, as a Trainer builds it
  const std::vector<int> held_before = optimizer_->held();
  std::vector<at::Tensor> scattered(n);  // a part-filled load's chunk (Comm::part_filled_chunk)
  if (layout_->loading == Loading::RamEfficient) {
    for (int p : layout_->state_dict_order) {
      if (!params_->registered(p).defined()) continue;
      ParamTensors& rp = (*params_)[p].leaf;
      const ParamSpec& ps = layout_->params[p];
      // Rank 0 sends its tensor; the others receive into a buffer (their own tensor may be meta).
      at::Tensor mine = rp.s.is_meta() ? at::zeros({ps.rows * ps.cols}) : rp.s.detach();
      at::Tensor got = pg_->comm->broadcast(mine, static_cast<int>(p), dtype_of(rp.place), pg_->step).view(param_shape(*layout_, ps, ps.rows));
      scattered[p] = pg_->comm->part_filled_chunk(ps.chunk_numel(), dtype_of(rp.place));
      // the scatter's padding rows are cut off (Shard._shard_tensor unpads); FSDP pads with zeros
      const int64_t mine_numel = ps.local_rows(pg_->rank()) * ps.cols;
      if (scattered[p].defined()) scattered[p].narrow(0, mine_numel, scattered[p].numel() - mine_numel).zero_();
      const bool rg = rp.s.requires_grad();
      rp.s = got.clone().requires_grad_(rg);
      rp.place = got.to(rp.place.scalar_type());
      (*params_)[p].registered = rp.s;
    }
  }
  for (size_t p = 0; p < n; ++p) {
    const ParamSpec& ps = layout_->params[p];
    ParamTensors& rp = (*params_)[p].leaf;
    if (params_->group_of(static_cast<int>(p)) < 0 || !params_->registered(p).defined()) continue;
    at::Tensor full = rp.s.detach().contiguous().reshape({-1});
    std::vector<float> v(full.data_ptr<float>(), full.data_ptr<float>() + full.numel());
    const bool rg = rp.s.requires_grad();
    rp.s = (scattered[p].defined() ? scattered[p].view(param_shape(*layout_, ps, ps.chunk_rows)) : dtensor_->chunk_of(v, ps)).requires_grad_(rg);
    rp.place = rp.s.detach().to(rp.place.scalar_type());
    (*params_)[p].registered = rp.s;
  }
  fsdp_->prepared = true;
  optimizer_->prepare();
  optimizer_->map_by_data_ptr(held_before, data_ptr_before);
}

// The shards this rank holds: each present parameter's S (this rank's padded
// chunk when FSDP manages it, else the whole tensor; before prepare every
// parameter is whole) in its dtype; meta holds nothing.
std::vector<OwnerBytes> Accelerator::sharded_bytes() const {
  std::vector<int64_t> by(layout_->adapters.size() + 1, 0);
  for (size_t p = 0; p < params_->size(); ++p) {
    if (!params_->registered(p).defined()) continue;
    const ParamSpec& ps = layout_->params[p];
    const at::Tensor& t = (*params_)[p].leaf.place;
    int64_t b = bytes_of(t);
    by[ps.adapter >= 0 ? static_cast<size_t>(ps.adapter) : by.size() - 1] += b;
  }
  return owners_of(*layout_, by);
}

}  // namespace fsdpsim::real
