/*
 * CPU kernels for the reductions: sum, prod, amax, amin, var, and max/min along a dim with
 * their indices.
 *
 * One engine serves them all. The input's dims split into two groups: kept dims (one output
 * element per index) and reduced dims. Size-1 dims are dropped and neighbours that are
 * contiguous with each other are merged, so "rows of a contiguous matrix", "columns of a
 * contiguous matrix" and "everything" each become a one- or two-dim problem whatever the
 * rank. Then one of two loops runs:
 *
 *   rows     for each output, walk its reduced elements in runs of the innermost reduced dim
 *            and fold each run with a vectorised multi-accumulator loop (the reduced dims
 *            are innermost in memory, or the layout is irregular);
 *   columns  when the innermost kept dim is the unit-stride one (reducing the outer dim of a
 *            contiguous tensor), keep a block of up to kColumns outputs in registers/L1 and
 *            add whole unit-stride rows into it, so memory is read once, in order.
 *
 * Work is split over outputs. When there are few outputs (a full reduction, or [2, 10^7]
 * reduced over dim 1) the reduced range is also cut into chunks whose partial results are
 * combined pairwise afterwards; the chunking depends only on the shapes, so results do not
 * depend on the number of threads.
 *
 * Accuracy: floating sums and products accumulate in double (float32 too: converting costs
 * less than the memory traffic; 16-bit rows sum pieces of kBuffer in float lanes, then in
 * double), rows with 32 independent lanes and a pairwise split above kPairwiseBlock
 * elements, columns with a two-level cascade, and chunk partials pairwise; 10^7 float32 ones
 * sum to exactly 10^7. var is two-pass (the mean, then
 * the squared deviations from it), in double. max/min propagate NaN as PyTorch does: a NaN
 * anywhere in the reduced set is the result (and its first index is the argmax).
 *
 * A reducer tells the engine what to do:
 *   Acc identity();                                              empty accumulator
 *   void row(Acc&, const V* p, int64_t n, int64_t out, int64_t pos);   fold p[0..n)
 *   void columns(Acc* acc, const V* p, int64_t n, int64_t out, int64_t pos);  acc[j] op= p[j]
 *   Acc combine(const Acc& a, const Acc& b);                     a covers earlier elements
 *   void write(int64_t out, const Acc&);                         store output `out`
 * where V = opmath_t<T> (16-bit floats are converted to float before a reducer sees them),
 * `out` is the row-major index of the output (out tensors are contiguous) and `pos` the index
 * of p[0] in the row-major order of the reduced dims (its position along dim for max/min).
 */
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "ops/cpu/block_conversion.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/parallel_grain.h"
#include "ops/dispatch.h"
#include "ops/reduction_plan.h"

namespace loom::cpu {

namespace {

constexpr int64_t kLanes = 32;            // independent accumulators in a row loop
constexpr int64_t kPairwiseBlock = 8192;  // rows longer than this are split in halves
constexpr int64_t kColumns = 256;         // outputs per block in the columns loop
constexpr int64_t kCascade = 512;         // rows per inner block of the columns cascade
constexpr int64_t kBuffer = 512;          // elements converted per step for 16-bit/strided runs
constexpr int64_t kChunk = 32768;         // least elements per chunk when the reduced range is split
constexpr int64_t kFewOutputs = 64;       // below this many work units, split the reduced range

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsReducedFloat<T>;

// ---- geometry -------------------------------------------------------------------------------

// A group of dims of the input (ops/reduction_plan.h) with the walks the CPU loops need.
struct Group : DimGroup {

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  int64_t inner_size() const { return sizes.empty() ? 1 : sizes[sizes.size() - 1]; }
  int64_t inner_stride() const { return sizes.empty() ? 0 : strides[strides.size() - 1]; }

  // Element offset of the element with row-major index `linear`.
  int64_t offset_of(int64_t linear) const {
    int64_t off = 0;
    for (size_t i = sizes.size(); i-- > 0;) {
      off += (linear % sizes[i]) * strides[i];
      linear /= sizes[i];
    }
    return off;
  }

  // Calls f(offset, n, pos) for runs of the innermost dim that cover the row-major indices
  // [begin, end) once: elements offset + k * inner_stride() for k < n, the first at index pos.
  template <class F>
  void for_each_run(int64_t begin, int64_t end, const F& f) const {
    if (begin >= end) return;
    if (sizes.empty()) {
      f(int64_t{0}, int64_t{1}, int64_t{0});
      return;
    }
    const size_t nd = sizes.size();
    if (nd == 1) {  // the common case, without the index bookkeeping
      f(begin * strides[0], end - begin, begin);
      return;
    }
    DimVector index(nd, 0);
    int64_t rest = begin, off = 0;
    for (size_t i = nd; i-- > 0 && rest > 0;) {
      index[i] = rest % sizes[i];
      rest /= sizes[i];
      off += index[i] * strides[i];
    }
    int64_t pos = begin;
    while (pos < end) {
      const int64_t n = std::min(sizes[nd - 1] - index[nd - 1], end - pos);
      f(off, n, pos);
      pos += n;
      if (pos >= end) break;
      index[nd - 1] += n;
      off += n * strides[nd - 1];
      for (size_t i = nd - 1; i > 0 && index[i] == sizes[i]; --i) {
        index[i] = 0;
        ++index[i - 1];
        off += strides[i - 1] - sizes[i] * strides[i];
      }
    }
  }
};

struct Plan {
  Group kept;     // in the input's dim order: row-major index = output index
  Group reduced;  // stride-0 dims first, then by decreasing stride: the innermost is the densest
};

Plan make_plan(const Tensor& in, IntArrayRef dims) {
  ReductionPlan p = plan_reduction(in, dims);
  return {{std::move(p.kept)}, {std::move(p.reduced)}};
}

// The columns loop runs when the unit-stride dim is a kept one, wide enough to vectorise over.
bool columns_layout(const Plan& p) {
  return !p.kept.sizes.empty() && p.kept.inner_stride() == 1 && p.kept.inner_size() >= 8 &&
         (p.reduced.sizes.empty() || p.reduced.inner_stride() != 1);
}

// Calls fn(v, m, pos) on pieces of the run p[k * stride], k < n, as unit-stride arrays of V;
// a unit-stride run that needs no conversion is passed as it is.
template <class T, class V, class F>
void for_each_piece(const T* p, int64_t n, int64_t stride, int64_t pos, const F& fn) {
  if constexpr (std::is_same_v<T, V>) {
    if (stride == 1) {
      fn(p, n, pos);
      return;
    }
  }
  V buf[kBuffer];
  for (int64_t k = 0; k < n; k += kBuffer) {
    const int64_t m = std::min(kBuffer, n - k);
    widen_block(p + k * stride, stride, buf, m);
    fn(static_cast<const V*>(buf), m, pos + k);
  }
}

// ---- vectorisable row folds -----------------------------------------------------------------

// Integers accumulate in uint64 so that overflow wraps (as PyTorch's int64 sums) without UB.
template <class Acc>
using lane_t = std::conditional_t<std::is_integral_v<Acc>, uint64_t, Acc>;

// Folds the kLanes accumulators a[0..W) into one by halving, each level a loop of constant
// length that the compiler vectorises (a plain `for (w = W / 2; w; w /= 2)` loop it does not).
template <int64_t W, class L, class Op>
inline L fold_lanes(L* a, const Op& op) {
  if constexpr (W == 1) {
    return a[0];
  } else {
    for (int64_t j = 0; j < W / 2; ++j) a[j] = op(a[j], a[j + W / 2]);
    return fold_lanes<W / 2>(a, op);
  }
}

// Sum of p[0..n) in Acc: kLanes independent accumulators, split in halves above kPairwiseBlock.
template <class Acc, class V>
Acc row_sum(const V* __restrict p, int64_t n) {
  if (n > kPairwiseBlock) {
    const int64_t half = (n / 2 + kLanes - 1) / kLanes * kLanes;
    return static_cast<Acc>(row_sum<Acc>(p, half) + row_sum<Acc>(p + half, n - half));
  }
  using L = lane_t<Acc>;
  if (n < kLanes / 2) {  // short rows ([N, 3] over dim 1): the lanes would cost more than they save
    L s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<L>(static_cast<Acc>(p[i]));
    return static_cast<Acc>(s);
  }
  L a[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) a[j] += static_cast<L>(static_cast<Acc>(p[i + j]));
  for (int64_t j = 0; i + j < n; ++j) a[j] += static_cast<L>(static_cast<Acc>(p[i + j]));
  return static_cast<Acc>(fold_lanes<kLanes>(a, [](L x, L y) { return x + y; }));
}

template <class Acc, class V>
Acc row_prod(const V* __restrict p, int64_t n) {
  using L = lane_t<Acc>;
  L a[kLanes];
  std::fill(a, a + kLanes, L{1});
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) a[j] *= static_cast<L>(static_cast<Acc>(p[i + j]));
  for (int64_t j = 0; i + j < n; ++j) a[j] *= static_cast<L>(static_cast<Acc>(p[i + j]));
  return static_cast<Acc>(fold_lanes<kLanes>(a, [](L x, L y) { return x * y; }));
}

// Sum of (p[k] - mean)^2 in double.
template <class V>
double row_squared_deviation(const V* __restrict p, int64_t n, double mean) {
  if (n > kPairwiseBlock) {
    const int64_t half = (n / 2 + kLanes - 1) / kLanes * kLanes;
    return row_squared_deviation(p, half, mean) + row_squared_deviation(p + half, n - half, mean);
  }
  double a[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) {
      const double d = static_cast<double>(p[i + j]) - mean;
      a[j] += d * d;
    }
  for (int64_t j = 0; i + j < n; ++j) {
    const double d = static_cast<double>(p[i + j]) - mean;
    a[j] += d * d;
  }
  return fold_lanes<kLanes>(a, [](double x, double y) { return x + y; });
}

// max (kMax) or min, where NaN wins: `better(x, a)` is x > a (x < a), or x is NaN.
template <bool kMax, class V>
inline bool wins(V x, V a) {
  if constexpr (kMax) {
    return x > a || x != x;  // NOLINT: x != x is the NaN test that vectorises
  } else {
    return x < a || x != x;  // NOLINT
  }
}

template <bool kMax, class V>
constexpr V extreme_identity() {
  if constexpr (std::numeric_limits<V>::has_infinity) {
    return kMax ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
  } else {
    return kMax ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
  }
}

template <bool kMax, class V>
V row_extreme(const V* __restrict p, int64_t n, V init) {
  V a[kLanes];
  std::fill(a, a + kLanes, init);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) a[j] = wins<kMax>(p[i + j], a[j]) ? p[i + j] : a[j];
  for (int64_t j = 0; i + j < n; ++j) a[j] = wins<kMax>(p[i + j], a[j]) ? p[i + j] : a[j];
  return fold_lanes<kLanes>(a, [](V x, V y) { return wins<kMax>(y, x) ? y : x; });
}

// Position of the first element of p[0..n) equal to `target` (the first NaN when target is NaN);
// it must be there. Blocks of kLanes are tested with a vectorised OR before the scalar search.
template <class V>
int64_t find_first(const V* __restrict p, int64_t n, V target) {
  const bool nan = target != target;  // NOLINT: NaN test
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    int hit = 0;
    if (nan) {
      for (int64_t j = 0; j < kLanes; ++j) hit |= p[i + j] != p[i + j];  // NOLINT
    } else {
      for (int64_t j = 0; j < kLanes; ++j) hit |= p[i + j] == target;
    }
    if (hit) break;
  }
  for (; i < n; ++i)
    if (nan ? p[i] != p[i] : p[i] == target) return i;  // NOLINT
  return n - 1;                                         // not reached: target came from p
}

// ---- the engine -------------------------------------------------------------------------------

template <class T, class R>
void reduce(const Tensor& in, IntArrayRef dims, const R& r) {
  using V = opmath_t<T>;
  using Acc = typename R::Acc;
  const Plan plan = make_plan(in, dims);
  const Group& kept = plan.kept;
  const Group& red = plan.reduced;
  const int64_t n_out = kept.numel(), n_red = red.numel();
  if (n_out == 0) return;
  if (n_red == 0) {
    for (int64_t o = 0; o < n_out; ++o) r.write(o, r.identity());
    return;
  }
  const T* data = static_cast<const T*>(in.data_ptr());
  const int64_t red_stride = red.inner_stride();

  const bool columns = columns_layout(plan);
  const int64_t inner = columns ? kept.inner_size() : 1;
  const int64_t blocks_per_line = (inner + kColumns - 1) / kColumns;
  const int64_t units = columns ? (n_out / inner) * blocks_per_line : n_out;
  const int64_t width = columns ? std::min(inner, kColumns) : 1;  // outputs per unit (at most)

  // Work unit u covers outputs [first, first + count): one output for rows, a block of up to
  // kColumns neighbours along the innermost kept dim for columns.
  auto unit_outputs = [&](int64_t u, int64_t& first, int64_t& count) {
    if (!columns) {
      first = u;
      count = 1;
    } else {
      const int64_t line = u / blocks_per_line, j0 = (u % blocks_per_line) * kColumns;
      first = line * inner + j0;
      count = std::min(kColumns, inner - j0);
    }
  };

  // Rows: folds reduced indices [rb, re) of output o, whose first element is base[0], into acc.
  auto fold_rows = [&](const T* base, int64_t o, int64_t rb, int64_t re, Acc& acc) {
    red.for_each_run(rb, re, [&](int64_t off, int64_t n, int64_t pos) {
      for_each_piece<T, V>(base + off, n, red_stride, pos,
                           [&](const V* v, int64_t m, int64_t at) { r.row(acc, v, m, o, at); });
    });
  };

  // Folds reduced indices [rb, re) of unit u into acc[0..count).
  auto run_unit = [&](int64_t u, int64_t rb, int64_t re, Acc* acc) {
    int64_t first = 0, count = 0;
    unit_outputs(u, first, count);
    const T* base = data + kept.offset_of(first);
    if (!columns) {
      fold_rows(base, first, rb, re, acc[0]);
      return;
    }
    // Two-level cascade: rows go into `block`, which is folded into acc every kCascade rows.
    Acc block[kColumns];
    V buf[kColumns];
    int64_t in_block = 0;
    std::fill(block, block + count, r.identity());
    red.for_each_run(rb, re, [&](int64_t off, int64_t n, int64_t pos) {
      for (int64_t k = 0; k < n; ++k) {
        const T* row = base + off + k * red_stride;
        const V* v;
        if constexpr (std::is_same_v<T, V>) {
          v = row;
        } else {
          widen_block(row, 1, buf, count);
          v = buf;
        }
        r.columns(block, v, count, first, pos + k);
        if (++in_block == kCascade) {
          for (int64_t j = 0; j < count; ++j) acc[j] = r.combine(acc[j], block[j]);
          std::fill(block, block + count, r.identity());
          in_block = 0;
        }
      }
    });
    for (int64_t j = 0; j < count; ++j) acc[j] = r.combine(acc[j], block[j]);
  };

  // Split the reduced range only when there are too few units to share out: into enough
  // chunks for about kFewOutputs work items, each of at least kChunk elements.
  int64_t chunks = 1;
  if (units < kFewOutputs) {
    const int64_t by_items = (kFewOutputs + units - 1) / units;
    const int64_t by_size = std::max<int64_t>(1, n_red * width / kChunk);
    chunks = std::min(by_items, by_size);
  }
  const int64_t chunk_len = (n_red + chunks - 1) / chunks;

  if (chunks <= 1) {
    parallel_for(0, units, grain_for(n_red * width), [&](int64_t ub, int64_t ue) {
      if (!columns) {  // outputs in order, their offsets stepped rather than recomputed
        const int64_t kept_stride = kept.inner_stride();
        kept.for_each_run(ub, ue, [&](int64_t off, int64_t n, int64_t pos) {
          for (int64_t k = 0; k < n; ++k) {
            Acc acc = r.identity();
            fold_rows(data + off + k * kept_stride, pos + k, 0, n_red, acc);
            r.write(pos + k, acc);
          }
        });
        return;
      }
      Acc acc[kColumns];
      for (int64_t u = ub; u < ue; ++u) {
        int64_t first = 0, count = 0;
        unit_outputs(u, first, count);
        std::fill(acc, acc + count, r.identity());
        run_unit(u, 0, n_red, acc);
        for (int64_t j = 0; j < count; ++j) r.write(first + j, acc[j]);
      }
    });
    return;
  }

  // partial[(u * chunks + c) * width + j]: chunk c of output j of unit u.
  // (std::unique_ptr rather than std::vector, which packs bool.)
  const int64_t n_partial = units * chunks * width;
  std::unique_ptr<Acc[]> partial(new Acc[static_cast<size_t>(n_partial)]);
  std::fill(partial.get(), partial.get() + n_partial, r.identity());
  parallel_for(0, units * chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t u = item / chunks, c = item % chunks;
      run_unit(u, c * chunk_len, std::min(n_red, (c + 1) * chunk_len), partial.get() + item * width);
    }
  });
  // Pairwise combination of the chunk partials, in order (a covers earlier elements than b).
  for (int64_t u = 0; u < units; ++u) {
    int64_t first = 0, count = 0;
    unit_outputs(u, first, count);
    Acc* p = partial.get() + u * chunks * width;
    for (int64_t step = 1; step < chunks; step *= 2)
      for (int64_t c = 0; c + step < chunks; c += 2 * step)
        for (int64_t j = 0; j < count; ++j)
          p[c * width + j] = r.combine(p[c * width + j], p[(c + step) * width + j]);
    for (int64_t j = 0; j < count; ++j) r.write(first + j, p[j]);
  }
}

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
