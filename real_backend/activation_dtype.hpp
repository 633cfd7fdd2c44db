// The dtype the forward's activation carries under a MixedPrecisionPolicy, on real tensors: the
// harness's Net.forward casts its input to the scenario's dtype, a child group's hooks cast what
// enters each of its modules to param_dtype and what leaves it to output_dtype, PEFT's LoRA Linear
// casts to each lora_A's dtype. The libtorch op that meets two dtypes raises torch's own error.
// Without a `mixed_precision` line none of this runs (the forward stays fp32 throughout).
// Same file as model/machine/activation_dtype.hpp.
#pragma once
#include <string>

#include <ATen/ATen.h>

#include "real_backend/layout.hpp"
#include "real_backend/op_raised.hpp"

namespace fsdpsim::real {

inline at::ScalarType scalar_type_of(DType d) { return d == DType::BF16 ? at::kBFloat16 : at::kFloat; }

// torch 2.13 _fsdp_state.py::FSDPState._cast_forward_inputs: a floating input to param_dtype when the
// policy has one and cast_forward_inputs is set (_fsdp_common.py::_cast_fp_tensor).
inline at::Tensor fsdp_cast_in(const GroupSpec& g, const at::Tensor& x) {
  return g.mp_cast_inputs && g.mp_param ? x.to(scalar_type_of(*g.mp_param)) : x;
}
// _fsdp_state.py::FSDPState._cast_output_dtype: a floating output to output_dtype when set.
inline at::Tensor fsdp_cast_out(const GroupSpec& g, const at::Tensor& y) {
  return g.mp_output ? y.to(scalar_type_of(*g.mp_output)) : y;
}

// A libtorch op's dtype error as the op raised it: Python's RuntimeError with its first line.
[[noreturn]] inline void raise_op_error(const c10::Error& e) {
  std::string what = e.what_without_backtrace();
  throw OpError(Status::Exception, "RuntimeError: " + what.substr(0, what.find('\n')));
}

}  // namespace fsdpsim::real
