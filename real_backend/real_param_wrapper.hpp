// The tensor math of LoRA on a mixture-of-experts parameter
// (peft/tuners/lora/layer.py::ParamWrapper): weight (E, in, out), lora_A
// (r*E, in), lora_B (out, r*E). Free functions, so tests can call them.
#pragma once
#include <string>

#include <ATen/ATen.h>

namespace fsdpsim::real {

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

}  // namespace fsdpsim::real
