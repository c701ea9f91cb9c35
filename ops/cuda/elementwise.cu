/*
 * CUDA elementwise kernels: unary and binary ops, comparisons, logical ops, where, clamp, gelu
 * and its backward (arange and the random fills are in factories.cu).
 *
 * One generic apply (STYLE.md rule 5, like ggml-cuda/unary.cu): a scalar functor per op, run
 * by one of two kernels over N same-shaped operands (operand 0 the output).
 *  - vectorized_kernel: every operand contiguous and 16-byte aligned; each thread loads and
 *    stores whole 16-byte vectors (AlignedVector) of the widest operand, then the tail.
 *  - strided_kernel: any strides (0 = broadcast), the offsets of each operand computed from
 *    the linear index by an OffsetCalc over the dims the host has already coalesced, in 32-bit
 *    arithmetic whenever the index and every offset fit (integer division is the cost here).
 * Functors take and return opmath values (float for the 16-bit types) and mirror
 * ops/cpu/elementwise_functors.h, quirks included (sign of NaN is 0, relu keeps NaN,
 * maximum/minimum propagate NaN, integer pow wraps and truncates negative exponents).
 */
#include <cstdint>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>
#include <utility>

#include "ops/cuda/device_math.cuh"
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/elementwise_launchers.h"
#include "ops/cuda/launch.cuh"

namespace loom::cuda {

// ---- kernels -------------------------------------------------------------------------------

namespace {

template <class M>
inline constexpr bool kIsFloat = std::is_floating_point<M>::value;

// ---- unary functors (opmath in, opmath out) ----
struct NegF {
  template <class M>
  __device__ M operator()(M x) const { return static_cast<M>(-x); }
};
struct AbsF {
  template <class M>
  __device__ M operator()(M x) const {
    if constexpr (kIsFloat<M>) {
      return m_fabs(x);
    } else if constexpr (std::is_unsigned<M>::value) {
      return x;
    } else {
      return static_cast<M>(x < 0 ? -x : x);
    }
  }
};
// -1, 0 or 1; 0 for NaN; identity on bool.
struct SignF {
  template <class M>
  __device__ M operator()(M x) const {
    if constexpr (std::is_same<M, bool>::value) {
      return x;
    } else if constexpr (std::is_unsigned<M>::value) {
      return static_cast<M>(x != 0);
    } else {
      return static_cast<M>((M(0) < x) - (x < M(0)));
    }
  }
};
// max(x, 0) with NaN kept.
struct ReluF {
  template <class M>
  __device__ M operator()(M x) const {
    if constexpr (std::is_unsigned<M>::value) {
      return x;
    } else {
      return x < M(0) ? M(0) : x;
    }
  }
};
#define LOOM_EW_UNARY(Name, expression)              \
  struct Name {                                      \
    template <class M>                               \
    __device__ M operator()(M x) const { return expression; } \
  };
LOOM_EW_UNARY(ExpF, m_exp(x))
LOOM_EW_UNARY(LogF, m_log(x))
LOOM_EW_UNARY(Log1pF, m_log1p(x))
LOOM_EW_UNARY(SqrtF, m_sqrt(x))
LOOM_EW_UNARY(RsqrtF, M(1) / m_sqrt(x))
LOOM_EW_UNARY(SinF, m_sin(x))
LOOM_EW_UNARY(CosF, m_cos(x))
LOOM_EW_UNARY(TanhF, m_tanh(x))
LOOM_EW_UNARY(SigmoidF, M(1) / (M(1) + m_exp(-x)))
LOOM_EW_UNARY(SiluF, x / (M(1) + m_exp(-x)))
// x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
LOOM_EW_UNARY(GeluF, M(0.5) * x * (M(1) + m_erf(x * M(0.70710678118654752440))))
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
LOOM_EW_UNARY(GeluTanhF, M(0.5) * x * (M(1) + m_tanh(M(0.79788456080286535588) * (x + M(0.044715) * x * x * x))))
#undef LOOM_EW_UNARY

struct LogicalNotF {
  template <class M>
  __device__ bool operator()(M x) const { return !(x != M(0)); }
};

// max(x, lo) then min(., hi): hi wins when lo > hi, NaN inputs stay NaN; a NaN bound (floating
// only) makes every result NaN, as torch.clamp.
template <class M>
struct ClampF {
  M lo, hi;
  bool nan_bound;
  __device__ M operator()(M x) const {
    if constexpr (kIsFloat<M>) {
      if (nan_bound) return quiet_nan(M{});
    }
    const M t = x < lo ? lo : x;
    return t > hi ? hi : t;
  }
};

// grad * gelu'(x).
//   erf form:  Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
//   tanh form: 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 a x^2), t = tanh(k (x + a x^3))
struct GeluBackwardF {
  bool tanh_approximation;
  template <class M>
  __device__ M operator()(M g, M x) const {
    if (tanh_approximation) {
      const M k = M(0.79788456080286535588), a = M(0.044715);
      const M t = m_tanh(k * (x + a * (x * x * x)));
      return g * (M(0.5) * (M(1) + t) + M(0.5) * x * (M(1) - t * t) * k * (M(1) + M(3) * a * (x * x)));
    }
    const M inv_sqrt_2pi = M(0.39894228040143267794);
    return g * (M(0.5) * (M(1) + m_erf(x * M(0.70710678118654752440))) +
                x * inv_sqrt_2pi * m_exp(M(-0.5) * (x * x)));
  }
};

// self <= threshold ? 0 : grad, with the threshold already in self's dtype (then opmath).
template <class M>
struct ThresholdBackwardF {
  M threshold;
  __device__ M operator()(M g, M x) const { return x <= threshold ? M(0) : g; }
};

// ---- binary functors ----
struct AddF {
  template <class M>
  __device__ M operator()(M a, M b) const {
    if constexpr (std::is_same<M, bool>::value) {
      return a || b;
    } else {
      return static_cast<M>(a + b);
    }
  }
};
struct SubF {
  template <class M>
  __device__ M operator()(M a, M b) const { return static_cast<M>(a - b); }
};
struct MulF {
  template <class M>
  __device__ M operator()(M a, M b) const {
    if constexpr (std::is_same<M, bool>::value) {
      return a && b;
    } else {
      return static_cast<M>(a * b);
    }
  }
};
struct DivF {
  template <class M>
  __device__ M operator()(M a, M b) const { return a / b; }
};
struct MaximumF {
  template <class M>
  __device__ M operator()(M a, M b) const {
    if constexpr (kIsFloat<M>) {
      return (a > b || a != a) ? a : b;  // NaN wins
    } else {
      return a > b ? a : b;
    }
  }
};
struct MinimumF {
  template <class M>
  __device__ M operator()(M a, M b) const {
    if constexpr (kIsFloat<M>) {
      return (a < b || a != a) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

// Integer power by squaring, wrapping on overflow; a negative exponent gives 1 / base
// truncated: 1 for base 1, +-1 for base -1, 0 otherwise (the CPU's int_pow).
template <class T>
__device__ T int_pow(T base, T exp) {
  if constexpr (std::is_signed<T>::value) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  using U = typename std::make_unsigned<T>::type;
  U result = 1, b = static_cast<U>(base);
  U e = static_cast<U>(exp);
  while (e) {
    if (e & 1u) result = static_cast<U>(result * b);
    e = static_cast<U>(e >> 1);
    b = static_cast<U>(b * b);
  }
  return static_cast<T>(result);
}

// With one broadcast exponent the CPU takes PyTorch's shortcuts (x*x for 2, sqrt for 0.5, ...);
// `scalar_b` takes the same ones, so that results agree to the bit where the CPU's do.
struct PowF {
  bool scalar_b;
  template <class M>
  __device__ M operator()(M a, M b) const {
    if constexpr (kIsFloat<M>) {
      if (scalar_b) {
        if (b == M(2)) return a * a;
        if (b == M(3)) return a * a * a;
        if (b == M(1)) return a;
        if (b == M(-1)) return M(1) / a;
        if (b == M(-2)) return M(1) / (a * a);
        if (b == M(0.5)) return m_sqrt(a);
        if (b == M(-0.5)) return M(1) / m_sqrt(a);
      }
      return m_pow(a, b);
    } else {
      return int_pow(a, b);
    }
  }
};

#define LOOM_EW_PREDICATE(Name, expression)            \
  struct Name {                                        \
    template <class M>                                 \
    __device__ bool operator()(M a, M b) const { return expression; } \
  };
LOOM_EW_PREDICATE(EqF, a == b)
LOOM_EW_PREDICATE(NeF, a != b)
LOOM_EW_PREDICATE(LtF, a < b)
LOOM_EW_PREDICATE(LeF, a <= b)
LOOM_EW_PREDICATE(GtF, a > b)
LOOM_EW_PREDICATE(GeF, a >= b)
LOOM_EW_PREDICATE(LogicalAndF, (a != M(0)) && (b != M(0)))
LOOM_EW_PREDICATE(LogicalOrF, (a != M(0)) || (b != M(0)))
#undef LOOM_EW_PREDICATE

// Runs an opmath functor on storage values: 16-bit inputs widen to float, the result is
// rounded to Out.
template <class Out, class Op>
struct OnOpmath {
  Op op;
  template <class... T>
  __device__ Out operator()(T... x) const { return convert<Out>(op(to_opmath(x)...)); }
};

struct WhereF {
  template <class T>
  __device__ T operator()(bool c, T a, T b) const { return c ? a : b; }
};

// ---- the generic apply ----

// Fully unrolled loops over kMaxDims: with constant indices nvcc keeps OffsetCalc in
// registers/parameter space instead of copying it to local memory (a 128-byte stack frame per
// thread, as ptxas reported for the runtime-bounded loop).
#if defined(__CUDACC__)
#define LOOM_EW_UNROLL _Pragma("unroll")
#else
#define LOOM_EW_UNROLL
#endif

// Offsets of N operands at a linear index, over the coalesced dims (stored innermost first).
template <class Index, int N>
struct OffsetCalc {
  int ndim;
  Index sizes[kMaxDims];
  Index strides[kMaxDims][N];

  __device__ void get(Index i, Index* off) const {
    LOOM_EW_UNROLL
    for (int k = 0; k < N; ++k) off[k] = 0;
    LOOM_EW_UNROLL
    for (int d = 0; d < kMaxDims; ++d) {
      if (d == ndim) break;
      const Index idx = i % sizes[d];
      i /= sizes[d];
      LOOM_EW_UNROLL
      for (int k = 0; k < N; ++k) off[k] += idx * strides[d][k];
    }
  }
};

template <class F, class Out, class Index, size_t... I, class... In>
__device__ inline void store_at(const F& f, Out* out, const Index* off, std::index_sequence<I...>, const In*... in) {
  out[off[0]] = f(in[off[I + 1]]...);
}

template <class Index, class F, class Out, class... In>
__global__ void strided_kernel(F f, OffsetCalc<Index, 1 + sizeof...(In)> calc, Index numel, Out* out,
                               const In*... in) {
  const Index step = static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < numel; i += step) {
    Index off[1 + sizeof...(In)];
    calc.get(i, off);
    store_at(f, out, off, std::index_sequence_for<In...>{}, in...);
  }
}

// kVec elements of T as one aligned unit: one 16-byte load or store for the widest operand.
template <class T, int kVec>
struct alignas(sizeof(T) * kVec) AlignedVector {
  T val[kVec];
};

// The vectors of every input at vector index v, and f applied to their j-th lanes.
template <int kVec, class... T>
struct VecLoads;
template <int kVec>
struct VecLoads<kVec> {
  __device__ explicit VecLoads(int64_t) {}
  template <class F, class... V>
  __device__ auto apply(int, const F& f, const V&... v) const {
    return f(v...);
  }
};
template <int kVec, class T, class... Rest>
struct VecLoads<kVec, T, Rest...> {
  AlignedVector<T, kVec> head;
  VecLoads<kVec, Rest...> rest;
  __device__ VecLoads(int64_t v, const T* p, const Rest*... ps)
      : head(reinterpret_cast<const AlignedVector<T, kVec>*>(p)[v]), rest(v, ps...) {}
  template <class F, class... V>
  __device__ auto apply(int j, const F& f, const V&... v) const {
    return rest.apply(j, f, v..., head.val[j]);
  }
};

template <int kVec, class F, class Out, class... In>
__global__ void vectorized_kernel(F f, int64_t numel, Out* out, const In*... in) {
  const int64_t nvec = numel / kVec;
  const int64_t start = blockIdx.x * int64_t{blockDim.x} + threadIdx.x, step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t v = start; v < nvec; v += step) {
    const VecLoads<kVec, In...> loads(v, in...);
    AlignedVector<Out, kVec> result;
    for (int j = 0; j < kVec; ++j) result.val[j] = loads.apply(j, f);
    reinterpret_cast<AlignedVector<Out, kVec>*>(out)[v] = result;
  }
  for (int64_t i = nvec * kVec + start; i < numel; i += step) out[i] = f(in[i]...);
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

namespace {

constexpr int kBlock = 256;

template <class T>
bool aligned_to(const T* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

template <class Index, int N>
OffsetCalc<Index, N> offset_calc(const ElementwiseLayout& l) {
  OffsetCalc<Index, N> c{};
  c.ndim = l.ndim;
  for (int d = 0; d < l.ndim; ++d) {
    const int src = l.ndim - 1 - d;  // innermost first
    c.sizes[d] = static_cast<Index>(l.sizes[src]);
    for (int k = 0; k < N; ++k) c.strides[d][k] = static_cast<Index>(l.strides[k][src]);
  }
  return c;
}

// out[i] = f(in[i]...) over the layout: the vectorised kernel when every operand is contiguous
// and aligned to its vector, else the strided one (32-bit index math when everything fits).
template <class F, class Out, class... In>
cudaError_t apply(const F& f, const ElementwiseLayout& l, int64_t numel, cudaStream_t stream, Out* out,
                  const In*... in) {
  constexpr int N = 1 + sizeof...(In);
  if (numel == 0) return cudaSuccess;
  if (l.noperands != N || l.ndim > kMaxDims) return cudaErrorInvalidValue;
  bool contiguous = true;
  for (int k = 0; k < N && l.ndim > 0; ++k) contiguous = contiguous && l.ndim == 1 && l.strides[k][0] == 1;
  constexpr size_t kWidest = std::max({sizeof(Out), sizeof(In)...});
  constexpr int kVec = static_cast<int>(16 / kWidest);
  if (contiguous && numel >= kVec && aligned_to(out, sizeof(Out) * kVec) &&
      (aligned_to(in, sizeof(In) * kVec) && ...)) {
    return launch<vectorized_kernel<kVec, F, Out, In...>>(
        grid_stride((numel + kVec - 1) / kVec, stream, kBlock), f, numel, out,
        in...);
  }
  // 32-bit math needs the index plus one grid stride, and every operand's furthest offset, to
  // fit in int32.
  constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
  bool small = numel <= kInt32Max - int64_t{kBlock} * 4096;
  for (int k = 0; k < N; ++k) {
    int64_t reach = 0;
    for (int d = 0; d < l.ndim; ++d) reach += (l.sizes[d] - 1) * std::llabs(l.strides[k][d]);
    small = small && reach <= kInt32Max;
  }
  const LaunchConfig config = grid_stride(numel, stream, kBlock);
  if (small) {
    return launch<strided_kernel<int32_t, F, Out, In...>>(config, f, offset_calc<int32_t, N>(l),
                                                          static_cast<int32_t>(numel), out, in...);
  }
  return launch<strided_kernel<int64_t, F, Out, In...>>(config, f, offset_calc<int64_t, N>(l), numel, out, in...);
}

}  // namespace

cudaError_t launch_unary(UnaryOp op, int dtype, void* out, const void* in, const ElementwiseLayout& layout,
                         int64_t numel, cudaStream_t stream) {
  // f applied to T -> T for the dtypes `visit` accepts.
  auto same_type = [&](auto f, auto visit) {
    return visit(dtype, [&](auto t) {
      using T = decltype(t);
      return apply(OnOpmath<T, decltype(f)>{f}, layout, numel, stream, static_cast<T*>(out),
                   static_cast<const T*>(in));
    });
  };
  auto numeric = [](int code, auto&& g) { return visit_numeric_code(code, g); };
  auto floating = [](int code, auto&& g) { return visit_floating_code(code, g); };
  auto all = [](int code, auto&& g) { return visit_code(code, g); };
  switch (op) {
    case UnaryOp::kNeg: return same_type(NegF{}, numeric);
    case UnaryOp::kAbs: return same_type(AbsF{}, numeric);
    case UnaryOp::kSign: return same_type(SignF{}, all);
    case UnaryOp::kRelu: return same_type(ReluF{}, numeric);
    case UnaryOp::kExp: return same_type(ExpF{}, floating);
    case UnaryOp::kLog: return same_type(LogF{}, floating);
    case UnaryOp::kLog1p: return same_type(Log1pF{}, floating);
    case UnaryOp::kSqrt: return same_type(SqrtF{}, floating);
    case UnaryOp::kRsqrt: return same_type(RsqrtF{}, floating);
    case UnaryOp::kSin: return same_type(SinF{}, floating);
    case UnaryOp::kCos: return same_type(CosF{}, floating);
    case UnaryOp::kTanh: return same_type(TanhF{}, floating);
    case UnaryOp::kSigmoid: return same_type(SigmoidF{}, floating);
    case UnaryOp::kSilu: return same_type(SiluF{}, floating);
    case UnaryOp::kGelu: return same_type(GeluF{}, floating);
    case UnaryOp::kGeluTanh: return same_type(GeluTanhF{}, floating);
    case UnaryOp::kLogicalNot:
      return visit_code(dtype, [&](auto t) {
        using T = decltype(t);
        return apply(OnOpmath<bool, LogicalNotF>{}, layout, numel, stream, static_cast<bool*>(out),
                     static_cast<const T*>(in));
      });
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_binary(BinaryOp op, int dtype, void* out, const void* a, const void* b,
                          const ElementwiseLayout& layout, int64_t numel, bool pow_scalar_b, cudaStream_t stream) {
  // f applied to (T, T) -> Out (T, or bool for predicates) for the dtypes `visit` accepts.
  auto run = [&](auto f, auto visit, auto out_tag) {
    return visit(dtype, [&](auto t) {
      using T = decltype(t);
      using Out = typename std::conditional<std::is_same<decltype(out_tag), bool>::value, bool, T>::type;
      return apply(OnOpmath<Out, decltype(f)>{f}, layout, numel, stream, static_cast<Out*>(out),
                   static_cast<const T*>(a), static_cast<const T*>(b));
    });
  };
  auto numeric = [](int code, auto&& g) { return visit_numeric_code(code, g); };
  auto floating = [](int code, auto&& g) { return visit_floating_code(code, g); };
  auto all = [](int code, auto&& g) { return visit_code(code, g); };
  const int same = 0;  // out_tag: the input dtype
  const bool predicate = false;
  switch (op) {
    case BinaryOp::kAdd: return run(AddF{}, all, same);
    case BinaryOp::kSub: return run(SubF{}, numeric, same);
    case BinaryOp::kMul: return run(MulF{}, all, same);
    case BinaryOp::kDiv: return run(DivF{}, floating, same);
    case BinaryOp::kPow: return run(PowF{pow_scalar_b}, numeric, same);
    case BinaryOp::kMaximum: return run(MaximumF{}, all, same);
    case BinaryOp::kMinimum: return run(MinimumF{}, all, same);
    case BinaryOp::kEq: return run(EqF{}, all, predicate);
    case BinaryOp::kNe: return run(NeF{}, all, predicate);
    case BinaryOp::kLt: return run(LtF{}, all, predicate);
    case BinaryOp::kLe: return run(LeF{}, all, predicate);
    case BinaryOp::kGt: return run(GtF{}, all, predicate);
    case BinaryOp::kGe: return run(GeF{}, all, predicate);
    case BinaryOp::kLogicalAnd: return run(LogicalAndF{}, all, predicate);
    case BinaryOp::kLogicalOr: return run(LogicalOrF{}, all, predicate);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_clamp(int dtype, void* out, const void* in, const ElementwiseLayout& layout, int64_t numel,
                         const ClampBounds& bounds, cudaStream_t stream) {
  return visit_numeric_code(dtype, [&](auto t) {
    using T = decltype(t);
    using M = opmath_t<T>;
    ClampF<M> f{std::numeric_limits<M>::lowest(), std::numeric_limits<M>::max(), false};
    if constexpr (kIsFloat<M>) {
      if (bounds.has_min) f.lo = static_cast<M>(bounds.min_float);
      if (bounds.has_max) f.hi = static_cast<M>(bounds.max_float);
      f.nan_bound = (bounds.has_min && std::isnan(bounds.min_float)) || (bounds.has_max && std::isnan(bounds.max_float));
    } else {
      if (bounds.has_min) f.lo = static_cast<M>(bounds.min_int);
      if (bounds.has_max) f.hi = static_cast<M>(bounds.max_int);
    }
    return apply(OnOpmath<T, ClampF<M>>{f}, layout, numel, stream, static_cast<T*>(out), static_cast<const T*>(in));
  });
}

cudaError_t launch_gelu_backward(int dtype, void* out, const void* grad, const void* x, const ElementwiseLayout& layout,
                                 int64_t numel, bool tanh_approximation, cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    return apply(OnOpmath<T, GeluBackwardF>{GeluBackwardF{tanh_approximation}}, layout, numel, stream,
                 static_cast<T*>(out), static_cast<const T*>(grad), static_cast<const T*>(x));
  });
}

cudaError_t launch_threshold_backward(int dtype, void* out, const void* grad, const void* self,
                                      const ElementwiseLayout& layout, int64_t numel, double threshold,
                                      cudaStream_t stream) {
  return visit_floating_code(dtype, [&](auto t) {
    using T = decltype(t);
    using M = opmath_t<T>;
    // Rounded to self's dtype first, as PyTorch compares.
    const ThresholdBackwardF<M> f{to_opmath(convert<T>(threshold))};
    return apply(OnOpmath<T, ThresholdBackwardF<M>>{f}, layout, numel, stream, static_cast<T*>(out),
                 static_cast<const T*>(grad), static_cast<const T*>(self));
  });
}

cudaError_t launch_where(int dtype, void* out, const void* cond, const void* a, const void* b,
                         const ElementwiseLayout& layout, int64_t numel, cudaStream_t stream) {
  return visit_code(dtype, [&](auto t) {
    using T = decltype(t);
    return apply(WhereF{}, layout, numel, stream, static_cast<T*>(out), static_cast<const bool*>(cond),
                 static_cast<const T*>(a), static_cast<const T*>(b));
  });
}

}  // namespace loom::cuda
