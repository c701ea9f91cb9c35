/* Vectorised per-tensor f32 <-> u8/s8 conversions (see quantize_kernels.h). */
#include "quant/kernels/quantize_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define LOOM_QUANT_AVX512 1
#endif

#include "core/parallel.h"
#include "ops/cpu/vector_isa.h"
#include "ops/ops.h"

namespace loom::quant {
namespace {

// The dims of t ordered by decreasing stride, when t's elements fill its memory without gaps or
// overlaps (contiguous, channels-last, any permutation of a contiguous tensor); empty otherwise.
std::vector<int64_t> dense_order(const Tensor& t) {
  const int64_t nd = t.dim();
  std::vector<int64_t> order(static_cast<size_t>(nd));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  int64_t expected = 1;
  for (int64_t i = nd; i-- > 0;) {
    int64_t d = order[static_cast<size_t>(i)];
    if (t.size(d) != 1 && t.stride(d) != expected) return {};
    expected *= t.size(d);
  }
  return order;
}

// An uninitialised tensor of `dtype` with x's sizes, laid out as x when x is dense (so a
// channels-last activation stays channels-last), and the matching dense view of x.
std::pair<Tensor, Tensor> same_layout(const Tensor& x, DType dtype) {
  std::vector<int64_t> order = dense_order(x);
  if (order.empty() || x.is_contiguous()) {
    Tensor src = x.contiguous();
    return {empty(x.sizes(), TensorOptions(dtype)), src};
  }
  std::vector<int64_t> permuted_sizes, inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    permuted_sizes.push_back(x.size(order[i]));
    inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  }
  Tensor out = empty(permuted_sizes, TensorOptions(dtype)).permute(inverse);
  return {out, x};
}

void check_qparams(std::string_view op, float scale, int32_t zero_point, DType dtype) {
  LOOM_CHECK(dtype == kUInt8 || dtype == kInt8, op, ": expected dtype uint8 or int8, got ", dtype);
  LOOM_CHECK(std::isfinite(scale) && scale > 0, op, ": expected a positive finite scale, got ", scale);
  const int32_t lo = dtype == kUInt8 ? 0 : -128, hi = dtype == kUInt8 ? 255 : 127;
  LOOM_CHECK(zero_point >= lo && zero_point <= hi, op, ": zero point ", zero_point, " is outside the range [",
             lo, ", ", hi, "] of ", dtype);
}

// q[i] = clamp(round(x[i] * inv) + zp, qmin, qmax). The clamp is done in float on the
// zero-point-relative value (bounds are integers, so clamp-then-round equals round-then-clamp)
// before the conversion, which would otherwise wrap out-of-range values; NaN goes to qmin.
template <class Q>
inline void quantize_loop(const float* __restrict x, Q* __restrict q, int64_t n, float inv, int32_t zp,
                          float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * inv;
    v = v >= lo ? v : lo;
    v = v <= hi ? v : hi;
    q[i] = static_cast<Q>(static_cast<int32_t>(std::nearbyint(v)) + zp);
  }
}

template <class Q>
void quantize_range(const float* x, Q* q, int64_t n, float inv, int32_t zp) {
  const float lo = static_cast<float>(std::numeric_limits<Q>::min() - zp);
  const float hi = static_cast<float>(std::numeric_limits<Q>::max() - zp);
  int64_t i = 0;
#if LOOM_QUANT_AVX512
  const __m512 vinv = _mm512_set1_ps(inv), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  const __m512i vzp = _mm512_set1_epi32(zp);
  for (; i + 16 <= n; i += 16) {
    __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + i), vinv);
    v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);  // max(NaN, lo) = lo: vmaxps returns its 2nd operand
    // cvtps2dq rounds with the MXCSR mode: round half to even, as nearbyint.
    __m512i r = _mm512_add_epi32(_mm512_cvtps_epi32(v), vzp);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(r));
  }
#endif
  // The rest (all of it without AVX-512) in AVX2 where the CPU has it: SSE2 alone has no
  // vector rounding, so the portable build's loop would stay scalar.
  cpu::with_vector_isa([=] { quantize_loop(x + i, q + i, n - i, inv, zp, lo, hi); });
}

template <class Q>
inline void dequantize_loop(const Q* __restrict q, float* __restrict x, int64_t n, float scale, int32_t zp) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int32_t>(q[i]) - zp) * scale;
}

template <class Q>
void dequantize_range(const Q* q, float* x, int64_t n, float scale, int32_t zp) {
  int64_t i = 0;
#if LOOM_QUANT_AVX512
  const __m512 vs = _mm512_set1_ps(scale);
  const __m512i vzp = _mm512_set1_epi32(zp);
  for (; i + 16 <= n; i += 16) {
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    __m512i w = std::is_signed_v<Q> ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(w, vzp)), vs));
  }
#endif
  cpu::with_vector_isa([=] { dequantize_loop(q + i, x + i, n - i, scale, zp); });
}

// Conversions are a few cycles per element: below ~64k elements a single thread is faster
// than waking the pool.
constexpr int64_t kGrain = 65536;

}  // namespace

Tensor quantize_per_tensor_fast(const Tensor& x, float scale, int32_t zero_point, DType dtype) {
  constexpr std::string_view op = "quantize_per_tensor_fast";
  LOOM_CHECK(x.defined(), op, ": expected a defined tensor");
  LOOM_CHECK(x.is_cpu(), op, ": expected a CPU tensor, got one on ", x.device());
  LOOM_CHECK(x.dtype() == kFloat32, op, ": expected a float32 input, got ", x.dtype());
  check_qparams(op, scale, zero_point, dtype);
  auto [out, src] = same_layout(x, dtype);
  const float* in = src.data_ptr<float>();
  const float inv = 1.0f / scale;
  if (dtype == kUInt8) {
    uint8_t* q = out.data_ptr<uint8_t>();
    parallel_for(0, x.numel(), kGrain,
                 [&](int64_t b, int64_t e) { quantize_range(in + b, q + b, e - b, inv, zero_point); });
  } else {
    int8_t* q = out.data_ptr<int8_t>();
    parallel_for(0, x.numel(), kGrain,
                 [&](int64_t b, int64_t e) { quantize_range(in + b, q + b, e - b, inv, zero_point); });
  }
  return out;
}

Tensor dequantize_per_tensor_fast(const Tensor& q, float scale, int32_t zero_point) {
  constexpr std::string_view op = "dequantize_per_tensor_fast";
  LOOM_CHECK(q.defined(), op, ": expected a defined tensor");
  LOOM_CHECK(q.is_cpu(), op, ": expected a CPU tensor, got one on ", q.device());
  LOOM_CHECK(q.dtype() == kUInt8 || q.dtype() == kInt8, op, ": expected a uint8 or int8 input, got ",
             q.dtype());
  check_qparams(op, scale, zero_point, q.dtype());
  auto [out, src] = same_layout(q, kFloat32);
  float* x = out.data_ptr<float>();
  if (q.dtype() == kUInt8) {
    const uint8_t* in = src.data_ptr<uint8_t>();
    parallel_for(0, q.numel(), kGrain,
                 [&](int64_t b, int64_t e) { dequantize_range(in + b, x + b, e - b, scale, zero_point); });
  } else {
    const int8_t* in = src.data_ptr<int8_t>();
    parallel_for(0, q.numel(), kGrain,
                 [&](int64_t b, int64_t e) { dequantize_range(in + b, x + b, e - b, scale, zero_point); });
  }
  return out;
}

}  // namespace loom::quant
