/*
 * The one generic apply of the CPU elementwise kernels (elementwise_kernels.cpp), and how they
 * write large outputs.
 *
 * apply(): operands that are all contiguous (or broadcast scalars, all strides 0) run as one
 * flat range split over the OpenMP pool; anything else goes through the strided engine of
 * loops.h. Either way each chunk runs through with_vector_isa (AVX2 code in portable builds). write_out():
 * outputs of kStreamBytes or more that no input shares are computed into an L1 block and written with
 * streaming (non-temporal) stores.
 */
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/parallel.h"
#include "core/tensor.h"
#include "ops/cpu/loops.h"
#include "ops/cpu/vector_isa.h"

namespace loom::cpu {

// Outputs of at least this many bytes are written with non-temporal (streaming) stores, which
// skip the read-for-ownership of every output line. Measured on the 2-core AVX-512 VM, c = a + b
// on 2 threads: 16M floats 4.0 ms -> 2.8 ms (1 thread: 9.3 -> 5.9 ms), 1M floats 0.22 -> 0.17 ms;
// at 256K floats (1 MB) plain stores win on 2 threads (0.021 vs 0.030 ms), each half of the
// output fitting in its core's L2.
constexpr int64_t kStreamBytes = int64_t{4} << 20;
// Outputs are computed into an L1 block of this many bytes before being streamed out.
constexpr int64_t kBlockBytes = 2048;
// dst <- src, with streaming stores for the 64-byte-aligned part of dst (SSE2's where a
// portable build has nothing wider: every x86-64 CPU has them).
inline void stream_copy(void* dst, const void* src, int64_t bytes) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const int64_t misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(d) & 63);
  const int64_t head = std::min<int64_t>(bytes, (64 - misalign) & 63);
  std::memcpy(d, s, static_cast<size_t>(head));
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
#if defined(__AVX512F__)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(d), _mm512_loadu_si512(s));
#elif defined(__AVX2__)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32),
                        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32)));
#else
    for (int k = 0; k < 64; k += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + k)));
#endif
  }
  std::memcpy(d, s, static_cast<size_t>(bytes));
#else
  std::memcpy(dst, src, static_cast<size_t>(bytes));
#endif
}

// Streaming stores are weakly ordered: fence them before the pool joins and another thread
// (or the caller) reads the output.
inline void stream_fence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// Writes the n contiguous outputs at o. fill(dst, begin, len) computes outputs [begin, begin +
// len) into dst[0, len). With `stream`, each block is computed into an L1 buffer and streamed.
template <class Out, class Fill>
inline void write_out(Out* o, int64_t n, bool stream, const Fill& fill) {
  // Short runs (a strided input with a small inner dim) are not worth the fence.
  if (!stream || n * static_cast<int64_t>(sizeof(Out)) < 4 * kBlockBytes) {
    fill(o, 0, n);
    return;
  }
  constexpr int64_t kBlock = kBlockBytes / static_cast<int64_t>(sizeof(Out));
  alignas(64) unsigned char raw[kBlockBytes];
  Out* buf = reinterpret_cast<Out*>(raw);
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t len = std::min(kBlock, n - i);
    fill(buf, i, len);
    stream_copy(o + i, buf, len * static_cast<int64_t>(sizeof(Out)));
  }
  stream_fence();
}

// Stream large outputs, but not into memory that an input also reads (in place): its lines are
// already in cache, and streaming them out made c += b on 16M floats 1.8x slower.
inline bool should_stream(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  if (static_cast<int64_t>(out.nbytes()) < kStreamBytes) return false;
  for (const Tensor* t : inputs)
    if (t->shares_storage(out)) return false;
  return true;
}

inline bool all_strides_zero(const Tensor& t) {
  for (int64_t s : t.strides())
    if (s != 0) return false;
  return true;
}

// Calls loop(ptrs, byte_strides, n) over every element of same-shaped operands (operand 0 is
// the output). When every operand is contiguous or a broadcast scalar, the whole index space
// is one flat run split over the pool (no coalescing); otherwise loops.h's strided engine.
template <size_t N, class Loop>
void apply(const std::array<const Tensor*, N>& operands, int64_t grain, const Loop& loop) {
  const int64_t numel = operands[0]->numel();
  if (numel == 0) return;
  std::array<char*, N> base;
  std::array<int64_t, N> strides;
  for (size_t k = 0; k < N; ++k) {
    const Tensor& t = *operands[k];
    base[k] = static_cast<char*>(t.data_ptr());
    if (t.is_contiguous()) {
      strides[k] = static_cast<int64_t>(t.element_size());
    } else if (all_strides_zero(t)) {
      strides[k] = 0;
    } else {
      for_each_run<N>(operands, grain, loop);
      return;
    }
  }
  parallel_for(0, numel, grain, [&](int64_t begin, int64_t end) {
    std::array<char*, N> p;
    for (size_t k = 0; k < N; ++k) p[k] = base[k] + begin * strides[k];
    with_vector_isa([&] { loop(p.data(), strides.data(), end - begin); });
  });
}

}  // namespace loom::cpu
