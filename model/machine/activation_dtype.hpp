// The dtype of the activation a forward carries from layer to layer, and what torch raises
// where a matmul meets operands of two dtypes. Net.forward starts it at the scenario's dtype;
// a fully_shard module's hooks cast it on the way in and out (MixedPrecisionPolicy's
// cast_forward_inputs / output_dtype); PEFT's LoRA Linear casts it to each lora_A's dtype.
// Without a mixed_precision line every operand has the activation's dtype and nothing here raises.
#pragma once
#include <optional>
#include <string>

#include "model/machine/topology.hpp"

namespace fsdpsim {

// torch 2.13 _fsdp_state.py::FSDPState._cast_forward_inputs: floating inputs to param_dtype
// when the policy has one and cast_forward_inputs is set (_fsdp_common.py::_cast_fp_tensor).
inline DType fsdp_cast_in(const GroupInfo& g, DType x) { return g.mp_cast_inputs && g.mp_param ? *g.mp_param : x; }
// _fsdp_state.py::FSDPState._cast_output_dtype: floating outputs to output_dtype when set.
inline DType fsdp_cast_out(const GroupInfo& g, DType x) { return g.mp_output.value_or(x); }

// The RuntimeError text of F.linear(x, W, b) on CPU with a 2-D input (addmm with a bias, mm
// without), "" when the dtypes agree: measured on torch 2.13 (aten/src/ATen/native/LinearAlgebra.cpp
// addmm_impl_cpu_ checks self against mat2 first, then mat1 against mat2; mm's check names c10 types).
std::string linear_dtype_error(DType x, DType w, std::optional<DType> bias);
// torch.einsum("bi,eio->bo", x, W) (the experts layer's forward) on the harness's batch of
// kForwardBatch rows: with fan_in 1 nothing is contracted (a broadcast product, the dtypes
// promoted: *out fp32); else one (1, batch, in) @ (1, in, out) bmm, whose CPU kernel checks the
// dtypes its own way below batch * in * out = 400 and through mm from there (measured on torch 2.13).
constexpr int64_t kForwardBatch = 4;  // real_backend/upstream session.py BATCH
std::string einsum_dtype_error(DType x, DType w, int64_t fan_in, int64_t fan_out, DType* out);

}  // namespace fsdpsim
