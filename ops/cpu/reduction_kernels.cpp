/*
 * CPU kernels for the reductions: sum, prod, amax, amin, var, and max/min along a dim with
 * their indices. Each is a reducer run by one engine (reduction_engine.h) over folds of
 * unit-stride runs (reduction_row_folds.h).
 *
 * Accuracy: floating sums and products accumulate in double (float32 too: converting costs
 * less than the memory traffic; 16-bit rows sum pieces of kBuffer in float lanes, then in
 * double), rows with 32 independent lanes and a pairwise split above kPairwiseBlock
 * elements, columns with a two-level cascade, and chunk partials pairwise; 10^7 float32 ones
 * sum to exactly 10^7. var is two-pass (the mean, then
 * the squared deviations from it), in double. max/min propagate NaN as PyTorch does: a NaN
 * anywhere in the reduced set is the result (and its first index is the argmax).
 */
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "ops/cpu/block_conversion.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/reduction_engine.h"
#include "ops/cpu/reduction_row_folds.h"
#include "ops/dispatch.h"

namespace loom::cpu {

namespace {

using namespace reduction;  // NOLINT: the engine and folds are this file's vocabulary

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsReducedFloat<T>;

// ---- reducers -------------------------------------------------------------------------------

// Accumulator of sums and products: double for floating inputs, int64 for integers and bool.
template <class T>
using sum_acc_t = std::conditional_t<kIsFloat<T>, double, int64_t>;

template <class T, class Out>
struct SumReducer {
  using V = opmath_t<T>;
  using Acc = sum_acc_t<T>;
  Out* out;
  Acc identity() const { return 0; }
  void row(Acc& acc, const V* p, int64_t n, int64_t, int64_t) const {
    if constexpr (sizeof(T) == 2 && kIsFloat<T>) {
      acc += row_sum<float>(p, n);  // pieces of at most kBuffer: float lanes suffice for 16-bit
    } else {
      acc = combine(acc, row_sum<Acc>(p, n));
    }
  }
  void columns(Acc* __restrict acc, const V* __restrict p, int64_t n, int64_t, int64_t) const {
    for (int64_t j = 0; j < n; ++j) acc[j] = combine(acc[j], static_cast<Acc>(p[j]));
  }
  Acc combine(Acc a, Acc b) const {
    return static_cast<Acc>(static_cast<lane_t<Acc>>(a) + static_cast<lane_t<Acc>>(b));
  }
  void write(int64_t o, Acc acc) const { out[o] = static_cast<Out>(acc); }
};

template <class T, class Out>
struct ProdReducer {
  using V = opmath_t<T>;
  using Acc = sum_acc_t<T>;
  Out* out;
  Acc identity() const { return 1; }
  void row(Acc& acc, const V* p, int64_t n, int64_t, int64_t) const {
    acc = combine(acc, row_prod<Acc>(p, n));
  }
  void columns(Acc* __restrict acc, const V* __restrict p, int64_t n, int64_t, int64_t) const {
    for (int64_t j = 0; j < n; ++j) acc[j] = combine(acc[j], static_cast<Acc>(p[j]));
  }
  Acc combine(Acc a, Acc b) const {
    return static_cast<Acc>(static_cast<lane_t<Acc>>(a) * static_cast<lane_t<Acc>>(b));
  }
  void write(int64_t o, Acc acc) const { out[o] = static_cast<Out>(acc); }
};

template <class T, bool kMax>
struct ExtremeReducer {
  using V = opmath_t<T>;
  using Acc = V;
  T* out;
  Acc identity() const { return extreme_identity<kMax, V>(); }
  void row(Acc& acc, const V* p, int64_t n, int64_t, int64_t) const { acc = row_extreme<kMax>(p, n, acc); }
  void columns(Acc* __restrict acc, const V* __restrict p, int64_t n, int64_t, int64_t) const {
    for (int64_t j = 0; j < n; ++j) acc[j] = wins<kMax>(p[j], acc[j]) ? p[j] : acc[j];
  }
  Acc combine(Acc a, Acc b) const { return a != a ? a : (wins<kMax>(b, a) ? b : a); }  // NOLINT: NaN test
  void write(int64_t o, Acc acc) const { out[o] = static_cast<T>(acc); }
};

// var, first pass: the mean of each output's reduced set, into `mean`.
template <class T>
struct MeanReducer {
  using V = opmath_t<T>;
  using Acc = double;
  double* mean;
  double count;
  Acc identity() const { return 0; }
  void row(Acc& acc, const V* p, int64_t n, int64_t, int64_t) const { acc += row_sum<double>(p, n); }
  void columns(Acc* __restrict acc, const V* __restrict p, int64_t n, int64_t, int64_t) const {
    for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<double>(p[j]);
  }
  Acc combine(Acc a, Acc b) const { return a + b; }
  void write(int64_t o, Acc acc) const { mean[o] = acc / count; }
};

// var, second pass: sum of squared deviations from the mean, divided by max(0, n - correction).
template <class T>
struct SquaredDeviationReducer {
  using V = opmath_t<T>;
  using Acc = double;
  const double* mean;
  double divisor;
  T* out;
  Acc identity() const { return 0; }
  void row(Acc& acc, const V* p, int64_t n, int64_t o, int64_t) const {
    acc += row_squared_deviation(p, n, mean[o]);
  }
  void columns(Acc* __restrict acc, const V* __restrict p, int64_t n, int64_t o, int64_t) const {
    const double* __restrict m = mean + o;
    for (int64_t j = 0; j < n; ++j) {
      const double d = static_cast<double>(p[j]) - m[j];
      acc[j] += d * d;
    }
  }
  Acc combine(Acc a, Acc b) const { return a + b; }
  void write(int64_t o, Acc acc) const { out[o] = static_cast<T>(acc / divisor); }
};

// max/min along one dim with the index: the first occurrence on ties, the first NaN if any.
template <class V>
struct ValueIndex {
  V value;
  int64_t index;  // kNoIndex: nothing seen yet
};
constexpr int64_t kNoIndex = std::numeric_limits<int64_t>::max();

template <class T, bool kMax>
struct ArgReducer {
  using V = opmath_t<T>;
  using Acc = ValueIndex<V>;
  T* values;
  int64_t* indices;
  Acc identity() const { return {extreme_identity<kMax, V>(), kNoIndex}; }
  // The best of a row: its extreme value, then the first position holding it (both vectorised).
  void row(Acc& acc, const V* p, int64_t n, int64_t, int64_t pos) const {
    const V best = row_extreme<kMax>(p, n, p[0]);
    acc = combine(acc, Acc{best, pos + find_first(p, n, best)});
  }
  // acc[j] takes p[j] when it is strictly better, or acc[j] is empty; a NaN in acc[j] stays.
  void columns(Acc* __restrict acc, const V* __restrict p, int64_t n, int64_t, int64_t pos) const {
    for (int64_t j = 0; j < n; ++j) {
      const V a = acc[j].value;
      const bool take =
          acc[j].index == kNoIndex || (a == a && wins<kMax>(p[j], a));  // NOLINT: a == a: not NaN
      acc[j].value = take ? p[j] : a;
      acc[j].index = take ? pos : acc[j].index;
    }
  }
  // a covers earlier positions than b: b replaces a only when strictly better, or a is empty.
  Acc combine(const Acc& a, const Acc& b) const {
    if (a.index == kNoIndex) return b;
    if (b.index == kNoIndex || a.value != a.value) return a;  // NOLINT: NaN in a wins
    return wins<kMax>(b.value, a.value) ? b : a;
  }
  void write(int64_t o, const Acc& acc) const {
    values[o] = static_cast<T>(acc.value);
    indices[o] = acc.index == kNoIndex ? 0 : acc.index;
  }
};

// ---- kernels --------------------------------------------------------------------------------

template <template <class, class> class Reducer>
void sum_like_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims, std::string_view op) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto run = [&](auto out_tag) {
      using Out = typename decltype(out_tag)::type;
      reduce<T>(in, dims, Reducer<T, Out>{out.data_ptr<Out>()});
    };
    if constexpr (kIsFloat<T>) {
      if (out.dtype() == in.dtype()) {
        run(TypeTag<T>{});
      } else if (out.dtype() == kFloat32) {
        run(TypeTag<float>{});
      } else {
        LOOM_CHECK(out.dtype() == kFloat64, op, " kernel: cannot write ", in.dtype(), " into ", out.dtype());
        run(TypeTag<double>{});
      }
    } else {
      LOOM_CHECK(out.dtype() == kInt64, op, " kernel: expected an int64 output for ", in.dtype(), ", got ",
                 out.dtype());
      run(TypeTag<int64_t>{});
    }
  });
}

void sum_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims) {
  sum_like_kernel<SumReducer>(out, in, dims, "sum");
}

void prod_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims) {
  sum_like_kernel<ProdReducer>(out, in, dims, "prod");
}

template <bool kMax>
void extreme_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce<T>(in, dims, ExtremeReducer<T, kMax>{out.data_ptr<T>()});
  });
}

void var_kernel(const Tensor& out, const Tensor& in, IntArrayRef dims, int64_t correction) {
  visit_floating_dtype(in.dtype(), "var", [&](auto tag) {
    using T = typename decltype(tag)::type;
    int64_t n = 1;
    for (int64_t d : dims) n *= in.sizes()[d];
    std::vector<double> mean(static_cast<size_t>(out.numel()));
    reduce<T>(in, dims, MeanReducer<T>{mean.data(), static_cast<double>(n)});
    const double divisor = std::max<double>(0.0, static_cast<double>(n) - static_cast<double>(correction));
    reduce<T>(in, dims, SquaredDeviationReducer<T>{mean.data(), divisor, out.data_ptr<T>()});
  });
}

// Second pass of max/min along a dim laid out as columns: the first position of each
// output's extreme value (pass one's result, `target`), found with vectorised compares.
template <class T>
struct FirstIndexReducer {
  using V = opmath_t<T>;
  using Acc = int64_t;
  const V* target;
  int64_t* indices;
  static bool matches(V x, V t) { return x == t || (t != t && x != x); }  // NOLINT: NaN matches NaN
  Acc identity() const { return kNoIndex; }
  void row(Acc& acc, const V* p, int64_t n, int64_t o, int64_t pos) const {
    for (int64_t k = 0; k < n && acc == kNoIndex; ++k)
      if (matches(p[k], target[o])) acc = pos + k;
  }
  void columns(Acc* __restrict acc, const V* __restrict p, int64_t n, int64_t o, int64_t pos) const {
    const V* __restrict t = target + o;
    for (int64_t j = 0; j < n; ++j) acc[j] = (acc[j] == kNoIndex && matches(p[j], t[j])) ? pos : acc[j];
  }
  Acc combine(Acc a, Acc b) const { return a != kNoIndex ? a : b; }
  void write(int64_t o, Acc acc) const { indices[o] = acc; }
};

template <bool kMax>
void arg_kernel(const Tensor& values, const Tensor& indices, const Tensor& in, int64_t dim) {
  DimVector dims;
  if (in.dim() > 0) dims.push_back(dim);
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using V = opmath_t<T>;
    if (!columns_layout(make_plan(in, dims))) {  // one pass: each piece's extreme, then its position
      reduce<T>(in, dims, ArgReducer<T, kMax>{values.data_ptr<T>(), indices.data_ptr<int64_t>()});
      return;
    }
    // Columns: a (value, index) pair per output does not vectorise; two passes over
    // separate arrays do. The extreme is one of the elements, so storing it as T is exact.
    T* v = values.data_ptr<T>();
    reduce<T>(in, dims, ExtremeReducer<T, kMax>{v});
    std::unique_ptr<V[]> target(new V[static_cast<size_t>(values.numel())]);
    std::copy(v, v + values.numel(), target.get());
    reduce<T>(in, dims, FirstIndexReducer<T>{target.get(), indices.data_ptr<int64_t>()});
  });
}

}  // namespace

void register_reduction_kernels() {
  register_kernel<Op::sum>(DeviceType::CPU, sum_kernel);
  register_kernel<Op::prod>(DeviceType::CPU, prod_kernel);
  register_kernel<Op::amax>(DeviceType::CPU, extreme_kernel<true>);
  register_kernel<Op::amin>(DeviceType::CPU, extreme_kernel<false>);
  register_kernel<Op::var>(DeviceType::CPU, var_kernel);
  register_kernel<Op::max_dim>(DeviceType::CPU, arg_kernel<true>);
  register_kernel<Op::min_dim>(DeviceType::CPU, arg_kernel<false>);
}

}  // namespace loom::cpu

