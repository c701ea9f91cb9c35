/*
 * Tensor factories, as in libtorch: zeros, ones, full, empty (core/tensor.h), arange,
 * linspace, eye, rand, randn, randint, tensor(values), and the *_like forms.
 * Random factories draw from the default generator (loom::manual_seed) unless given one;
 * the numbers depend only on the seed, never on the thread count.
 */
#pragma once

#include <initializer_list>
#include <optional>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"

namespace loom {

Tensor zeros(IntArrayRef sizes, TensorOptions options = {});
Tensor ones(IntArrayRef sizes, TensorOptions options = {});
Tensor full(IntArrayRef sizes, Scalar value, TensorOptions options = {});
Tensor empty_like(const Tensor& x);
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);
Tensor full_like(const Tensor& x, Scalar value);

// [0, end) and [start, end) by step. Without options the dtype is int64 when every bound is
// an integer and float32 otherwise, as torch.arange.
Tensor arange(Scalar end, std::optional<TensorOptions> options = {});
Tensor arange(Scalar start, Scalar end, Scalar step = 1, std::optional<TensorOptions> options = {});
// `steps` points from start to end inclusive.
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
// n x m identity (m = n when negative).
Tensor eye(int64_t n, int64_t m = -1, TensorOptions options = {});

// U[0, 1)
Tensor rand(IntArrayRef sizes, TensorOptions options = {}, Generator* generator = nullptr);
// N(0, 1)
Tensor randn(IntArrayRef sizes, TensorOptions options = {}, Generator* generator = nullptr);
// integers in [low, high), int64 by default
Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions options = DType::Int64,
               Generator* generator = nullptr);
Tensor rand_like(const Tensor& x, Generator* generator = nullptr);
Tensor randn_like(const Tensor& x, Generator* generator = nullptr);

// In-place random fills (torch's uniform_, normal_, bernoulli_).
const Tensor& uniform_(const Tensor& x, double low = 0.0, double high = 1.0, Generator* generator = nullptr);
const Tensor& normal_(const Tensor& x, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
const Tensor& bernoulli_(const Tensor& x, double p, Generator* generator = nullptr);

// A 1-D tensor holding `values` (copied), optionally reshaped to `sizes`.
template <class T>
Tensor tensor(const std::vector<T>& values, IntArrayRef sizes = {}) {
  DimVector shape = sizes.empty() ? DimVector{static_cast<int64_t>(values.size())} : DimVector(sizes);
  LOOM_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), "tensor: ", values.size(),
             " values do not fill shape ", shape);
  Tensor t = empty(shape, dtype_of<T>);
  std::copy(values.begin(), values.end(), t.data_ptr<T>());
  return t;
}
template <class T>
Tensor tensor(std::initializer_list<T> values, IntArrayRef sizes = {}) {
  return tensor(std::vector<T>(values), sizes);
}
// A 0-dim tensor.
Tensor scalar_tensor(Scalar value, TensorOptions options = {});

}  // namespace loom
