/* dtypes: names, sizes, promotion, 16-bit float rounding (values checked by hand), and Scalar's
 * integer view of floating values. */
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/scalar.h"

using namespace loom;

TEST_CASE("dtype names and sizes") {
  CHECK(dtype_name(kFloat32) == "float32");
  CHECK(dtype_name(kBFloat16) == "bfloat16");
  CHECK(dtype_size(kFloat16) == 2);
  CHECK(dtype_size(kInt64) == 8);
  CHECK(dtype_size(kBool) == 1);
  CHECK(kNumDTypes == 9);
}

TEST_CASE("type promotion follows PyTorch") {
  CHECK(promote_types(kInt32, kFloat16) == kFloat16);
  CHECK(promote_types(kFloat16, kBFloat16) == kFloat32);
  CHECK(promote_types(kUInt8, kInt8) == kInt32);
  CHECK(promote_types(kBool, kUInt8) == kUInt8);
  CHECK(promote_types(kInt64, kFloat32) == kFloat32);
  CHECK(promote_types(kFloat32, kFloat64) == kFloat64);
  CHECK(promote_types(kInt32, kInt64) == kInt64);
}

TEST_CASE("half rounds to nearest even and handles the edges") {
  CHECK(Half(1.0f).bits == 0x3c00);
  CHECK(Half(-2.0f).bits == 0xc000);
  CHECK(Half(65504.0f).bits == 0x7bff);                // largest finite
  CHECK(Half(65520.0f).bits == 0x7c00);                // ties to even -> inf
  CHECK(Half(65519.0f).bits == 0x7bff);
  CHECK(Half(1.0f + 0x1p-11f).bits == 0x3c00);         // halfway between 1 and 1+2^-10: even (1)
  CHECK(Half(1.0f + 3 * 0x1p-11f).bits == 0x3c02);     // halfway between 1+2^-10 and 1+2^-9: even
  CHECK(Half(0x1p-24f).bits == 0x0001);                // smallest subnormal
  CHECK(Half(0x1p-25f).bits == 0x0000);                // tie -> even (0)
  CHECK(Half(3 * 0x1p-25f).bits == 0x0002);            // tie between 1 and 2 subnormal ulps -> 2
  CHECK(std::isnan(static_cast<float>(Half(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(static_cast<float>(Half::from_bits(0x0001)) == 0x1p-24f);
  CHECK(static_cast<float>(Half::from_bits(0x7c00)) == std::numeric_limits<float>::infinity());
  CHECK(static_cast<float>(Half(0.1f)) == 0.0999755859375f);
}

TEST_CASE("bfloat16 rounds to nearest even") {
  CHECK(BFloat16(1.0f).bits == 0x3f80);
  CHECK(BFloat16(1.0f + 0x1p-8f).bits == 0x3f80);      // tie -> even
  CHECK(BFloat16(1.0f + 3 * 0x1p-8f).bits == 0x3f82);  // tie -> even (up)
  CHECK(BFloat16(1.0f + 0x1p-8f + 0x1p-20f).bits == 0x3f81);
  CHECK(std::isnan(static_cast<float>(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(static_cast<float>(BFloat16(3.0f)) == 3.0f);
}

TEST_CASE("Scalar: a floating value's integer view is defined for NaN, infinities and huge values") {
  // A plain cast is undefined behaviour there (UBSan caught item() of a NaN in the fuzzer).
  CHECK(loom::Scalar(std::nan("")).to_int() == 0);
  CHECK(loom::Scalar(std::numeric_limits<double>::infinity()).to_int() == INT64_MAX);
  CHECK(loom::Scalar(-std::numeric_limits<float>::infinity()).to_int() == INT64_MIN);
  CHECK(loom::Scalar(1e30).to_int() == INT64_MAX);
  CHECK(loom::Scalar(-2.75).to_int() == -2);  // truncation, as the cast does where defined
  CHECK(std::isnan(loom::Scalar(std::nan("")).to_double()));
}
