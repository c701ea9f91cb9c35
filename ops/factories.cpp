/* Tensor factories (see factories.h). */
#include "ops/factories.h"

#include <cmath>

#include "core/cuda_graph.h"
#include "ops/copy_ops.h"
#include "ops/dispatch.h"
#include "ops/op_utils.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

// Runs a random kernel over a contiguous tensor, reserving fresh counters from the generator.
// A CUDA-graph capture reserves them at each replay instead (core/cuda_graph.h): the kernel it
// records reads the seed and first counter on the device.
template <Op op>
const Tensor& random_fill(const Tensor& x, double a, double b, Generator* generator) {
  check_defined(x, op_name(op));
  check_writable(x, std::string(op_name(op)) + "_");
  if (x.numel() == 0) return x;
  Generator& gen = generator ? *generator : default_generator();
  const auto counters = static_cast<uint64_t>(x.numel());
  PhiloxArgs philox;
  if (x.is_cuda() && cuda::current_stream_capturing()) {
    philox = cuda::capture_philox_args(gen, counters);
  } else {
    const auto [seed, offset] = gen.reserve(counters);
    philox = PhiloxArgs{seed, offset};
  }
  if (x.is_contiguous()) {
    get_kernel<op>(x.device())(x, a, b, philox);
  } else {
    Tensor tmp = empty(x.sizes(), x.options());
    get_kernel<op>(x.device())(tmp, a, b, philox);
    copy_(x, tmp);
  }
  x.storage()->bump_version();
  return x;
}

}  // namespace

Tensor zeros(IntArrayRef sizes, TensorOptions options) { return full(sizes, 0, options); }
Tensor ones(IntArrayRef sizes, TensorOptions options) { return full(sizes, 1, options); }

Tensor full(IntArrayRef sizes, Scalar value, TensorOptions options) {
  Tensor out = empty(sizes, options);
  fill_(out, value);
  return out;
}

Tensor empty_like(const Tensor& x) { return empty(x.sizes(), x.options()); }
Tensor zeros_like(const Tensor& x) { return zeros(x.sizes(), x.options()); }
Tensor ones_like(const Tensor& x) { return ones(x.sizes(), x.options()); }
Tensor full_like(const Tensor& x, Scalar value) { return full(x.sizes(), value, x.options()); }

Tensor scalar_tensor(Scalar value, TensorOptions options) { return full({}, value, options); }

Tensor arange(Scalar end, std::optional<TensorOptions> options) { return arange(0, end, 1, options); }

Tensor arange(Scalar start, Scalar end, Scalar step, std::optional<TensorOptions> maybe_options) {
  bool any_float = start.is_floating() || end.is_floating() || step.is_floating();
  TensorOptions options = maybe_options.value_or(TensorOptions(any_float ? DType::Float32 : DType::Int64));
  double s = start.to_double(), e = end.to_double(), d = step.to_double();
  LOOM_CHECK(d != 0, "arange: step must be nonzero");
  LOOM_CHECK(std::isfinite(s) && std::isfinite(e), "arange: start and end must be finite, got ", start, " and ",
             end);
  LOOM_CHECK((d > 0 && e >= s) || (d < 0 && e <= s), "arange: upper bound ", end, " and step ", step,
             " are inconsistent with start ", start);
  int64_t n = static_cast<int64_t>(std::ceil((e - s) / d));
  Tensor out = empty({n}, options);
  if (n > 0) get_kernel<Op::arange>(out.device())(out, s, d);
  return out;
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  LOOM_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  Tensor out = empty({steps}, options);
  if (steps == 1) {
    fill_(out, start);
  } else if (steps > 1) {
    get_kernel<Op::arange>(out.device())(out, start, (end - start) / static_cast<double>(steps - 1));
  }
  return out;
}

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  if (m < 0) m = n;
  LOOM_CHECK(n >= 0, "eye: n must be non-negative, got ", n);
  Tensor out = zeros({n, m}, options);
  // The diagonal is a strided view with stride m + 1.
  fill_(as_strided(out, {std::min(n, m)}, {m + 1}, 0), 1);
  return out;
}

const Tensor& uniform_(const Tensor& x, double low, double high, Generator* generator) {
  LOOM_CHECK(low <= high, "uniform_: expected low <= high, got ", low, " and ", high);
  return random_fill<Op::uniform>(x, low, high, generator);
}

const Tensor& normal_(const Tensor& x, double mean, double std, Generator* generator) {
  LOOM_CHECK(std >= 0, "normal_: expected a non-negative standard deviation, got ", std);
  return random_fill<Op::normal>(x, mean, std, generator);
}

const Tensor& bernoulli_(const Tensor& x, double p, Generator* generator) {
  LOOM_CHECK(p >= 0 && p <= 1, "bernoulli_: probability must be in [0, 1], got ", p);
  return random_fill<Op::bernoulli>(x, p, 0, generator);
}

Tensor rand(IntArrayRef sizes, TensorOptions options, Generator* generator) {
  Tensor out = empty(sizes, options);
  uniform_(out, 0.0, 1.0, generator);
  return out;
}

Tensor randn(IntArrayRef sizes, TensorOptions options, Generator* generator) {
  Tensor out = empty(sizes, options);
  normal_(out, 0.0, 1.0, generator);
  return out;
}

Tensor randint(int64_t low, int64_t high, IntArrayRef sizes, TensorOptions options, Generator* generator) {
  LOOM_CHECK(low < high, "randint: expected low < high, got ", low, " and ", high);
  Tensor out = empty(sizes, options);
  random_fill<Op::randint>(out, static_cast<double>(low), static_cast<double>(high), generator);
  return out;
}

Tensor rand_like(const Tensor& x, Generator* generator) { return rand(x.sizes(), x.options(), generator); }
Tensor randn_like(const Tensor& x, Generator* generator) { return randn(x.sizes(), x.options(), generator); }

}  // namespace loom
