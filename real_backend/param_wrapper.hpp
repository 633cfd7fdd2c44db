// LoRA on a mixture-of-experts parameter (peft/tuners/lora/layer.py::ParamWrapper,
// `target_parameters`): weight (E, in, out), lora_A (r*E, in), lora_B (out, r*E).
// The delta on real tensors, where get_delta_weight reads A and B from, and the
// forward through autograd; the LoraLayer it belongs to keeps the bookkeeping.
// Same file and class as model/machine/param_wrapper.
#pragma once
#include <string>

#include <ATen/ATen.h>

#include "real_backend/dtensor.hpp"

namespace fsdpsim::real {

class LoraLayer;

// lora/layer.py::ParamWrapper.get_delta_weight, unscaled, libtorch calls in
// PEFT's order: A.reshape(E, -1, A.shape[-1]), B.reshape(B.shape[0], -1, E),
// einsum("o r e, e r i -> e i o"). Raises what libtorch raises.
at::Tensor experts_einsum(const at::Tensor& a, const at::Tensor& b, int64_t experts);
// The same delta computed expert by expert, independently of the reshapes:
// expert e owns rows e*r .. e*r+r-1 of A and columns e, e+E, ... of B, and
// delta[e] = (B[:, e::E] @ A[e*r : (e+1)*r]).T.
at::Tensor experts_delta_per_expert(const at::Tensor& a, const at::Tensor& b, int64_t experts);
// An exception text up to its first newline (libtorch appends a backtrace).
std::string first_line(const std::string& what);

class ParamWrapper {
 public:
  ParamWrapper(const Layout& layout, int layer, Parameters& params, DTensor& dtensor, ProcessGroup& pg)
      : layout_(&layout), layer_(layer), params_(&params), dtensor_(&dtensor), pg_(&pg) {}
  // lora/layer.py::ParamWrapper.get_delta_weight: what merge adds to the registered weight, or
  // (!merge) the value get_delta_weight returns, *what saying its form and whole shape.
  at::Tensor get_delta_weight(int adapter, bool merge, DeltaValue* what = nullptr);
  // ParamWrapper.forward -> _activate_lora before the FSDP module's pre-forward: throws where a
  // ParamWrapper made after fully_shard meets a DTensor shard.
  void activate_lora(const LoraLayer& layer);
  // ParamWrapper.forward through the experts module, with `layer`'s active adapters.
  at::Tensor forward(const LoraLayer& layer, const at::Tensor& h);

 private:
  at::Tensor one_expert_delta(int adapter, bool merge, bool dtensor, DeltaValue* what);

  const Layout* layout_;
  int layer_;
  Parameters* params_;
  DTensor* dtensor_;
  ProcessGroup* pg_;
};

}  // namespace fsdpsim::real
