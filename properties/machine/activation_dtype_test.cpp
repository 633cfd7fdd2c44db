// The activation dtype's casts and torch's dtype errors (model/machine/activation_dtype.cpp): the
// texts as torch 2.13 raises them on CPU for a 2-D input (measured with F.linear and torch.einsum).
#include <gtest/gtest.h>

#include "model/machine/activation_dtype.hpp"

using namespace fsdpsim;

TEST(ActivationDtype, LinearChecksTheBiasBeforeTheInput) {
  EXPECT_EQ(linear_dtype_error(DType::F32, DType::F32, DType::F32), "");
  EXPECT_EQ(linear_dtype_error(DType::BF16, DType::BF16, std::nullopt), "");
  EXPECT_EQ(linear_dtype_error(DType::F32, DType::BF16, DType::BF16),
            "RuntimeError: mat1 and mat2 must have the same dtype, but got Float and BFloat16");
  EXPECT_EQ(linear_dtype_error(DType::BF16, DType::F32, DType::F32),
            "RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float");
  // addmm compares its bias (`self`) with the weight first
  EXPECT_EQ(linear_dtype_error(DType::BF16, DType::F32, DType::BF16),
            "RuntimeError: self and mat2 must have the same dtype, but got BFloat16 and Float");
  EXPECT_EQ(linear_dtype_error(DType::F32, DType::F32, DType::BF16),
            "RuntimeError: self and mat2 must have the same dtype, but got BFloat16 and Float");
  // lora_A / lora_B have no bias: mm names the C++ types
  EXPECT_EQ(linear_dtype_error(DType::F32, DType::BF16, std::nullopt),
            "RuntimeError: expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16");
}

TEST(ActivationDtype, EinsumChecksByItsBmmPath) {
  DType out = DType::BF16;
  EXPECT_EQ(einsum_dtype_error(DType::BF16, DType::BF16, 8, 8, &out), "");
  EXPECT_EQ(out, DType::BF16);
  // 4 * 9 * 11 = 396: bmm's own kernel
  EXPECT_EQ(einsum_dtype_error(DType::F32, DType::BF16, 9, 11, &out), "RuntimeError: expected scalar type Float but found BFloat16");
  EXPECT_EQ(einsum_dtype_error(DType::BF16, DType::F32, 9, 11, &out), "RuntimeError: expected scalar type BFloat16 but found Float");
  // 4 * 10 * 10 = 400: through mm
  EXPECT_EQ(einsum_dtype_error(DType::F32, DType::BF16, 10, 10, &out),
            "RuntimeError: expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16");
  EXPECT_EQ(einsum_dtype_error(DType::BF16, DType::F32, 10, 10, &out), "RuntimeError: expected scalar type Float but found BFloat16");
  // fan_in 1 contracts nothing: a promoted product
  EXPECT_EQ(einsum_dtype_error(DType::BF16, DType::F32, 1, 100, &out), "");
  EXPECT_EQ(out, DType::F32);
}

TEST(ActivationDtype, PolicyCastsInOnlyWithAParamDtype) {
  GroupInfo g;
  EXPECT_EQ(fsdp_cast_in(g, DType::F32), DType::F32);  // no param_dtype: nothing to cast to
  g.mp_param = DType::BF16;
  EXPECT_EQ(fsdp_cast_in(g, DType::F32), DType::BF16);
  g.mp_cast_inputs = false;
  EXPECT_EQ(fsdp_cast_in(g, DType::F32), DType::F32);
  EXPECT_EQ(fsdp_cast_out(g, DType::BF16), DType::BF16);  // no output_dtype
  g.mp_output = DType::F32;
  EXPECT_EQ(fsdp_cast_out(g, DType::BF16), DType::F32);
}
