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

std::string einsum_dtype_error(DType x, DType w) {
  if (x == w) return {};
  return fmt::format("RuntimeError: expected scalar type {} but found {}", scalar_name(x), scalar_name(w));
}

}  // namespace fsdpsim
