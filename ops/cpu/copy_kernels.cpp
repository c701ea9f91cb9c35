/*
 * CPU kernels for copies between any strides and dtypes, fills, arange and the
 * counter-based random fills (see core/random.h for why element i depends only on
 * (seed, offset, i)).
 */
#include <cmath>
#include <cstring>
#include <numbers>

#include "core/random.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/loops.h"
#include "ops/dispatch.h"

namespace loom::cpu {

namespace {

void copy_kernel(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous()) {
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
    const int64_t bytes = static_cast<int64_t>(dst.nbytes());
    parallel_for(0, bytes, kParallelGrain * 8, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, e - b); });
    return;
  }
  visit_dtype(dst.dtype(), [&](auto dst_tag) {
    using D = typename decltype(dst_tag)::type;
    visit_dtype(src.dtype(), [&](auto src_tag) {
      using S = typename decltype(src_tag)::type;
      unary_loop<D, S>(dst, src, [](auto v) { return v; });
    });
  });
}

void fill_kernel(const Tensor& dst, Scalar value) {
  visit_dtype(dst.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = value.to<T>();
    for_each_run<1>({&dst}, kParallelGrain, [&](char* const* p, const int64_t* s, int64_t n) {
      T* o = reinterpret_cast<T*>(p[0]);
      const int64_t so = s[0] / static_cast<int64_t>(sizeof(T));
      if (so == 1) {
        std::fill(o, o + n, v);
      } else {
        for (int64_t i = 0; i < n; ++i) o[i * so] = v;
      }
    });
  });
}

void arange_kernel(const Tensor& out, double start, double step) {
  visit_numeric_dtype(out.dtype(), "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data_ptr<T>();
    parallel_for(0, out.numel(), kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = static_cast<T>(start + static_cast<double>(i) * step);
    });
  });
}

// Runs body(i, lanes) for every element i, where lanes are the 4 x 32 random bits of the
// counter that element i draws from: counter = offset + i / per_counter.
template <class Body>
void for_each_random(int64_t n, int per_counter, PhiloxArgs philox, const Body& body) {
  LOOM_CHECK(philox.replay_state == nullptr,
             "random fill on the CPU: Philox arguments of a CUDA-graph capture");
  const uint64_t seed = philox.seed, offset = philox.offset;
  const int64_t groups = (n + per_counter - 1) / per_counter;
  parallel_for(0, groups, kParallelGrain / 4, [&](int64_t gb, int64_t ge) {
    for (int64_t g = gb; g < ge; ++g) {
      auto lanes = Philox4x32::generate(seed, 0, offset + static_cast<uint64_t>(g));
      int64_t first = g * per_counter, last = std::min<int64_t>(n, first + per_counter);
      for (int64_t i = first; i < last; ++i) body(i, static_cast<int>(i - first), lanes);
    }
  });
}

void uniform_kernel(const Tensor& out, double low, double high, PhiloxArgs philox) {
  visit_floating_dtype(out.dtype(), "uniform_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data_ptr<T>();
    if constexpr (std::is_same_v<T, double>) {
      for_each_random(out.numel(), 2, philox, [&](int64_t i, int k, const auto& r) {
        o[i] = low + (high - low) * uniform_double(r[2 * k], r[2 * k + 1]);
      });
    } else {
      const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
      for_each_random(out.numel(), 4, philox, [&](int64_t i, int k, const auto& r) {
        o[i] = static_cast<T>(lo + span * uniform_float(r[k]));
      });
    }
  });
}

// Box-Muller on lane pairs (0,1) and (2,3): elements 4g, 4g+1 and 4g+2, 4g+3.
void normal_kernel(const Tensor& out, double mean, double stddev, PhiloxArgs philox) {
  visit_floating_dtype(out.dtype(), "normal_", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data_ptr<T>();
    for_each_random(out.numel(), 4, philox, [&](int64_t i, int k, const auto& r) {
      int pair = k / 2;
      // u1 in (0, 1] so that log(u1) is finite; u2 in [0, 1).
      double u1 = (static_cast<double>(r[2 * pair]) + 1.0) * 0x1p-32, u2 = static_cast<double>(r[2 * pair + 1]) * 0x1p-32;
      double radius = std::sqrt(-2.0 * std::log(u1)), theta = 2.0 * std::numbers::pi * u2;
      double z = (k % 2 == 0) ? radius * std::cos(theta) : radius * std::sin(theta);
      o[i] = static_cast<T>(mean + stddev * z);
    });
  });
}

void randint_kernel(const Tensor& out, double low, double high, PhiloxArgs philox) {
  visit_numeric_dtype(out.dtype(), "randint", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data_ptr<T>();
    const int64_t lo = static_cast<int64_t>(low);
    const uint64_t range = static_cast<uint64_t>(static_cast<int64_t>(high) - lo);
    for_each_random(out.numel(), 2, philox, [&](int64_t i, int k, const auto& r) {
      uint64_t bits = static_cast<uint64_t>(r[2 * k]) << 32 | r[2 * k + 1];
      o[i] = static_cast<T>(static_cast<double>(lo + static_cast<int64_t>(bits % range)));
    });
  });
}

void bernoulli_kernel(const Tensor& out, double p, double, PhiloxArgs philox) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data_ptr<T>();
    const float threshold = static_cast<float>(p);
    for_each_random(out.numel(), 4, philox, [&](int64_t i, int k, const auto& r) {
      o[i] = static_cast<T>(uniform_float(r[k]) < threshold ? 1.0f : 0.0f);
    });
  });
}

}  // namespace

void register_copy_kernels() {
  register_kernel<Op::copy>(DeviceType::CPU, copy_kernel);
  register_kernel<Op::fill>(DeviceType::CPU, fill_kernel);
  register_kernel<Op::arange>(DeviceType::CPU, arange_kernel);
  register_kernel<Op::uniform>(DeviceType::CPU, uniform_kernel);
  register_kernel<Op::normal>(DeviceType::CPU, normal_kernel);
  register_kernel<Op::randint>(DeviceType::CPU, randint_kernel);
  register_kernel<Op::bernoulli>(DeviceType::CPU, bernoulli_kernel);
}

}  // namespace loom::cpu
