/*
 * CUDA kernels that fill a tensor from nothing: arange and the counter-based random fills
 * (uniform, normal, randint, bernoulli). Launchers declared in ops/cuda/elementwise_launchers.h.
 *
 * The random fills reproduce ops/cpu/copy_kernels.cpp exactly: one thread per Philox counter,
 * the same lanes-to-elements map, and products kept unfused (mul_rn: nvcc would otherwise
 * contract a + b * c into an FMA, which the CPU build does not) so that f32 results are
 * bit-identical to the CPU's for the same seed and offset.
 */
#include <cstdint>
#include <type_traits>

#include "core/philox.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/elementwise_launchers.h"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

template <class T>
__global__ void arange_kernel(T* out, int64_t numel, double start, double step) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = convert<T>(start + mul_rn(static_cast<double>(i), step));
}

// What one random element gets from lane k of its counter's 4 x 32 bits.
struct RandomParams {
  double a, b;      // uniform (double): low, high - low; normal: mean, stddev
  float lo, span;   // uniform (other types): float low, high - low; bernoulli: lo = p
  int64_t int_low;  // randint
  uint64_t range;   // randint
};

template <class T, RandomOp kOp>
__device__ inline T random_value(int k, const PhiloxLanes& r, const RandomParams& p) {
  if constexpr (kOp == RandomOp::kUniform) {
    if constexpr (std::is_same<T, double>::value) {
      return p.a + mul_rn(p.b, uniform_double(r.v[2 * k], r.v[2 * k + 1]));
    } else {
      return convert<T>(p.lo + mul_rn(p.span, uniform_float(r.v[k])));
    }
  } else if constexpr (kOp == RandomOp::kNormal) {
    // Box-Muller on lane pairs (0,1) and (2,3); u1 in (0, 1] so that log(u1) is finite.
    const int pair = k / 2;
    const double u1 = (static_cast<double>(r.v[2 * pair]) + 1.0) * 0x1p-32;
    const double u2 = static_cast<double>(r.v[2 * pair + 1]) * 0x1p-32;
    const double radius = ::sqrt(-2.0 * ::log(u1));
    const double theta = mul_rn(2.0 * 3.14159265358979323846, u2);
    const double z = (k % 2 == 0) ? mul_rn(radius, ::cos(theta)) : mul_rn(radius, ::sin(theta));
    return convert<T>(p.a + mul_rn(p.b, z));
  } else if constexpr (kOp == RandomOp::kRandint) {
    const uint64_t bits = static_cast<uint64_t>(r.v[2 * k]) << 32 | r.v[2 * k + 1];
    return convert<T>(static_cast<double>(p.int_low + static_cast<int64_t>(bits % p.range)));
  } else {
    return convert<T>(uniform_float(r.v[k]) < p.lo ? 1.0f : 0.0f);
  }
}

// One thread per counter: element i draws from counter offset + i / per_counter, lane
// i % per_counter (two lanes per element for double uniforms and randint).
template <class T, RandomOp kOp, int kPerCounter>
__global__ void random_kernel(T* out, int64_t numel, RandomParams params, PhiloxArgs philox) {
  const PhiloxArgs key = resolve_philox(philox);  // a replayed graph's state, read when it runs
  const uint64_t seed = key.seed, offset = key.offset;
  const int64_t groups = (numel + kPerCounter - 1) / kPerCounter;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < groups;
       g += int64_t{gridDim.x} * blockDim.x) {
    const PhiloxLanes lanes = philox4x32_10(seed, 0, offset + static_cast<uint64_t>(g));
    const int64_t first = g * kPerCounter;
    for (int k = 0; k < kPerCounter && first + k < numel; ++k)
      out[first + k] = random_value<T, kOp>(k, lanes, params);
  }
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

cudaError_t launch_arange(int dtype, void* out, int64_t numel, double start, double step,
                          cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  return visit_numeric_code(dtype, [&](auto t) {
    using T = decltype(t);
    return launch<arange_kernel<T>>(grid_stride(numel, stream), static_cast<T*>(out), numel, start, step);
  });
}

cudaError_t launch_random(RandomOp op, int dtype, void* out, int64_t numel, double a, double b, PhiloxArgs philox,
                          cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  RandomParams p{};
  auto go = [&](auto t, auto kernel_tag, auto per_counter) {
    using T = decltype(t);
    constexpr RandomOp kOp = decltype(kernel_tag)::value;
    constexpr int kPer = decltype(per_counter)::value;
    const int64_t groups = (numel + kPer - 1) / kPer;
    return launch<random_kernel<T, kOp, kPer>>(grid_stride(groups, stream), static_cast<T*>(out), numel, p,
                                               philox);
  };
  using Uniform = std::integral_constant<RandomOp, RandomOp::kUniform>;
  using Normal = std::integral_constant<RandomOp, RandomOp::kNormal>;
  using Randint = std::integral_constant<RandomOp, RandomOp::kRandint>;
  using Bernoulli = std::integral_constant<RandomOp, RandomOp::kBernoulli>;
  using Two = std::integral_constant<int, 2>;
  using Four = std::integral_constant<int, 4>;
  switch (op) {
    case RandomOp::kUniform:
      p.a = a;
      p.b = b - a;
      p.lo = static_cast<float>(a);
      p.span = static_cast<float>(b - a);
      return visit_floating_code(dtype, [&](auto t) {
        if constexpr (std::is_same<decltype(t), double>::value) {
          return go(t, Uniform{}, Two{});
        } else {
          return go(t, Uniform{}, Four{});
        }
      });
    case RandomOp::kNormal:
      p.a = a;
      p.b = b;
      return visit_floating_code(dtype, [&](auto t) { return go(t, Normal{}, Four{}); });
    case RandomOp::kRandint:
      p.int_low = static_cast<int64_t>(a);
      p.range = static_cast<uint64_t>(static_cast<int64_t>(b) - p.int_low);
      return visit_numeric_code(dtype, [&](auto t) { return go(t, Randint{}, Two{}); });
    case RandomOp::kBernoulli:
      p.lo = static_cast<float>(a);
      return visit_code(dtype, [&](auto t) { return go(t, Bernoulli{}, Four{}); });
  }
  return cudaErrorInvalidValue;
}

}  // namespace loom::cuda
