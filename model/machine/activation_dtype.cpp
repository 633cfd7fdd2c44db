#include "model/machine/activation_dtype.hpp"

#include <fmt/format.h>

namespace fsdpsim {
namespace {
// torch's ScalarType names (c10/core/ScalarType.h) and the C++ type names mm's check prints.
const char* scalar_name(DType t) { return t == DType::BF16 ? "BFloat16" : "Float"; }
const char* cpp_name(DType t) { return t == DType::BF16 ? "c10::BFloat16" : "float"; }
}  // namespace

std::string linear_dtype_error(DType x, DType w, std::optional<DType> bias) {
  if (bias) {
    if (*bias != w) return fmt::format("RuntimeError: self and mat2 must have the same dtype, but got {} and {}", scalar_name(*bias), scalar_name(w));
    if (x != w) return fmt::format("RuntimeError: mat1 and mat2 must have the same dtype, but got {} and {}", scalar_name(x), scalar_name(w));
    return {};
  }
  if (x != w) return fmt::format("RuntimeError: expected m1 and m2 to have the same dtype, but got: {} != {}", cpp_name(x), cpp_name(w));
  return {};
}

std::string einsum_dtype_error(DType x, DType w, int64_t fan_in, int64_t fan_out, DType* out) {
  *out = x;
  if (x == w) return {};
  if (fan_in == 1) {
    *out = DType::F32;  // bf16 * fp32 promotes
    return {};
  }
  if (kForwardBatch * fan_in * fan_out < 400)
    return fmt::format("RuntimeError: expected scalar type {} but found {}", scalar_name(x), scalar_name(w));
  if (x == DType::F32) return linear_dtype_error(x, w, std::nullopt);  // mm's check
  return "RuntimeError: expected scalar type Float but found BFloat16";  // the fp32 result's dtype, the bf16 input
}

}  // namespace fsdpsim
