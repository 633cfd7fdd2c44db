// Where parameters live before and after prepare (devices, dtypes), and the
// prepare op with its ram-efficient broadcasts (the memory figures the cost
// report reads are the observer's: observer.cpp).
#include "model/machine/loading.hpp"

#include "model/vocab/refill.hpp"

namespace fsdpsim {

// transformers + accelerate's fsdp_cpu_ram_efficient_loading: only rank 0
// loads real base weights; the other ranks hold meta tensors until prepare.
void Accelerator::place_base_params() {
  // A 4-bit layer's weight is the packed uint8 Params4bit (bitsandbytes/nn/modules.py::Params4bit).
  for (const auto& li : topo_.layers)
    if (li.quant) params_[li.weight].dtype = DType::U8;
  if (default_placement()) return;  // FsdpParam's defaults: cpu, fp32
  const bool meta = topo_.loading == Loading::RamEfficient && rank_ != 0;
  for (size_t p = 0; p < topo_.params.size(); ++p) {
    // A modules_to_save copy is a deep copy of its original (other.py::ModulesToSaveWrapper.update): placed alike.
    if (is_lora(topo_.params[p].kind)) continue;
    params_[p].device = meta ? Device::Meta : Device::Cpu;
    if (params_[p].dtype != DType::U8) params_[p].dtype = topo_.dtype;
  }
}

// Every parameter on cpu in fp32, whatever moves happen.
bool Accelerator::default_placement() const {
  return topo_.loading == Loading::Full && topo_.dtype == DType::F32;
}

// A new adapter's A and B start on cpu in fp32;
// tuners_utils.py::BaseTunerLayer._move_adapter_to_device_of_base_layer then
// moves them to the base weight's device and dtype, but skips a whole
// container (lora_A, lora_B) when any parameter in it, of any adapter, is on
// meta (adapter_meta_check container, #2834); per_adapter looks at this
// adapter's own parameters only. tuners_utils.py::BaseTuner._cast_adapter_dtype
// then casts bf16 adapter weights to fp32 unless autocast_adapter_dtype=False.
void Accelerator::place_new_adapter(int adapter, bool autocast) {
  bool compute_cast = false;  // a 4-bit layer's compute_dtype is the dtype its adapters move to
  for (const auto& li : topo_.layers) compute_cast |= li.quant && li.compute_dtype && li.A[adapter] >= 0;
  // Under a policy an unsharded group's base weight is a param_dtype copy, even in an fp32 model.
  if (default_placement() && !topo_.mixed_precision && !compute_cast) return;
  const bool per_adapter = topo_.profile.get(Switch::AdapterMetaCheck) == sw::kPerAdapter;
  for (const auto& li : topo_.layers) {
    // A refused injection placed modules only in the layers it reached: the others keep what they
    // hold (a deleted adapter's FSDPParam still in its group keeps its dtype).
    if (li.A[adapter] < 0 || !params_[li.A[adapter]].present) continue;
    const FsdpParam& base = params_[li.weight];
    // The module's weight now: U, in the policy's param_dtype, while its group is unsharded.
    const bool u = groups_ && u_registered(topo_, params_, *groups_, li.weight);
    const DType base_dtype = u ? base.gathered_dtype() : base.dtype;
    for (const auto* container : {&li.A, &li.B}) {
      FsdpParam& ps = params_[(*container)[adapter]];
      ps.device = Device::Cpu;
      ps.dtype = DType::F32;
      bool skip = false;
      for (int a = 0; a < topo_.n_adapters() && !per_adapter; ++a) {
        int q = (*container)[a];
        skip = skip || (q >= 0 && params_[q].present && params_[q].device == Device::Meta);
      }
      if (skip) continue;
      ps.device = base.device;
      // tuners_utils.py::BaseTunerLayer._get_base_layer_device_and_dtype: a bnb Linear4bit gives its
      // compute_dtype (None: no cast); an integer dtype is never cast to.
      if (li.quant) ps.dtype = li.compute_dtype.value_or(ps.dtype);
      else ps.dtype = base_dtype;
    }
    if (li.M[adapter] >= 0) {
      // dora.py::DoraLinearLayer.update_layer: the magnitude is the norm of base weight + B @ A,
      // made after the move above, so it takes the promotion of those dtypes (bf16 only when all are).
      FsdpParam& m = params_[li.M[adapter]];
      const bool all_bf16 = base_dtype == DType::BF16 && params_[li.A[adapter]].dtype == DType::BF16 &&
                            params_[li.B[adapter]].dtype == DType::BF16;
      m.device = params_[li.A[adapter]].device;  // the norm is taken on A's device (meta beside a meta base)
      m.dtype = all_bf16 ? DType::BF16 : DType::F32;
    }
    if (!topo_.adapters[adapter].autocast_or(topo_.autocast_adapter_dtype) || !autocast) continue;
    for (int p : li.tensors(adapter))
      if (params_[p].dtype == DType::BF16) params_[p].dtype = DType::F32;
  }
}

// accelerate/utils/fsdp_utils.py::fsdp2_prepare_model: with ram-efficient
// loading, fsdp2_load_full_state_dict broadcasts every state-dict entry from
// rank 0 in state_dict order (injection order for lora_A/lora_B), each rank in its own parameter's dtype (rank 0 sends
// its loaded tensor, the others receive into torch.empty of their meta
// parameter's dtype); nothing compares names or dtypes, so the collectives
// decide. Then every parameter is real, and accelerator.py::_prepare_fsdp2
// points the optimizer at the sharded objects.
void Accelerator::upcast_trainable() {
  if (!topo_.mp_upcast) return;
  for (auto& ps : params_)
    if (ps.present && ps.rg_s) ps.dtype = DType::F32;
}

void Accelerator::prepare(Optimizer& optimizer, const OptimizerPort& port) {
  upcast_trainable();
  // utils/fsdp_utils.py::fsdp2_prepare_model: `cpu_ram_efficient_loading and not model_has_params4bit`:
  // with a 4-bit layer nothing is broadcast and the meta parameters of ranks > 0 stay on meta.
  const bool load = topo_.loading == Loading::RamEfficient && !topo_.params4bit;
  if (load) {
    for (int p : topo_.state_dict_order) {
      const ParamInfo& pi = topo_.params[p];
      if (!params_[p].present) continue;
      CollRecord c{CollOp::Broadcast, -1, static_cast<int64_t>(pi.dim0) * pi.rest};
      c.member_begin = log_.next_member();
      c.member_count = 1;
      c.dtype = params_[p].dtype;
      log_.issue(c);
      log_.pack(p);
    }
  }
  std::vector<int> meta;  // the registered parameters on meta now, in named_parameters() order
  for (int p : topo_.state_dict_order)
    if (params_[p].present && params_[p].device == Device::Meta) meta.push_back(p);
  if (!topo_.params4bit || topo_.loading != Loading::RamEfficient)
    for (auto& ps : params_) ps.device = Device::Cpu;
  prepared_ = true;
  optimizer.prepare(port);
  optimizer.map_by_data_ptr(meta);
}

}  // namespace fsdpsim
