/*
 * Elementwise ops with NumPy broadcasting and PyTorch's type promotion.
 * Binary ops compute in the promoted dtype of their inputs (a Scalar promotes like PyTorch's
 * Python number: int_tensor * 0.5 is float32, half_tensor * 2.0 stays float16). Comparisons
 * and logical ops return bool. Integer division `div` is true division (float result).
 * Shapes that do not broadcast throw loom::Error naming the op and both shapes.
 */
#pragma once

#include <optional>
#include <string_view>

#include "core/tensor.h"

namespace loom {

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a + alpha * b
Tensor add(const Tensor& a, Scalar b);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);  // a - alpha * b
Tensor sub(const Tensor& a, Scalar b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor pow(Scalar base, const Tensor& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// approximate: "none" (x * Phi(x), with erf) or "tanh"
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
// grad * gelu'(x), the gradient of gelu (grad and x of one shape and floating dtype).
Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate = "none");
// self <= threshold ? 0 : grad, elementwise (PyTorch's threshold_backward): relu's gradient is
// threshold_backward(grad, relu's output, 0). grad and self have one shape and floating dtypes; the
// result has their promoted dtype, and the threshold is rounded to it before the comparison. A NaN
// in self passes grad on, as in PyTorch.
Tensor threshold_backward(const Tensor& grad, const Tensor& self, double threshold);
Tensor silu(const Tensor& x);
// At least one bound must be given.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = {});

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);

Tensor eq(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, Scalar b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);

// True when all elements are close: |a - b| <= atol + rtol * |b| (NaNs equal when equal_nan).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
// True when shapes match and all elements are equal.
bool equal(const Tensor& a, const Tensor& b);

}  // namespace loom
