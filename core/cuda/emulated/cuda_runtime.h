/*
 * Emulated CUDA, device side: the CUDA C++ programming model on the CPU, for the same .cu
 * sources that nvcc compiles (see emulator.h for how a launch runs and cuda_runtime_api.h for
 * why this exists). Execution-space keywords vanish; the built-in index variables read the
 * calling thread's position; barriers, warp intrinsics and atomics keep their CUDA semantics,
 * and a use that CUDA leaves undefined (a barrier that not all threads reach, a warp mask that
 * names an exited lane) is reported as an error instead of hanging or reading garbage.
 */
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_runtime_api.h"
#include "emulator.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
// Blocks of a cooperative launch run one after another, so one static array per kernel is a
// correct per-block shared memory (emulator.h); dynamic shared memory comes from
// loom_emu::dynamic_shared_memory() through ops/cuda/device_utils.cuh.
#define __shared__ static

#define threadIdx (::loom_emu::position().thread_idx)
#define blockIdx (::loom_emu::position().block_idx)
#define blockDim (::loom_emu::position().block_dim)
#define gridDim (::loom_emu::position().grid_dim)
inline constexpr int warpSize = 32;

#define __syncthreads() ::loom_emu::syncthreads(__FILE__, __LINE__)
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::loom_emu::syncwarp(mask); }
inline unsigned __activemask() { return ::loom_emu::active_mask(); }
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return ::loom_emu::warp_vote(mask, predicate != 0, "__ballot_sync");
}
inline int __any_sync(unsigned mask, int predicate) {
  return ::loom_emu::warp_vote(mask, predicate != 0, "__any_sync") != 0;
}
inline int __all_sync(unsigned mask, int predicate) {
  return (::loom_emu::warp_vote(mask, predicate != 0, "__all_sync") & mask) == mask;
}

namespace loom_emu {
inline unsigned lane_id() {
  const ThreadPosition& p = position();
  unsigned linear = p.thread_idx.x + p.block_dim.x * (p.thread_idx.y + p.block_dim.y * p.thread_idx.z);
  return linear % 32u;
}
// Exchanges one value of up to 8 bytes within the warp: every lane of `mask` takes part and
// receives the value of `source` (its own lane number when the source lies outside its segment).
template <class T>
T shuffle(unsigned mask, T var, int source, const char* what) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffles move values of up to 8 bytes");
  uint64_t in = 0, out = 0;
  std::memcpy(&in, &var, sizeof(T));
  warp_exchange(mask, in, source, &out, what);
  T result;
  std::memcpy(&result, &out, sizeof(T));
  return result;
}
}  // namespace loom_emu

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  int lane = static_cast<int>(loom_emu::lane_id());
  return loom_emu::shuffle(mask, var, (lane & ~(width - 1)) + (src_lane & (width - 1)), "__shfl_sync");
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  int lane = static_cast<int>(loom_emu::lane_id());
  int src = lane ^ lane_mask;
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
  return loom_emu::shuffle(mask, var, src, "__shfl_xor_sync");
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  int lane = static_cast<int>(loom_emu::lane_id());
  int src = (lane % width) + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane;
  return loom_emu::shuffle(mask, var, src, "__shfl_down_sync");
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  int lane = static_cast<int>(loom_emu::lane_id());
  int src = (lane % width) >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane;
  return loom_emu::shuffle(mask, var, src, "__shfl_up_sync");
}

// ---- atomics: the GCC builtins, which ThreadSanitizer understands -------------------------
template <class T>
T loom_emu_atomic_add_int(T* address, T value) {
  return __atomic_fetch_add(address, value, __ATOMIC_SEQ_CST);
}
inline int atomicAdd(int* a, int v) { return loom_emu_atomic_add_int(a, v); }
inline unsigned atomicAdd(unsigned* a, unsigned v) { return loom_emu_atomic_add_int(a, v); }
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return loom_emu_atomic_add_int(a, v);
}
template <class F, class Bits, class Op>
F loom_emu_atomic_float(F* address, Op op) {
  static_assert(sizeof(F) == sizeof(Bits), "bit pattern of the float");
  Bits* word = reinterpret_cast<Bits*>(address);
  Bits expected = __atomic_load_n(word, __ATOMIC_RELAXED);
  for (;;) {
    F old;
    std::memcpy(&old, &expected, sizeof(F));
    F updated = op(old);
    Bits desired;
    std::memcpy(&desired, &updated, sizeof(F));
    if (__atomic_compare_exchange_n(word, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) return old;
  }
}
inline float atomicAdd(float* a, float v) {
  return loom_emu_atomic_float<float, uint32_t>(a, [v](float old) { return old + v; });
}
inline double atomicAdd(double* a, double v) {
  return loom_emu_atomic_float<double, uint64_t>(a, [v](double old) { return old + v; });
}
template <class T, class Op>
T loom_emu_atomic_update(T* address, Op op) {
  T expected = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(address, &expected, op(expected), false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
  return expected;  // the old value
}
inline int atomicMax(int* a, int v) { return loom_emu_atomic_update(a, [v](int o) { return o < v ? v : o; }); }
inline int atomicMin(int* a, int v) { return loom_emu_atomic_update(a, [v](int o) { return v < o ? v : o; }); }
inline unsigned atomicMax(unsigned* a, unsigned v) {
  return loom_emu_atomic_update(a, [v](unsigned o) { return o < v ? v : o; });
}
inline unsigned atomicOr(unsigned* a, unsigned v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }
inline int atomicOr(int* a, int v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }
inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicExch(unsigned* a, unsigned v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }
template <class T>
T loom_emu_atomic_cas(T* a, T compare, T value) {
  __atomic_compare_exchange_n(a, &compare, value, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return compare;  // the old value, whether or not it was replaced
}
inline int atomicCAS(int* a, int c, int v) { return loom_emu_atomic_cas(a, c, v); }
inline unsigned atomicCAS(unsigned* a, unsigned c, unsigned v) { return loom_emu_atomic_cas(a, c, v); }
inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c, unsigned long long v) {
  return loom_emu_atomic_cas(a, c, v);
}
inline unsigned short atomicCAS(unsigned short* a, unsigned short c, unsigned short v) {
  return loom_emu_atomic_cas(a, c, v);
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ---- device math and bit casts that the host library lacks -------------------------------
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __int_as_float(int v) { float f; std::memcpy(&f, &v, 4); return f; }
inline int __float_as_int(float f) { int v; std::memcpy(&v, &f, 4); return v; }
inline float __uint_as_float(unsigned v) { float f; std::memcpy(&f, &v, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned v; std::memcpy(&v, &f, 4); return v; }
inline double __longlong_as_double(long long v) { double d; std::memcpy(&d, &v, 8); return d; }
inline long long __double_as_longlong(double d) { long long v; std::memcpy(&v, &d, 8); return v; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
template <class T>
T __ldg(const T* p) { return *p; }

// CUDA's device code has min/max overloads in the global namespace.
#define LOOM_EMU_MINMAX(T)                                   \
  inline T min(T a, T b) { return b < a ? b : a; }          \
  inline T max(T a, T b) { return a < b ? b : a; }
LOOM_EMU_MINMAX(int)
LOOM_EMU_MINMAX(unsigned)
LOOM_EMU_MINMAX(long)
LOOM_EMU_MINMAX(unsigned long)
LOOM_EMU_MINMAX(long long)
LOOM_EMU_MINMAX(unsigned long long)
#undef LOOM_EMU_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

// ---- vector types -------------------------------------------------------------------------
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(16) double2 { double x, y; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
