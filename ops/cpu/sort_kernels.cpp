/*
 * CPU kernels of cumsum and sort. Both work on contiguous tensors seen as [outer, size, inner]
 * around the dim (ops/dim_geometry.h).
 *
 * cumsum walks each outer slice row by row along the dim, keeping `inner` running sums side
 * by side, so the inner loop is unit-stride and vectorises whatever the dim. The sums are kept
 * in float64 for float32 and float64 (as PyTorch's CPU kernel does) and in float32 for the
 * 16-bit floats, and rounded once per output element; integers wrap as in two's complement.
 *
 * sort copies each line into a buffer of (key, position) pairs and std::stable_sort's it with
 * the order of ops/sort_order.h; lines are sorted in parallel.
 */
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel_grain.h"
#include "ops/dim_geometry.h"
#include "ops/dispatch.h"
#include "ops/sort_order.h"

namespace loom::cpu {

namespace {

// ---- cumsum -----------------------------------------------------------------------------------

// The running-sum type: float64 for float32/float64, float32 for the 16-bit floats, uint64 for
// integers (unsigned, so that overflow wraps instead of being undefined).
template <class T>
using scan_acc_t = std::conditional_t<
    std::is_integral_v<T>, uint64_t,
    std::conditional_t<std::is_same_v<opmath_t<T>, float> && !std::is_same_v<T, float>, float, double>>;

template <class T>
T from_acc(scan_acc_t<T> acc) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(acc);  // modulo 2^bits
  else
    return static_cast<T>(static_cast<opmath_t<T>>(acc));
}

template <class T>
scan_acc_t<T> to_acc(T v) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  else
    return static_cast<scan_acc_t<T>>(static_cast<opmath_t<T>>(v));
}

void cumsum_kernel(const Tensor& out, const Tensor& in, int64_t dim) {
  const DimGeometry g = geometry_around(in, dim);
  LOOM_CHECK(in.dtype() != kBool, "cumsum: no bool kernel (the ops layer sums bool as int64)");
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      using Acc = scan_acc_t<T>;
      const T* src = in.data_ptr<T>();
      T* dst = out.data_ptr<T>();
      // Work items: (outer slice, chunk of `inner`) pairs, each `size` rows of its chunk long.
      const int64_t chunk = std::min<int64_t>(g.inner, 1024);
      const int64_t chunks_per_slice = (g.inner + chunk - 1) / chunk;
      parallel_for(0, g.outer * chunks_per_slice, grain_for(g.size * chunk), [&](int64_t begin, int64_t end) {
        std::vector<Acc> acc(static_cast<size_t>(chunk));
        for (int64_t item = begin; item < end; ++item) {
          const int64_t o = item / chunks_per_slice, j0 = (item % chunks_per_slice) * chunk;
          const int64_t width = std::min(chunk, g.inner - j0);
          std::fill(acc.begin(), acc.begin() + width, Acc{0});
          const int64_t base = o * g.size * g.inner + j0;
          for (int64_t i = 0; i < g.size; ++i) {
            const T* row_in = src + base + i * g.inner;
            T* row_out = dst + base + i * g.inner;
            for (int64_t j = 0; j < width; ++j) {
              acc[static_cast<size_t>(j)] += to_acc(row_in[j]);
              row_out[j] = from_acc<T>(acc[static_cast<size_t>(j)]);
            }
          }
        }
      });
    }
  });
}

// ---- sort -------------------------------------------------------------------------------------

template <class T>
auto sort_key(T v) {
  if constexpr (std::is_same_v<T, bool>)
    return static_cast<int>(v);
  else
    return static_cast<opmath_t<T>>(v);
}

void sort_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim,
                 bool descending) {
  const DimGeometry g = geometry_around(in, dim);
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Key = decltype(sort_key(T{}));
    const T* src = in.data_ptr<T>();
    T* out_values = values.data_ptr<T>();
    int64_t* out_indices = indices.data_ptr<int64_t>();
    const int64_t lines = g.outer * g.inner;
    const double log_size = std::log2(static_cast<double>(std::max<int64_t>(g.size, 2)));
    const int64_t work = static_cast<int64_t>(static_cast<double>(g.size) * log_size) * 4;
    parallel_for(0, lines, grain_for(work), [&](int64_t begin, int64_t end) {
      std::vector<Key> keys(static_cast<size_t>(g.size));
      std::vector<int64_t> order(static_cast<size_t>(g.size));
      for (int64_t line = begin; line < end; ++line) {
        const int64_t base = (line / g.inner) * g.size * g.inner + line % g.inner;
        for (int64_t i = 0; i < g.size; ++i) keys[static_cast<size_t>(i)] = sort_key(src[base + i * g.inner]);
        std::iota(order.begin(), order.end(), int64_t{0});
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
          return key_before(keys[static_cast<size_t>(a)], keys[static_cast<size_t>(b)], descending);
        });
        for (int64_t i = 0; i < g.size; ++i) {
          const int64_t from = order[static_cast<size_t>(i)];
          out_values[base + i * g.inner] = src[base + from * g.inner];
          out_indices[base + i * g.inner] = from;
        }
      }
    });
  });
}

}  // namespace

void register_sort_kernels() {
  register_kernel<Op::cumsum>(DeviceType::CPU, cumsum_kernel);
  register_kernel<Op::sort>(DeviceType::CPU, sort_kernel);
}

}  // namespace loom::cpu
