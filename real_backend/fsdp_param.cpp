// FSDPParam's transitions on real tensors (torch/distributed/fsdp/_fully_shard/_fsdp_param.py).
#include "real_backend/fsdp_param.hpp"

namespace fsdpsim::real {

DType dtype_of(at::ScalarType t) { return t == at::kBFloat16 ? DType::BF16 : t == at::kByte ? DType::U8 : DType::F32; }
DType dtype_of(const at::Tensor& t) { return dtype_of(t.scalar_type()); }

at::ScalarType FsdpParam::param_dtype() const {
  const ParamTensors& rp = fsdp_objects();
  return rp.place.defined() ? rp.place.scalar_type() : rp.s.scalar_type();
}

bool FsdpParam::holds_unsharded() const {
  return present() && leaf.u.defined() && registered.unsafeGetTensorImpl() == leaf.u.unsafeGetTensorImpl();
}

void FsdpParam::keep_ghost() {
  ghost = std::move(leaf);
  leaf = ParamTensors{};
  detached = true;
}

void FsdpParam::to_sharded() {
  if (present() && !detached) registered = leaf.s;
}

void FsdpParam::to_unsharded(const at::Tensor& full, at::IntArrayRef shape) {
  ParamTensors& rp = fsdp_objects();
  if (!rp.u.defined()) {
    rp.u = at::empty(shape).requires_grad_(rp.s.requires_grad());
  } else if (rp.u.requires_grad() != rp.s.requires_grad()) {
    rp.u.requires_grad_(rp.s.requires_grad());  // set_requires_grad_if_needed
  }
  // Like FSDP2's copy-out, refill U without bumping its autograd version.
  rp.u.variable_data().copy_(full.view(rp.u.sizes()));
  if (present() && !detached) registered = rp.u;
}

void FsdpParam::set_requires_grad(bool v) {
  if (present()) registered.requires_grad_(v);
}

}  // namespace fsdpsim::real
