// One parameter name of the real module as FSDP2 manages it
// (torch/distributed/fsdp/_fully_shard/_fsdp_param.py::FSDPParam): the objects
// behind the name, what the module registers under it, and the ghost a re-add
// leaves; and the module's registry of them (module._parameters, which FSDP2
// swaps with unsafe_setattr_param). Same file and class as the model's
// model/machine/fsdp_param.hpp.
#pragma once
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "real_backend/layout.hpp"

namespace fsdpsim::real {

// A parameter's dtype as the observations name it (bf16, else fp32; uint8: a byte-packed buffer).
DType dtype_of(const at::Tensor& t);
DType dtype_of(at::ScalarType t);

// The tensors of one FSDPParam: S (this rank's padded dim-0 chunk, a leaf), U (the
// unsharded leaf, created at the group's first all-gather and reused).
struct ParamTensors {
  at::Tensor s, u;
  // S's placement: a meta tensor, or S's values on cpu in the parameter's dtype
  // (compute stays fp32 in `s`; device and dtype are read off this tensor).
  at::Tensor place;
  at::Tensor adam_m, adam_v;  // AdamW state, keyed to S
  int64_t adam_step = 0;
  int64_t adam_created = 0;   // when the state was created (Optimizer.state's insertion order)
};

class FsdpParam {
 public:
  ParamTensors leaf;  // this name's own objects (after a re-add: the new unmanaged module's leaf)
  // module._parameters[name]: S, U or the new module's leaf (undefined: absent)
  at::Tensor registered;
  // Re-added after fully_shard over a managed name: `leaf` is the new module's
  // (peft tuners/lora/layer.py::LoraLayer.update_layer); `ghost` the deleted one's FSDPParam, which its
  // group keeps gathering (torch _fsdp_init.py::_get_managed_states ran at fully_shard).
  bool detached = false;
  ParamTensors ghost;
  // torch 2.13 _fsdp_param.py::FSDPParam.init_dtype_attrs: the policy's param_dtype where it differs
  // from the shard's own dtype at the group's lazy init (the all-gather casts to it, U holds it);
  // unset: None. U's storage stays fp32 with the cast's values; its dtype is this.
  std::optional<at::ScalarType> mp_param_dtype;

  bool present() const { return registered.defined(); }
  // The FSDPParam the group holds under this name: the deleted module's (the ghost) after a re-add.
  ParamTensors& fsdp_objects() { return detached ? ghost : leaf; }
  const ParamTensors& fsdp_objects() const { return detached ? ghost : leaf; }
  // The parameter's own dtype (compute stays fp32 in S; `place` carries the dtype).
  at::ScalarType param_dtype() const;
  // What the all-gather carries and U holds: the cast, else the shard's own dtype
  // (_fsdp_collectives.py::_get_param_all_gather_inputs).
  at::ScalarType gathered_dtype() const { return mp_param_dtype.value_or(param_dtype()); }
  // The dtype a forward reads the registered object in: U's while U is registered, else its own.
  at::ScalarType forward_dtype() const { return holds_unsharded() ? gathered_dtype() : param_dtype(); }
  // The name holds this name's own U (what a report calls UNSHARDED).
  bool holds_unsharded() const;
  // The group keeps the deleted module's FSDPParam; the name gets a fresh leaf.
  void keep_ghost();
  // _fsdp_param.py::FSDPParam.to_sharded: S registered again, no write-back.
  void to_sharded();
  // _fsdp_param.py::FSDPParam.init_unsharded_param (U created once with S's requires_grad, then
  // set_requires_grad_if_needed) + to_unsharded: U refilled with `full`, then registered.
  void to_unsharded(const at::Tensor& full, at::IntArrayRef shape);
  // utils/other.py::_set_layer_requires_grad: the flag lands on the registered leaf.
  void set_requires_grad(bool v);
};

// module._parameters across the module tree, by parameter index (layout().params).
class Parameters {
 public:
  explicit Parameters(const Layout& layout) : layout_(&layout) {}
  void reset() { slots_.assign(layout_->params.size(), FsdpParam{}); }
  size_t size() const { return slots_.size(); }
  FsdpParam& operator[](int p) { return slots_[p]; }
  const FsdpParam& operator[](int p) const { return slots_[p]; }
  std::vector<FsdpParam>::iterator begin() { return slots_.begin(); }
  std::vector<FsdpParam>::iterator end() { return slots_.end(); }
  const Layout& layout() const { return *layout_; }
  const ParamSpec& spec(int p) const { return layout_->params[p]; }
  const at::Tensor& registered(int p) const { return slots_[p].registered; }
  // The group managing the registered object (-1: none; a re-added adapter's new module).
  int group_of(int p) const { return slots_[p].detached ? -1 : layout_->params[p].group; }
  void set_requires_grad(int p, bool v) { slots_[p].set_requires_grad(v); }
  at::ScalarType param_dtype(int p) const { return slots_[p].param_dtype(); }
  at::ScalarType gathered_dtype(int p) const { return slots_[p].gathered_dtype(); }
  at::ScalarType forward_dtype(int p) const { return slots_[p].forward_dtype(); }

 private:
  const Layout* layout_;
  std::vector<FsdpParam> slots_;
};

}  // namespace fsdpsim::real
